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
//
// A background thread gathers (and augments, data/augment.hpp) the next batch
// into a second set of buffers while the current one is in use, so a step
// does not wait for the host-side shuffle, augmentation and copy (only the
// copy to the device, when there is one). One thread is enough: gathering
// and augmenting a batch of 128 Fashion-MNIST images takes well under 1% of
// a CNN step (docs/benchmarks.md, W4's data-wait column).
#pragma once

#include "backends/kokkos.hpp"
#include "data/augment.hpp"
#include "data/dataset.hpp"
#include "layers/loss.hpp"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::data {

// One batch in device memory; views into the loader's buffers, valid until
// the loader fills the next batch.
template <class T>
struct Batch {
  ConstMatrix<T> x;    // (size, features)
  Targets<T> targets;  // labels (size x label width) or values (size, target width)
  std::size_t first_row = 0;  // position of row 0 in the global batch
  std::size_t size() const { return x.extent(0); }
};

template <class T>
class BatchLoader {
 public:
  // batch: rows per batch; the last batch of an epoch may be smaller unless
  // drop_last. shuffle: a new seeded permutation every epoch.
  BatchLoader(const Dataset& data, std::size_t batch, bool shuffle, std::uint64_t seed,
              bool drop_last = false, int rank = 0, int ranks = 1);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Augments every training sample this loader gathers from now on (checked
  // against the data set's shape).
  void set_augment(const Augment& augment);

  std::size_t batches_per_epoch() const;
  std::size_t batch_size() const { return batch_; }
  // Positions the loader at batch `index` of epoch `epoch`.
  void seek(std::size_t epoch, std::size_t index = 0);
  // Copies this rank's shard of the batch at the current position to the
  // device and advances. Returns `false` after the epoch's last batch. The
  // batch stays valid until the next call of next().
  bool next(Batch<T>& out);
  // Samples in the global batch of the last next() (all ranks together).
  std::size_t global_size() const { return global_size_; }
  // Rows [first, first + count) of a global batch of `size` that rank r takes.
  static std::pair<std::size_t, std::size_t> shard(std::size_t size, int r, int ranks);
  std::size_t epoch() const { return epoch_; }
  std::size_t index() const { return index_; }

 private:
  // Device buffers of one batch and their host mirrors (the same memory when
  // the device is the host).
  struct Slot {
    MatrixBuffer<T> x, values;
    LabelsBuffer labels;
    typename MatrixBuffer<T>::HostMirror x_host, values_host;
    typename LabelsBuffer::HostMirror labels_host;
    std::size_t epoch = 0, index = 0, rows = 0, global = 0, offset = 0;
    bool filled = false;  // holds batch (epoch, index)
  };
  void make_permutation();
  // Gathers batch (epoch_, index) of the current permutation into slot s's
  // host buffers (no Kokkos calls: runs on the background thread too).
  void gather(Slot& s, std::size_t index);
  void wait_idle();
  void run_worker();

  const Dataset& data_;
  std::size_t batch_;
  bool shuffle_, drop_last_;
  std::uint64_t seed_;
  Augment augment_;
  int rank_, ranks_;
  std::size_t epoch_ = 0, index_ = 0, global_size_ = 0;
  std::vector<std::size_t> order_;
  Slot slots_[2];
  int current_ = 1;  // slot of the batch returned last
  // Background gathering: one job at a time into the slot not in use.
  std::mutex mutex_;
  std::condition_variable cv_;
  bool job_ = false, stop_ = false;
  int job_slot_ = 0;
  std::size_t job_index_ = 0;
  std::thread worker_;
};

// Permutation of [0, n) for (seed, epoch): Fisher-Yates on counter-based
// random numbers.
std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed, std::size_t epoch);

}  // namespace strata::data
