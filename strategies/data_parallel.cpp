#include "strategies/data_parallel.hpp"

#include "backends/error.hpp"
#include "backends/trace.hpp"

#include <chrono>
#include <cmath>
#include <type_traits>

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

GradCompression parse_grad_compression(const std::string& name) {
  for (GradCompression c : {GradCompression::none, GradCompression::bf16, GradCompression::fp16})
    if (name == to_string(c)) return c;
  STRATA_THROW(config, "unknown gradient compression '", name, "' (expected none, bf16 or fp16)");
}

const char* to_string(GradCompression c) {
  switch (c) {
    case GradCompression::none: return "none";
    case GradCompression::bf16: return "bf16";
    case GradCompression::fp16: return "fp16";
  }
  return "?";
}

template <class T>
DataParallel<T>::DataParallel(Context& ctx, comm::Communicator& comm, Sequential<T>& model,
                              Loss<T>& loss, Optimizer<T>& optimizer,
                              const DataParallelOptions& options)
    : ctx_(ctx), comm_(comm), model_(model), loss_(loss), optimizer_(optimizer), options_(options) {
  STRATA_REQUIRE(model.built(), config, "data parallel: build the model first");
  STRATA_REQUIRE(optimizer.size() == model.num_params(), config, "optimizer for ",
                 optimizer.size(), " parameters used with a model of ", model.num_params());
  validate<T>(options, "data parallel");
  // Rank 0's parameters for everyone.
  comm_.broadcast(model_.params(), 0);
  // Gradients in the communicator's shared memory where it has some (MPI
  // ranks on one node): buckets are then reduced in place across processes.
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible && comm.size() > 1) {
    const std::size_t n = model.padded_grads().extent(0);
    if (void* p = comm_.allocate_shared(n * sizeof(T)))
      model_.use_grad_storage(Vector<T>(static_cast<T*>(p), n));
  }
  // With a 16-bit precision the model's parameters become the working
  // weights (rounded to 16 bits); the optimizer updates fp32 master weights.
  mixed_ = std::make_unique<MixedPrecision<T>>(ctx, options, model_.params());
  if (options.precision != Precision::fp32) {
    model_.set_storage(options.precision, options.emulate_storage);
    model_.set_weights_rounded(true);  // by mixed_, just above: 16-bit-input GEMMs (cuBLAS)
  }
  if (options.compression != GradCompression::none)
    comp_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::dp::compressed", model.num_params());
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
    for (auto& b : buckets_) {
      if (comp_.extent(0) > 0) staging16_.emplace_back(b.second - b.first);
      else staging_.emplace_back(b.second - b.first);
    }
  handles_.reserve(buckets_.size());
}

template <class T>
Vector<T> DataParallel<T>::master_params() const {
  return mixed_->master();
}

template <class T>
void DataParallel<T>::sync_working_params() {
  mixed_->sync_working(ctx_);
}

template <class T>
void DataParallel<T>::launch(std::size_t b) {
  const auto [first, last] = buckets_[b];
  T* grads = model_.grads().data() + first;
  const std::size_t count = last - first;
  if (options_.compression != GradCompression::none) {
    // Bucket -> 16 bits (rounded to nearest even), allreduce summing in float.
    std::uint16_t* c16 = comp_.data() + first;
    const ConstVector<T> g(grads, count);
    comm::DataType type;
    if (options_.compression == GradCompression::bf16) {
      convert<T, bf16>(ctx_.exec, g, Vector<bf16>(reinterpret_cast<bf16*>(c16), count));
      type = comm::DataType::bf16;
    } else {
      convert<T, fp16>(ctx_.exec, g, Vector<fp16>(reinterpret_cast<fp16*>(c16), count));
      type = comm::DataType::f16;
    }
    ctx_.exec.fence();  // the communicator reads the converted bucket
    void* buf = c16;
    if (staged_) {
      Kokkos::deep_copy(Kokkos::View<std::uint16_t*, Kokkos::HostSpace, Unmanaged>(staging16_[b].data(), count),
                        Kokkos::View<const std::uint16_t*, MemSpace, Unmanaged>(c16, count));
      buf = staging16_[b].data();
    }
    info_.comm_bytes += count * 2;
    handles_.push_back(comm_.iallreduce(buf, buf, count, type, comm::ReduceOp::sum));
    return;
  }
  info_.comm_bytes += count * sizeof(T);
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
    if (options_.compression != GradCompression::none) {
      const auto [first, last] = buckets_[b];
      const std::size_t count = last - first;
      std::uint16_t* c16 = comp_.data() + first;
      if (staged_)
        Kokkos::deep_copy(Kokkos::View<std::uint16_t*, MemSpace, Unmanaged>(c16, count),
                          Kokkos::View<const std::uint16_t*, Kokkos::HostSpace, Unmanaged>(
                              staging16_[b].data(), count));
      const Vector<T> g(model_.grads().data() + first, count);
      if (options_.compression == GradCompression::bf16)
        convert<bf16, T>(ctx_.exec, ConstVector<bf16>(reinterpret_cast<const bf16*>(c16), count), g);
      else
        convert<fp16, T>(ctx_.exec, ConstVector<fp16>(reinterpret_cast<const fp16*>(c16), count), g);
      continue;
    }
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
  info_ = StepInfo{};
  info_.loss_scale = mixed_->loss_scale();
  // With loss scaling the loss gradient is multiplied by the scale (a power
  // of two by default, so scaling and unscaling are exact).
  const T scale = static_cast<T>(info_.loss_scale) / static_cast<T>(global_samples);
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
    // Every rank holds the same summed gradients, so the norm, the finiteness
    // verdict and the skip decision agree on every rank without communication.
    mixed_->step(ctx_, optimizer_, model_.grads(), info_);
    if (trace::enabled()) ctx_.exec.fence();
  }
  timing_.optimizer_s = since(t2);
  return total / static_cast<double>(global_samples);
}

template class DataParallel<float>;
template class DataParallel<double>;

}  // namespace strata
