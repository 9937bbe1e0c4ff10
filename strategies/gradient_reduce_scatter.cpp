#include "strategies/gradient_reduce_scatter.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"

namespace strata {

template <class T>
ShardMap shard_units(const Sequential<T>& model, const GradSyncOptions& options, int ranks) {
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i <= model.num_layers(); ++i) offsets.push_back(model.param_offset(i));
  const std::size_t unit =
      options.bucket_bytes == 0 ? 0 : std::max<std::size_t>(1, options.bucket_bytes / sizeof(T));
  return ShardMap(offsets, unit, ranks);
}
template ShardMap shard_units(const Sequential<float>&, const GradSyncOptions&, int);
template ShardMap shard_units(const Sequential<double>&, const GradSyncOptions&, int);

namespace {
// Values of the padded copies: every unit when compressing (it is converted
// anyway), else the units the group does not divide.
std::size_t padded_copies(const ShardMap& map, bool compress) {
  if (!compress) return map.uneven_padded();
  std::size_t n = 0;
  for (const ShardUnit& u : map.units()) n += u.slice * static_cast<std::size_t>(map.ranks());
  return n;
}
}  // namespace

std::size_t reduce_scatter_bytes(const ShardMap& map, const GradSyncOptions& options, bool exact,
                                 std::size_t value_bytes) {
  const bool compress = options.compression != GradCompression::none;
  const std::size_t copies = padded_copies(map, compress) + map.shard_size();
  std::size_t bytes = map.shard_size() * value_bytes;
  if (compress) bytes += copies * 2;
  else if (exact) bytes += copies * 2 * sizeof(double);
  else bytes += map.uneven_padded() * value_bytes;
  return bytes;
}


template <class T>
GradientReduceScatter<T>::GradientReduceScatter(Context& ctx, comm::Communicator& group,
                                                Sequential<T>& model,
                                                const GradSyncOptions& options, bool loss_scaled)
    : ctx_(ctx), group_(group), model_(model), options_(options),
      map_(shard_units(model, options, group.size())) {
  STRATA_REQUIRE(model.built(), config, "sharded gradients: build the model first");
  validate(options, loss_scaled);
  exact_ = model.numerics().exact();
  STRATA_REQUIRE(!exact_ || options.compression == GradCompression::none, config,
                 "--grad-compression ", to_string(options.compression),
                 " with --reproducible: rounding each rank's sum to 16 bits depends on the split");
  const auto ranks = static_cast<std::size_t>(group.size());
  shard_grads_ = VectorBuffer<T>("strata::zero::shard_grads", map_.shard_size());
  const bool compress = options.compression != GradCompression::none;
  pad_at_.assign(map_.units().size(), SIZE_MAX);
  for (std::size_t u = 0, at = 0; u < map_.units().size(); ++u) {
    const ShardUnit& unit = map_.units()[u];
    if (!compress && unit.size() % ranks == 0) continue;
    pad_at_[u] = at;
    at += unit.slice * ranks;
  }
  const std::size_t padded = padded_copies(map_, compress);
  if (compress) {
    comp_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::zero::compressed", padded);
    comp_shard_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::zero::compressed_shard",
                                                         map_.shard_size());
  } else if (exact_) {
    exact_pad_ = Kokkos::View<double*, MemSpace>("strata::zero::exact_padded", 2 * padded);
    exact_shard_ = Kokkos::View<double*, MemSpace>("strata::zero::exact_shard", 2 * map_.shard_size());
  } else {
    pad_ = VectorBuffer<T>("strata::zero::padded", padded);
  }
  bytes_ = reduce_scatter_bytes(map_, options, exact_, sizeof(T));
  handles_.reserve(map_.units().size());
}

template <class T>
void GradientReduceScatter<T>::begin(StepInfo& info) {
  STRATA_REQUIRE(handles_.empty(), runtime,
                 "sharded gradients: a step began before the last finished");
  info_ = &info;
  next_ = 0;
}

template <class T>
void GradientReduceScatter<T>::layer_done(std::size_t k) {
  if (!options_.overlap) return;
  const auto& units = map_.units();
  while (next_ < units.size() && units[units.size() - 1 - next_].first_layer >= k)
    launch(units.size() - 1 - next_++);
}

