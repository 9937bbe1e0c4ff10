#include "strategies/gradient_reduce_scatter.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"

namespace strata {

template <class T>
std::vector<bool> tied_pieces(const Sequential<T>& model, const std::vector<std::size_t>& cross) {
  const std::vector<std::size_t> at = model.piece_offsets();
  const std::size_t pieces = at.size() - 1;
  std::vector<bool> tied(pieces, false);
  for (std::size_t p = 0; p < pieces; ++p) {
    if (at[p + 1] == at[p]) continue;  // no values: a model without parameters
    for (const auto& [first, last] : model.tied_ranges())
      if (first < at[p + 1] && last > at[p]) tied[p] = true;
    for (std::size_t l : cross)
      if (model.layer_of(at[p]) == l) tied[p] = true;
  }
  return tied;
}
template std::vector<bool> tied_pieces(const Sequential<float>&, const std::vector<std::size_t>&);
template std::vector<bool> tied_pieces(const Sequential<double>&, const std::vector<std::size_t>&);

template <class T>
ShardMap shard_units(const Sequential<T>& model, const GradSyncOptions& options, int ranks,
                     const std::vector<bool>& tied, bool layer_units) {
  const std::vector<std::size_t> at = model.piece_offsets();
  std::size_t unit =
      options.bucket_bytes == 0 ? 0 : std::max<std::size_t>(1, options.bucket_bytes / sizeof(T));
  if (layer_units) {  // at most the largest piece, where that is less than the bucket
    std::size_t largest = 1;
    for (std::size_t p = 0; p + 1 < at.size(); ++p)
      if (p >= tied.size() || !tied[p]) largest = std::max(largest, at[p + 1] - at[p]);
    unit = unit == 0 ? largest : std::min(unit, largest);
  }
  return ShardMap(at, unit, ranks, tied, layer_units);
}
template ShardMap shard_units(const Sequential<float>&, const GradSyncOptions&, int,
                              const std::vector<bool>&, bool);
template ShardMap shard_units(const Sequential<double>&, const GradSyncOptions&, int,
                              const std::vector<bool>&, bool);

namespace {
// Values of the padded copies of ZeRO-1: every unit when compressing (it is
// converted anyway), else the units the group does not divide.
std::size_t padded_copies(const ShardMap& map, bool compress) {
  if (!compress) return map.uneven_padded();
  std::size_t n = 0;
  for (const ShardUnit& u : map.units()) n += u.slice * static_cast<std::size_t>(map.ranks());
  return n;
}
// Whether unit u holds a tied piece.
bool unit_is_tied(const ShardUnit& u, const std::vector<bool>& tied) {
  for (std::size_t l = u.first_piece; l < u.last_piece; ++l)
    if (l < tied.size() && tied[l]) return true;
  return false;
}
}  // namespace

std::vector<BufferUnit> zero2_grad_units(const ShardMap& map, const std::vector<bool>& tied) {
  const auto& units = map.units();
  std::vector<BufferUnit> out(units.size());
  std::size_t pooled = 0, pinned = 2;
  for (std::size_t u = units.size(); u-- > 0;) {
    const bool pin = unit_is_tied(units[u], tied);
    out[u] = {units[u].first_piece, units[u].last_piece, pin ? pinned++ : pooled++ % 2};
  }
  return out;
}

namespace {
// Kernels as free functions (device lambdas cannot live in private members).
template <class T>
void zero_values(Context& ctx, T* p, std::size_t n) {
  for_range(ctx, "strata::zero::zero_unit", n, KOKKOS_LAMBDA(const std::size_t i) { p[i] = T(0); });
}
template <class T>
void add_values(Context& ctx, T* into, const T* from, std::size_t n) {
  for_range(ctx, "strata::zero::add_received", n, KOKKOS_LAMBDA(const std::size_t i) { into[i] += from[i]; });
}

// Per gradient buffer of ZeRO-2: its padded size and the largest slice of its units.
struct BufferSizes {
  std::vector<std::size_t> padded, slice;
  BufferSizes(const ShardMap& map, const std::vector<BufferUnit>& units) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      const std::size_t b = units[u].buffer;
      if (padded.size() <= b) padded.resize(b + 1, 0), slice.resize(b + 1, 0);
      const ShardUnit& s = map.units()[u];
      padded[b] = std::max(padded[b], s.slice * static_cast<std::size_t>(map.ranks()));
      slice[b] = std::max(slice[b], s.slice);
    }
  }
  static std::size_t sum(const std::vector<std::size_t>& v) {
    std::size_t n = 0;
    for (std::size_t x : v) n += x;
    return n;
  }
};
}  // namespace

