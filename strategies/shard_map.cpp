#include "strategies/shard_map.hpp"

#include "backends/error.hpp"

#include <algorithm>

namespace strata {

ShardMap::ShardMap(const std::vector<std::size_t>& offsets, std::size_t unit_elements, int ranks,
                   const std::vector<bool>& alone, bool at_most)
    : ranks_(ranks) {
  STRATA_REQUIRE(ranks > 0, config, "shard map: ", ranks, " ranks");
  STRATA_REQUIRE(!offsets.empty() && offsets.front() == 0, config,
                 "shard map: piece offsets must begin at 0");
  const std::size_t pieces = offsets.size() - 1;
  flat_size_ = offsets.back();
  STRATA_REQUIRE(alone.empty() || alone.size() == pieces, config, "shard map: ", alone.size(),
                 " flags for ", pieces, " pieces");
  auto is_alone = [&](std::size_t i) { return !alone.empty() && alone[i]; };
  // From the last piece down (backward's order), a unit closes once it holds
  // unit_elements values (at_most: before the piece that would take it past
  // them), or before a piece that is a unit alone; pieces without values
  // stay with their neighbour.
  std::vector<ShardUnit> down;
  std::size_t end_piece = pieces;
  auto close = [&](std::size_t first_piece) {
    const std::size_t first = offsets[first_piece], last = offsets[end_piece];
    if (last > first || down.empty()) {
      ShardUnit u;
      u.first = first;
      u.last = last;
      u.first_piece = first_piece;
      u.last_piece = end_piece;
      down.push_back(u);
    } else {
      down.back().first_piece = first_piece;  // only empty pieces: the unit above takes them
    }
    end_piece = first_piece;
  };
  for (std::size_t i = pieces; i > 0; --i) {
    if (is_alone(i - 1)) {
      if (end_piece > i) close(i);  // what lies above it
      close(i - 1);
      continue;
    }
    if (at_most && unit_elements > 0 && offsets[end_piece] > offsets[i] &&
        offsets[end_piece] - offsets[i - 1] > unit_elements)
      close(i);
    const std::size_t first = offsets[i - 1], last = offsets[end_piece];
    const bool full = unit_elements > 0 && last - first >= unit_elements;
    if (full || i == 1 || is_alone(i - 2)) close(i - 1);
  }
  units_.assign(down.rbegin(), down.rend());
  const auto r = static_cast<std::size_t>(ranks);
  for (ShardUnit& u : units_) {
    u.slice = (u.size() + r - 1) / r;
    u.shard = shard_size_;
    shard_size_ += u.slice;
  }
}

std::size_t ShardMap::uneven_padded() const {
  const auto r = static_cast<std::size_t>(ranks_);
  std::size_t n = 0;
  for (const ShardUnit& u : units_)
    if (u.size() % r != 0) n += u.slice * r;
  return n;
}

std::vector<ShardPiece> ShardMap::pieces(int rank) const {
  STRATA_REQUIRE(rank >= 0 && rank < ranks_, config, "shard map: rank ", rank, " of ", ranks_);
  std::vector<ShardPiece> out;
  for (const ShardUnit& u : units_) {
    const std::size_t lo = std::min(u.last, u.first + u.slice * static_cast<std::size_t>(rank));
    const std::size_t hi = std::min(u.last, lo + u.slice);
    if (hi > lo) out.push_back({lo, hi - lo, u.shard});
  }
  return out;
}

template <class T>
std::vector<T> ShardMap::to_flat(const std::vector<T>& shards) const {
  STRATA_REQUIRE(shards.size() == shard_size_ * static_cast<std::size_t>(ranks_), config,
                 "shard map: ", shards.size(), " values for ", ranks_, " shards of ", shard_size_);
  std::vector<T> flat(flat_size_);
  for (int r = 0; r < ranks_; ++r)
    for (const ShardPiece& p : pieces(r))
      std::copy_n(shards.begin() + static_cast<std::ptrdiff_t>(shard_size_ * static_cast<std::size_t>(r) + p.shard),
                  p.count, flat.begin() + static_cast<std::ptrdiff_t>(p.flat));
  return flat;
}

template <class T>
std::vector<T> ShardMap::to_shard(const std::vector<T>& flat, int rank) const {
  STRATA_REQUIRE(flat.size() == flat_size_, config, "shard map: ", flat.size(),
                 " values for a flat buffer of ", flat_size_);
  std::vector<T> shard(shard_size_, T(0));
  for (const ShardPiece& p : pieces(rank))
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(p.flat), p.count,
                shard.begin() + static_cast<std::ptrdiff_t>(p.shard));
  return shard;
}

template std::vector<float> ShardMap::to_flat(const std::vector<float>&) const;
template std::vector<double> ShardMap::to_flat(const std::vector<double>&) const;
template std::vector<float> ShardMap::to_shard(const std::vector<float>&, int) const;
template std::vector<double> ShardMap::to_shard(const std::vector<double>&, int) const;

}  // namespace strata
