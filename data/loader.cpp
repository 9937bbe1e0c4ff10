#include "data/loader.hpp"

#include "backends/error.hpp"
#include "backends/random.hpp"

#include <algorithm>
#include <numeric>

namespace strata::data {

std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed, std::size_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t(0));
  const std::uint64_t stream = random::stream_shuffle + epoch;
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = random::below(seed, stream, i, i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

template <class T>
BatchLoader<T>::BatchLoader(const Dataset& data, std::size_t batch, bool shuffle,
                            std::uint64_t seed, bool drop_last, int rank, int ranks)
    : data_(data), batch_(batch), shuffle_(shuffle), drop_last_(drop_last), seed_(seed),
      rank_(rank), ranks_(ranks) {
  STRATA_REQUIRE(batch > 0, config, "batch size must be positive");
  STRATA_REQUIRE(ranks >= 1 && rank >= 0 && rank < ranks, config, "loader: rank ", rank,
                 " of ", ranks);
  STRATA_REQUIRE(data.size() > 0, data, data.name, ": the data set has no samples");
  STRATA_REQUIRE(!data.is_classification() ||
                     (data.label_width > 0 && data.labels.size() == data.size() * data.label_width),
                 data, data.name, ": ", data.labels.size(), " labels for ", data.size(),
                 " samples of ", data.label_width, " label(s) each");
  STRATA_REQUIRE(!drop_last || data.size() >= batch, config, "batch size ", batch,
                 " is larger than the ", data.size(), " samples of ", data.name);
  // The largest shard this rank can get.
  const std::size_t rows = std::max<std::size_t>(1, shard(std::min(batch, data.size()), 0, ranks).second);
  for (Slot& s : slots_) {
    s.x = MatrixBuffer<T>("strata::batch::x", rows, data.features);
    s.x_host = Kokkos::create_mirror_view(s.x);
    if (data.is_classification()) {
      s.labels = LabelsBuffer("strata::batch::labels", rows * data.label_width);
      s.labels_host = Kokkos::create_mirror_view(s.labels);
    } else {
      s.values = MatrixBuffer<T>("strata::batch::targets", rows, data.target_width);
      s.values_host = Kokkos::create_mirror_view(s.values);
    }
  }
  seek(0, 0);
  worker_ = std::thread([this] { run_worker(); });
}

template <class T>
BatchLoader<T>::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

template <class T>
void BatchLoader<T>::set_augment(const Augment& augment) {
  augment.check(data_);
  wait_idle();  // the worker reads augment_
  augment_ = augment;
  for (Slot& s : slots_) s.filled = false;
}

template <class T>
std::size_t BatchLoader<T>::batches_per_epoch() const {
  const std::size_t n = data_.size();
  return drop_last_ ? n / batch_ : (n + batch_ - 1) / batch_;
}

template <class T>
std::pair<std::size_t, std::size_t> BatchLoader<T>::shard(std::size_t size, int r, int ranks) {
  const std::size_t n = static_cast<std::size_t>(ranks), k = static_cast<std::size_t>(r);
  const std::size_t base = size / n, extra = size % n;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

template <class T>
void BatchLoader<T>::make_permutation() {
  if (shuffle_) {
    order_ = shuffled_order(data_.size(), seed_, epoch_);
  } else if (order_.size() != data_.size()) {
    order_.resize(data_.size());
    std::iota(order_.begin(), order_.end(), std::size_t(0));
  }
}

template <class T>
void BatchLoader<T>::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !job_; });
}

template <class T>
void BatchLoader<T>::seek(std::size_t epoch, std::size_t index) {
  if (epoch == epoch_ && index == index_ && !order_.empty()) return;
  wait_idle();  // the worker reads order_
  const bool new_epoch = epoch != epoch_ || order_.empty();
  epoch_ = epoch;
  index_ = index;
  if (new_epoch) {
    make_permutation();
    for (Slot& s : slots_) s.filled = false;
  }
}

template <class T>
void BatchLoader<T>::gather(Slot& slot, std::size_t index) {
  const std::size_t global = std::min(batch_, data_.size() - index * batch_);
  const auto [offset, rows] = shard(global, rank_, ranks_);
  const std::size_t first = index * batch_ + offset;
  const std::size_t f = data_.features;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t s = order_[first + r];
    const float* src = data_.x.data() + s * f;
    T* dst = slot.x_host.data() + r * f;
    if (augment_.active())
      augment_.apply(src, dst, data_.shape, seed_, epoch_, s);
    else
      for (std::size_t j = 0; j < f; ++j) dst[j] = static_cast<T>(src[j]);
    if (data_.is_classification()) {
      const std::size_t w = data_.label_width;
      for (std::size_t j = 0; j < w; ++j) slot.labels_host(r * w + j) = data_.labels[s * w + j];
    } else {
      const std::size_t w = data_.target_width;
      for (std::size_t j = 0; j < w; ++j)
        slot.values_host(r, j) = static_cast<T>(data_.targets[s * w + j]);
    }
  }
  slot.epoch = epoch_;
  slot.index = index;
  slot.rows = rows;
  slot.offset = offset;
  slot.global = global;
  slot.filled = true;
}

template <class T>
void BatchLoader<T>::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_; });
    if (stop_) return;
    lock.unlock();
    gather(slots_[job_slot_], job_index_);
    lock.lock();
    job_ = false;
    cv_.notify_all();
  }
}

template <class T>
bool BatchLoader<T>::next(Batch<T>& b) {
  if (index_ >= batches_per_epoch()) return false;
  wait_idle();
  const int s = 1 - current_;
  Slot& slot = slots_[s];
  if (!slot.filled || slot.epoch != epoch_ || slot.index != index_) gather(slot, index_);
  const auto rr = Kokkos::make_pair(std::size_t(0), slot.rows);
  auto x = Kokkos::subview(slot.x, rr, Kokkos::ALL);
  Kokkos::deep_copy(x, Kokkos::subview(slot.x_host, rr, Kokkos::ALL));
  b.x = x;
  b.targets = Targets<T>{};
  if (data_.is_classification()) {
    const auto rl = Kokkos::make_pair(std::size_t(0), slot.rows * data_.label_width);
    auto l = Kokkos::subview(slot.labels, rl);
    Kokkos::deep_copy(l, Kokkos::subview(slot.labels_host, rl));
    b.targets.labels = l;
  } else {
    auto v = Kokkos::subview(slot.values, rr, Kokkos::ALL);
    Kokkos::deep_copy(v, Kokkos::subview(slot.values_host, rr, Kokkos::ALL));
    b.targets.values = v;
  }
  b.first_row = slot.offset;
  global_size_ = slot.global;
  current_ = s;
  ++index_;
  // Gather the following batch into the other slot in the background.
  if (index_ < batches_per_epoch()) {
    slots_[1 - s].filled = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = true;
      job_slot_ = 1 - s;
      job_index_ = index_;
    }
    cv_.notify_all();
  }
  return true;
}

template class BatchLoader<float>;
template class BatchLoader<double>;

}  // namespace strata::data