std::size_t unit_grad_bytes(const ShardMap& map, const std::vector<BufferUnit>& units,
                            std::size_t value_bytes) {
  return BufferSizes::sum(BufferSizes(map, units).padded) * value_bytes;
}

std::size_t reduce_scatter_bytes(const ShardMap& map, const GradSyncOptions& options, bool exact,
                                 const std::vector<BufferUnit>& units, bool accumulates,
                                 std::size_t value_bytes) {
  const bool compress = options.compression != GradCompression::none;
  std::size_t bytes = map.shard_size() * value_bytes;
  if (!units.empty()) {  // ZeRO-2: 16-bit copies; per buffer a slice received for adding
    const BufferSizes b(map, units);
    const std::size_t received = accumulates ? BufferSizes::sum(b.slice) : 0;
    bytes += received * value_bytes;
    if (compress) bytes += (BufferSizes::sum(b.padded) + received + map.shard_size()) * 2;
    return bytes;
  }
  const std::size_t copies = padded_copies(map, compress) + map.shard_size();
  if (compress) bytes += copies * 2;
  else if (exact) bytes += copies * 2 * sizeof(double);
  else bytes += map.uneven_padded() * value_bytes;
  return bytes;
}

template <class T>
GradientReduceScatter<T>::GradientReduceScatter(Context& ctx, comm::Communicator& group,
                                                Sequential<T>& model,
                                                const GradSyncOptions& options, bool loss_scaled,
                                                bool accumulates, const std::vector<bool>& tied)
    : ctx_(ctx), group_(group), model_(model), options_(options),
      map_(shard_units(model, options, group.size(), tied, !model.param_units().empty())) {
  STRATA_REQUIRE(model.built(), config, "sharded gradients: build the model first");
  validate(options, loss_scaled);
  exact_ = model.numerics().exact();
  STRATA_REQUIRE(!exact_ || options.compression == GradCompression::none, config,
                 "--grad-compression ", to_string(options.compression),
                 " with --reproducible: rounding each rank's sum to 16 bits depends on the split");
  const auto ranks = static_cast<std::size_t>(group.size());
  const auto& units = map_.units();
  shard_grads_ = VectorBuffer<T>("strata::zero::shard_grads", map_.shard_size());
  const bool compress = options.compression != GradCompression::none;
  const std::vector<BufferUnit>& grad_units = model.grad_units();
  flat_ = grad_units.empty();
  bytes_ = reduce_scatter_bytes(map_, options, exact_, grad_units, accumulates, sizeof(T));
  for (const ShardUnit& u : units) held_.push_back(unit_is_tied(u, tied));
  if (!flat_) {  // ZeRO-2: the model's gradient units are the map's units
    STRATA_REQUIRE(grad_units.size() == units.size(), config, "sharded gradients: ",
                   grad_units.size(), " gradient units for ", units.size(), " units");
    for (std::size_t u = 0; u < units.size(); ++u)
      STRATA_REQUIRE(grad_units[u].first_piece == units[u].first_piece &&
                         grad_units[u].last_piece == units[u].last_piece,
                     config, "sharded gradients: gradient unit ", u, " holds other pieces");
    const BufferSizes b(map_, grad_units);
    in_flight_.resize(b.padded.size());
    buffer_at_.assign(b.padded.size(), 0);
    std::size_t padded = 0, slices = 0;
    for (std::size_t k = 0; k < b.padded.size(); ++k) {
      buffer_at_[k] = padded;
      padded += b.padded[k];
    }
    std::vector<std::size_t> slice_at(b.slice.size());
    for (std::size_t k = 0; k < b.slice.size(); ++k) slice_at[k] = slices, slices += b.slice[k];
    tmp_at_ = slice_at;
    if (!accumulates) slices = 0;
    accumulates_ = accumulates;
    tmp_ = VectorBuffer<T>("strata::zero::received", slices);
    if (compress) {
      comp_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::zero::compressed", padded);
      comp_tmp_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::zero::compressed_received", slices);
      comp_shard_ = Kokkos::View<std::uint16_t*, MemSpace>("strata::zero::compressed_shard",
                                                           map_.shard_size());
    }
    prepared_.assign(units.size(), false);
    unit_of_piece_.assign(model.piece_offsets().size() - 1, 0);
    for (std::size_t u = 0; u < units.size(); ++u)
      for (std::size_t l = units[u].first_piece; l < units[u].last_piece; ++l) unit_of_piece_[l] = u;
    return;
  }
  // ZeRO-1: padded copies: every unit when compressing (it is converted
  // anyway), else the units the group does not divide.
  pad_at_.assign(units.size(), SIZE_MAX);
  for (std::size_t u = 0, at = 0; u < units.size(); ++u) {
    const ShardUnit& unit = units[u];
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
  handles_.reserve(units.size());
}

template <class T>
void GradientReduceScatter<T>::begin(StepInfo& info) {
  STRATA_REQUIRE(handles_.empty(), runtime,
                 "sharded gradients: a step began before the last finished");
  info_ = &info;
  next_ = 0;
  backwards_ = 0;
}

template <class T>
void GradientReduceScatter<T>::backward_begins(bool last) {
  STRATA_REQUIRE(info_ != nullptr, runtime, "sharded gradients: a backward before begin()");
  last_backward_ = last;
  adds_ = backwards_++ > 0;
  STRATA_REQUIRE(!adds_ || flat_ || accumulates_, runtime, "sharded gradients: a second backward "
                 "in a step of a ZeRO-2 stage built for one");
  next_ = 0;
  if (flat_) return;
  std::fill(prepared_.begin(), prepared_.end(), false);
  if (!map_.units().empty()) prepare(map_.units().size() - 1);
}

template <class T>
void GradientReduceScatter<T>::piece_done(std::size_t k) {
  const auto& units = map_.units();
  if (flat_) {
    if (!options_.overlap || !last_backward_) return;
    while (next_ < units.size() && units[units.size() - 1 - next_].first_piece >= k) {
      const std::size_t u = units.size() - 1 - next_++;
      if (!held_[u]) launch(u);  // tied units wait for finish()
    }
    return;
  }
  // ZeRO-2: every backward launches each complete unit (pinned ones wait
  // for finish) and readies the buffer of the unit below.
  while (next_ < units.size() && units[units.size() - 1 - next_].first_piece >= k) {
    const std::size_t u = units.size() - 1 - next_++;
    if (pinned(u)) continue;
    launch_unit(u, adds_);
    if (!options_.overlap) complete(model_.grad_units()[u].buffer);
  }
  if (k > 0) prepare(unit_of_piece_[k - 1]);
}

template <class T>
void GradientReduceScatter<T>::prepare(std::size_t u) {
  if (pinned(u) || prepared_[u]) return;
  prepared_[u] = true;
  complete(model_.grad_units()[u].buffer);  // its last unit has left the buffer
  const Vector<T> g = model_.unit_grads(u);
  zero_values<T>(ctx_, g.data(), g.extent(0));
}

template <class T>
void GradientReduceScatter<T>::launch_unit(std::size_t u, bool adds) {
  const ShardUnit& unit = map_.units()[u];
  if (unit.size() == 0) return;
  const std::size_t b = model_.grad_units()[u].buffer;
  complete(b);
  const Vector<T> g = model_.unit_grads(u);  // padded with zeros
  const std::size_t padded = g.extent(0), slice = unit.slice;
  InFlight& f = in_flight_[b];
  f.unit = u;
  f.adds = adds;
  if (options_.compression != GradCompression::none) {
    std::uint16_t* c16 = comp_.data() + buffer_at_[b];
    comm::DataType type;
    if (options_.compression == GradCompression::bf16) {
      convert<T, bf16>(ctx_.exec, ConstVector<T>(g), Vector<bf16>(reinterpret_cast<bf16*>(c16), padded));
      type = comm::DataType::bf16;
    } else {
      convert<T, fp16>(ctx_.exec, ConstVector<T>(g), Vector<fp16>(reinterpret_cast<fp16*>(c16), padded));
      type = comm::DataType::f16;
    }
    ctx_.exec.fence();
    info_->comm_bytes += padded * 2;
    std::uint16_t* recv = adds ? comp_tmp_.data() + tmp_at_[b] : comp_shard_.data() + unit.shard;
    f.handle = group_.ireduce_scatter(c16, recv, slice, type, comm::ReduceOp::sum);
    return;
  }
  ctx_.exec.fence();  // the communicator reads after backward's kernels
  info_->comm_bytes += padded * sizeof(T);
  T* recv = adds ? tmp_.data() + tmp_at_[b] : shard_grads_.data() + unit.shard;
  f.handle = group_.ireduce_scatter(g.data(), recv, slice, comm::data_type_of<T>(), comm::ReduceOp::sum);
}

template <class T>
void GradientReduceScatter<T>::complete(std::size_t b) {
  InFlight& f = in_flight_[b];
  if (f.unit == SIZE_MAX) return;
  f.handle.wait();
  const ShardUnit& unit = map_.units()[f.unit];
  const std::size_t n = unit.slice;
  T* shard = shard_grads_.data() + unit.shard;
  f.unit = SIZE_MAX;
  if (options_.compression != GradCompression::none) {
    const std::uint16_t* c16 = f.adds ? comp_tmp_.data() + tmp_at_[b] : comp_shard_.data() + unit.shard;
    const bool bf = options_.compression == GradCompression::bf16;
    if (!f.adds) {
      if (bf) convert<bf16, T>(ctx_.exec, ConstVector<bf16>(reinterpret_cast<const bf16*>(c16), n), Vector<T>(shard, n));
      else convert<fp16, T>(ctx_.exec, ConstVector<fp16>(reinterpret_cast<const fp16*>(c16), n), Vector<T>(shard, n));
      return;
    }
    T* tmp = tmp_.data() + tmp_at_[b];
    if (bf) convert<bf16, T>(ctx_.exec, ConstVector<bf16>(reinterpret_cast<const bf16*>(c16), n), Vector<T>(tmp, n));
    else convert<fp16, T>(ctx_.exec, ConstVector<fp16>(reinterpret_cast<const fp16*>(c16), n), Vector<T>(tmp, n));
  }
  if (f.adds) add_values<T>(ctx_, shard, tmp_.data() + tmp_at_[b], n);
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
  if (!flat_) {  // ZeRO-2: the pinned units, accumulated over the step; then every buffer
    for (std::size_t u = 0; u < units.size(); ++u)
      if (pinned(u)) launch_unit(u, false);
    for (std::size_t b = 0; b < in_flight_.size(); ++b) complete(b);
    info_ = nullptr;
    return;
  }
  while (next_ < units.size()) {
    const std::size_t u = units.size() - 1 - next_++;
    if (!held_[u]) launch(u);
  }
  for (std::size_t u = units.size(); u-- > 0;)
    if (held_[u]) launch(u);  // complete after the tie sum
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
