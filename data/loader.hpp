// Batches from a host Dataset into device memory, with a seeded per-epoch
// shuffle. The permutation of epoch e is a pure function of (seed, e), so a
// run can be resumed at any (epoch, batch) position and every rank of a
// data-parallel job sees the same order.
//
// With ranks > 1 the loader yields this rank's shard of each global batch:
// the global batch of B samples is cut into `ranks` contiguous pieces whose
// sizes differ by at most one (the first B mod ranks pieces are larger), so
// every sample is used exactly once per epoch. A shard may be empty when the
// last global batch has fewer samples than ranks.
#pragma once

#include "backends/kokkos.hpp"
#include "data/dataset.hpp"
#include "layers/loss.hpp"

#include <cstdint>
#include <vector>

namespace strata::data {

// One batch in device memory; views into the loader's buffers, valid until
// the loader fills the next batch.
template <class T>
struct Batch {
  ConstMatrix<T> x;    // (size, features)
  Targets<T> targets;  // labels (size) or values (size, target width)
  std::size_t size() const { return x.extent(0); }
};

template <class T>
class BatchLoader {
 public:
  // batch: rows per batch; the last batch of an epoch may be smaller unless
  // drop_last. shuffle: a new seeded permutation every epoch.
  BatchLoader(const Dataset& data, std::size_t batch, bool shuffle, std::uint64_t seed,
              bool drop_last = false, int rank = 0, int ranks = 1);

  std::size_t batches_per_epoch() const;
  std::size_t batch_size() const { return batch_; }
  // Positions the loader at batch `index` of epoch `epoch`.
  void seek(std::size_t epoch, std::size_t index = 0);
  // Copies this rank's shard of the batch at the current position to the
  // device and advances. Returns `false` after the epoch's last batch.
  bool next(Batch<T>& out);
  // Samples in the global batch of the last next() (all ranks together).
  std::size_t global_size() const { return global_size_; }
  // Rows [first, first + count) of a global batch of `size` that rank r takes.
  static std::pair<std::size_t, std::size_t> shard(std::size_t size, int r, int ranks);
  std::size_t epoch() const { return epoch_; }
  std::size_t index() const { return index_; }

 private:
  void make_permutation();

  const Dataset& data_;
  std::size_t batch_;
  bool shuffle_, drop_last_;
  std::uint64_t seed_;
  int rank_, ranks_;
  std::size_t epoch_ = 0, index_ = 0, global_size_ = 0;
  std::vector<std::size_t> order_;
  MatrixBuffer<T> x_, values_;
  LabelsBuffer labels_;
  typename MatrixBuffer<T>::HostMirror x_host_, values_host_;
  typename LabelsBuffer::HostMirror labels_host_;
};

// Permutation of [0, n) for (seed, epoch): Fisher-Yates on counter-based
// random numbers.
std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed, std::size_t epoch);

}  // namespace strata::data