template <class T>
void GradientReduceScatter<T>::launch(std::size_t u) {
  const ShardUnit& unit = map_.units()[u];
  if (unit.size() == 0) return;
  const std::size_t n = unit.size(), slice = unit.slice;
  const std::size_t padded = slice * static_cast<std::size_t>(group_.size());
  const std::size_t at = pad_at_[u];
  const bool copy = at != SIZE_MAX;
  T* grads = model_.grads().data() + unit.first;
  if (exact_) {
    double* send = model_.exact_grads().data() + 2 * unit.first;
    if (copy) {
      Kokkos::deep_copy(ctx_.exec, Kokkos::View<double*, MemSpace, Unmanaged>(exact_pad_.data() + 2 * at, 2 * n),
                        Kokkos::View<const double*, MemSpace, Unmanaged>(send, 2 * n));
      send = exact_pad_.data() + 2 * at;
    }
    ctx_.exec.fence();  // backward's exact sums (and the copy) are complete
    info_->comm_bytes += 2 * padded * sizeof(double);
    handles_.push_back(group_.ireduce_scatter(send, exact_shard_.data() + 2 * unit.shard,
                                              2 * slice, comm::DataType::f64, comm::ReduceOp::sum));
    return;
  }
  if (options_.compression != GradCompression::none) {
    std::uint16_t* c16 = comp_.data() + at;
    const ConstVector<T> g(grads, n);
    comm::DataType type;
    if (options_.compression == GradCompression::bf16) {
      convert<T, bf16>(ctx_.exec, g, Vector<bf16>(reinterpret_cast<bf16*>(c16), n));
      type = comm::DataType::bf16;
    } else {
      convert<T, fp16>(ctx_.exec, g, Vector<fp16>(reinterpret_cast<fp16*>(c16), n));
      type = comm::DataType::f16;
    }
    ctx_.exec.fence();
    info_->comm_bytes += padded * 2;
    handles_.push_back(group_.ireduce_scatter(c16, comp_shard_.data() + unit.shard, slice, type,
                                              comm::ReduceOp::sum));
    return;
  }
  const T* send = grads;
  if (copy) {
    Kokkos::deep_copy(ctx_.exec, Vector<T>(pad_.data() + at, n), ConstVector<T>(grads, n));
    send = pad_.data() + at;
  }
  ctx_.exec.fence();  // the communicator reads after backward's kernels
  info_->comm_bytes += padded * sizeof(T);
  handles_.push_back(group_.ireduce_scatter(send, shard_grads_.data() + unit.shard, slice,
                                            comm::data_type_of<T>(), comm::ReduceOp::sum));
}

template <class T>
void GradientReduceScatter<T>::finish() {
  STRATA_REQUIRE(info_ != nullptr, runtime, "sharded gradients: finish() without begin()");
  const auto& units = map_.units();
  while (next_ < units.size()) launch(units.size() - 1 - next_++);
  for (auto& h : handles_) h.wait();
  handles_.clear();
  info_ = nullptr;
  const std::size_t n = map_.shard_size();
  T* g = shard_grads_.data();
  if (exact_) {
    const double* e = exact_shard_.data();
    for_range(ctx_, "strata::zero::round_exact", n, KOKKOS_LAMBDA(const std::size_t i) {
      g[i] = static_cast<T>(exact_value(e[2 * i], e[2 * i + 1]));
    });
  } else if (options_.compression == GradCompression::bf16) {
    convert<bf16, T>(ctx_.exec, ConstVector<bf16>(reinterpret_cast<const bf16*>(comp_shard_.data()), n),
                     Vector<T>(g, n));
  } else if (options_.compression == GradCompression::fp16) {
    convert<fp16, T>(ctx_.exec, ConstVector<fp16>(reinterpret_cast<const fp16*>(comp_shard_.data()), n),
                     Vector<T>(g, n));
  }
}

template class GradientReduceScatter<float>;
template class GradientReduceScatter<double>;

}  // namespace strata
