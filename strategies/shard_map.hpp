// How the ZeRO stages split a stage's flat buffers over its data-parallel
// group: in units, runs of parameter pieces (layers/param_pieces.hpp: the
// leaf layers holding parameters) of about `unit_elements` values (the
// gradient buckets), each padded to a multiple of the group size and cut
// into equal slices; rank r owns slice r of every unit (the layout of
// PyTorch FSDP's flat parameters, one per unit). A rank's shard is its
// slices side by side, in flat order: gradients are reduce-scattered into
// it unit by unit as backward completes each unit, the optimizer updates it
// as one contiguous vector, and the updated slices are all-gathered back.
//
//   flat   | unit 0 (len 5)    | unit 1 (len 4) |        ranks = 2
//          | a a a b b         | c c d d        |
//   rank 0 shard: a a a c c     rank 1 shard: b b - d d   (- : padding, zero)
//
// Units are piece-aligned so that a unit's layers can bind their values in
// the unit's own buffer (ZeRO-2's gradients, ZeRO-3's gathered parameters).
#pragma once

#include <cstddef>
#include <vector>

namespace strata {

struct ShardUnit {
  std::size_t first = 0, last = 0;  // flat values [first, last)
  std::size_t first_piece = 0, last_piece = 0;  // the pieces [first_piece, last_piece) it holds
  std::size_t slice = 0;            // values per rank: ceil((last - first) / ranks)
  std::size_t shard = 0;            // where each rank's slice begins in its shard
  std::size_t size() const { return last - first; }
};

// A rank's values [flat, flat + count) of the flat buffer, at [shard, shard +
// count) of its shard.
struct ShardPiece {
  std::size_t flat = 0, count = 0, shard = 0;
};

class ShardMap {
 public:
  // offsets: the pieces' first values in the flat buffer and its end
  // (Sequential::piece_offsets); unit_elements: the least size of a unit
  // (0: one unit for everything); ranks: the group size; alone: the pieces
  // that are a unit by themselves (empty: none); at_most: unit_elements is
  // the most a unit holds instead of the least (a unit closes before the
  // piece that would take it past). Pieces without values join a neighbour;
  // a piece larger than unit_elements is a unit of its own.
  ShardMap(const std::vector<std::size_t>& offsets, std::size_t unit_elements, int ranks,
           const std::vector<bool>& alone = {}, bool at_most = false);

  int ranks() const { return ranks_; }
  // Units in flat order.
  const std::vector<ShardUnit>& units() const { return units_; }
  // Values of every rank's shard, padding included.
  std::size_t shard_size() const { return shard_size_; }
  std::size_t flat_size() const { return flat_size_; }
  // Values of the padded copies of the units whose size the group does not
  // divide (what a reduce-scatter or an allgather of them needs beside).
  std::size_t uneven_padded() const;
  // Rank r's pieces of the flat buffer, in flat order (padding left out).
  // Over all ranks they cover the flat buffer once.
  std::vector<ShardPiece> pieces(int rank) const;

  // The flat buffer from every rank's shard side by side (rank 0's first:
  // what an allgather of the shards gives), and rank r's shard from a flat
  // buffer (padding zero).
  template <class T>
  std::vector<T> to_flat(const std::vector<T>& shards) const;
  template <class T>
  std::vector<T> to_shard(const std::vector<T>& flat, int rank) const;

 private:
  int ranks_ = 1;
  std::vector<ShardUnit> units_;
  std::size_t shard_size_ = 0, flat_size_ = 0;
};

}  // namespace strata
