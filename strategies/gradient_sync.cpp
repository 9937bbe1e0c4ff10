#include "strategies/gradient_sync.hpp"

#include "backends/error.hpp"

namespace strata {

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

void validate(const GradSyncOptions& options, bool loss_scaled) {
  STRATA_REQUIRE(options.compression != GradCompression::fp16 || loss_scaled, config,
                 "--grad-compression fp16 without loss scaling: gradients below fp16's smallest "
                 "value (6e-8) would arrive as zeros; scale the loss (--precision fp16, or "
                 "--loss-scale dynamic) or use --grad-compression bf16 (fp32's range)");
}

namespace {
constexpr bool kHostGrads = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
}  // namespace

template <class T>
GradientSync<T>::GradientSync(Context& ctx, comm::Communicator& group, Sequential<T>& model,
                              const GradSyncOptions& options, bool loss_scaled)
    : ctx_(ctx), group_(group), model_(model), options_(options) {
  STRATA_REQUIRE(model.built(), config, "gradient sync: build the model first");
  validate(options, loss_scaled);
  exact_ = model.numerics().exact();
  STRATA_REQUIRE(!exact_ || options.compression == GradCompression::none, config,
                 "--grad-compression ", to_string(options.compression),
                 " with --reproducible: rounding each rank's sum to 16 bits depends on the split");
  const std::size_t padded = model.padded_grads().extent(0);
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
  if (group.size() == 1) return;  // nothing to sum
  // Gradients in the communicator's shared memory where it has some (MPI
  // ranks on one node): buckets are then reduced in place across processes.
  if (kHostGrads)
    if (void* p = group_.allocate_shared(padded * sizeof(T)))
      model_.use_grad_storage(Vector<T>(static_cast<T*>(p), padded));
  if (exact_) {
    staged_ = !kHostGrads && !group.accepts_device_memory();
    if (staged_)
      for (auto& b : buckets_) staging_exact_.emplace_back(2 * (b.second - b.first));
    handles_.reserve(buckets_.size());
    return;
  }
  if (options.compression != GradCompression::none)
    comp_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::grad_sync::compressed",
                                                   model.num_params());
  staged_ = !kHostGrads && !group.accepts_device_memory();
  if (staged_)
    for (auto& b : buckets_) {
      if (comp_.extent(0) > 0) staging16_.emplace_back(b.second - b.first);
      else staging_.emplace_back(b.second - b.first);
    }
  handles_.reserve(buckets_.size());
}

template <class T>
void GradientSync<T>::begin(StepInfo& info) {
  STRATA_REQUIRE(handles_.empty(), runtime, "gradient sync: a step began before the last finished");
  info_ = &info;
  launched_ = 0;
}

template <class T>
void GradientSync<T>::layer_done(std::size_t k) {
  if (!options_.overlap || group_.size() == 1) return;
  // Layer k's parameters start at param_offset(k), and everything above is done.
  const std::size_t done_from = model_.param_offset(k);
  while (launched_ < buckets_.size() && buckets_[launched_].first >= done_from) launch(launched_++);
}

template <class T>
void GradientSync<T>::launch(std::size_t b) {
  const auto [first, last] = buckets_[b];
  T* grads = model_.grads().data() + first;
  const std::size_t count = last - first;
  if (exact_) {
    double* e = model_.exact_grads().data() + 2 * first;
    ctx_.exec.fence();  // backward's exact sums are complete
    if (staged_) {
      double* host = staging_exact_[b].data();
      Kokkos::deep_copy(Kokkos::View<double*, Kokkos::HostSpace, Unmanaged>(host, 2 * count),
                        Kokkos::View<const double*, MemSpace, Unmanaged>(e, 2 * count));
      e = host;
    }
    info_->comm_bytes += 2 * count * sizeof(double);
    handles_.push_back(group_.iallreduce(e, e, 2 * count, comm::DataType::f64, comm::ReduceOp::sum));
    return;
  }
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
    info_->comm_bytes += count * 2;
    handles_.push_back(group_.iallreduce(buf, buf, count, type, comm::ReduceOp::sum));
    return;
  }
  info_->comm_bytes += count * sizeof(T);
  if (staged_) {
    // The gradients must be complete before they are copied out.
    ctx_.exec.fence();
    Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(staging_[b].data(), count),
                      Vector<T>(grads, count));
    grads = staging_[b].data();
  } else if (!kHostGrads) {
    ctx_.exec.fence();  // the device communicator reads after the kernels
  }
  handles_.push_back(group_.iallreduce(grads, grads, count, comm::data_type_of<T>(),
                                       comm::ReduceOp::sum));
}

template <class T>
void GradientSync<T>::finish() {
  STRATA_REQUIRE(info_ != nullptr, runtime, "gradient sync: finish() without begin()");
  if (group_.size() == 1) {
    if (exact_) model_.finish_exact_grads(ctx_, 0, model_.num_params());
    return;
  }
  while (launched_ < buckets_.size()) launch(launched_++);
  for (std::size_t b = 0; b < handles_.size(); ++b) {
    handles_[b].wait();
    const auto [first, last] = buckets_[b];
    const std::size_t count = last - first;
    if (exact_) {
      if (staged_)
        Kokkos::deep_copy(
            Kokkos::View<double*, MemSpace, Unmanaged>(model_.exact_grads().data() + 2 * first,
                                                       2 * count),
            Kokkos::View<const double*, Kokkos::HostSpace, Unmanaged>(staging_exact_[b].data(),
                                                                      2 * count));
      model_.finish_exact_grads(ctx_, first, last);
    } else if (options_.compression != GradCompression::none) {
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
    } else if (staged_) {
      Kokkos::deep_copy(Vector<T>(model_.grads().data() + first, count),
                        Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(staging_[b].data(), count));
    }
  }
  handles_.clear();
}

template class GradientSync<float>;
template class GradientSync<double>;

}  // namespace strata
