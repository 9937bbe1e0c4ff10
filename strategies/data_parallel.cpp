#include "strategies/data_parallel.hpp"

#include "backends/error.hpp"
#include "backends/trace.hpp"

#include <chrono>

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

template <class T>
DataParallel<T>::DataParallel(Context& ctx, comm::Communicator& comm, Sequential<T>& model,
                              Loss<T>& loss, Optimizer<T>& optimizer,
                              const DataParallelOptions& options)
    : ctx_(ctx), comm_(comm), model_(model), loss_(loss), optimizer_(optimizer), options_(options) {
  STRATA_REQUIRE(model.built(), config, "data parallel: build the model first");
  STRATA_REQUIRE(optimizer.size() == model.num_params(), config, "optimizer for ",
                 optimizer.size(), " parameters used with a model of ", model.num_params());
  // Rank 0's parameters for everyone.
  comm_.broadcast(model_.params(), 0);
  // Gradients in the communicator's shared memory where it has some (MPI
  // ranks on one node): buckets are then reduced in place across processes.
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible && comm.size() > 1) {
    const std::size_t n = model.padded_grads().extent(0);
    if (void* p = comm_.allocate_shared(n * sizeof(T)))
      model_.use_grad_storage(Vector<T>(static_cast<T*>(p), n));
  }
  // Buckets from the end of the flat buffer (the last layer's gradients are
  // ready first).
  const std::size_t n = model.num_params();
  const std::size_t cap =
      options.bucket_bytes == 0 ? n : std::max<std::size_t>(1, options.bucket_bytes / sizeof(T));
  for (std::size_t end = n; end > 0;) {
    const std::size_t begin = end > cap ? end - cap : 0;
    buckets_.push_back({begin, end});
    end = begin;
  }
  staged_ = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible &&
            !comm.accepts_device_memory();
  if (staged_)
    for (auto& b : buckets_) staging_.emplace_back(b.second - b.first);
  handles_.reserve(buckets_.size());
}

template <class T>
void DataParallel<T>::launch(std::size_t b) {
  const auto [first, last] = buckets_[b];
  T* grads = model_.grads().data() + first;
  const std::size_t count = last - first;
  if (staged_) {
    // The gradients must be complete before they are copied out.
    ctx_.exec.fence();
    Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(staging_[b].data(), count),
                      Vector<T>(grads, count));
    grads = staging_[b].data();
  } else if (!Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    ctx_.exec.fence();  // the device communicator reads after the kernels
  }
  handles_.push_back(comm_.iallreduce(grads, grads, count, comm::data_type_of<T>(),
                                      comm::ReduceOp::sum));
}

template <class T>
void DataParallel<T>::finish() {
  for (std::size_t b = 0; b < handles_.size(); ++b) {
    handles_[b].wait();
    if (staged_) {
      const auto [first, last] = buckets_[b];
      Kokkos::deep_copy(Vector<T>(model_.grads().data() + first, last - first),
                        Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(staging_[b].data(),
                                                                            last - first));
    }
  }
  handles_.clear();
}

template <class T>
double DataParallel<T>::step(const data::Batch<T>* micro, std::size_t count,
                             std::size_t global_samples) {
  STRATA_REQUIRE(count > 0, config, "data parallel: step without micro-batches");
  STRATA_REQUIRE(global_samples > 0, config, "data parallel: global batch of 0 samples");
  const auto t0 = Clock::now();
  const T scale = T(1) / static_cast<T>(global_samples);
  model_.zero_grad(ctx_);
  model_.set_training(true);
  double loss_sum = 0;
  launched_ = 0;
  const bool single = comm_.size() == 1;
  for (std::size_t m = 0; m < count; ++m) {
    const auto& batch = micro[m];
    model_.set_row_offset(batch.first_row);
    ConstMatrix<T> out = model_.forward(ctx_, batch.x);
    {
      STRATA_SPAN("compute", "loss " + loss_.name());
      loss_sum += loss_.forward_backward(ctx_, out, batch.targets, model_.output_grad(), scale);
    }
    const bool last = m + 1 == count;
    if (!last || single || !options_.overlap) {
      model_.backward(ctx_);
      continue;
    }
    // Launch every bucket whose gradients are all written: layer k's
    // parameters start at param_offset(k), and everything above is done.
    model_.backward(ctx_, [&](std::size_t k) {
      const std::size_t done_from = model_.param_offset(k);
      while (launched_ < buckets_.size() && buckets_[launched_].first >= done_from) launch(launched_++);
    });
  }
  if (!single)
    while (launched_ < buckets_.size()) launch(launched_++);
  timing_.compute_s = since(t0);
  const auto t1 = Clock::now();
  {
    STRATA_SPAN("comm", "wait for gradient buckets");
    finish();
  }
  const double total = single ? loss_sum : comm_.allreduce_value(loss_sum);
  timing_.exposed_comm_s = since(t1);
  const auto t2 = Clock::now();
  {
    STRATA_SPAN("compute", "optimizer step");
    optimizer_.step(ctx_, model_.params(), model_.grads());
    if (trace::enabled()) ctx_.exec.fence();
  }
  timing_.optimizer_s = since(t2);
  return total / static_cast<double>(global_samples);
}

template class DataParallel<float>;
template class DataParallel<double>;

}  // namespace strata
