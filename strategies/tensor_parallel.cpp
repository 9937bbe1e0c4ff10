#include "strategies/tensor_parallel.hpp"

#include "backends/error.hpp"

namespace strata {

namespace {
std::size_t divided(std::size_t width, comm::Communicator& tp, const std::string& layer,
                    const char* what) {
  const auto n = static_cast<std::size_t>(tp.size());
  STRATA_REQUIRE(width % n == 0, config, "tensor parallelism: --tp ", n, " does not divide the ",
                 what, " width ", width, " of ", layer);
  return width / n;
}

std::string describe(const char* kind, std::size_t in, std::size_t out, int tp) {
  return std::string(kind) + "(" + std::to_string(in) + ", " + std::to_string(out) + ", tp=" +
         std::to_string(tp) + ")";
}

// The whole layer's initial values, from which every rank cuts its shard.
template <class T>
std::vector<T> full_init(std::size_t in, std::size_t out, Init scheme, std::uint64_t seed,
                         std::uint64_t layer_index) {
  Linear<T> whole(in, out);
  std::vector<T> values(whole.num_params());
  whole.init(HostVector<T>(values.data(), values.size()), scheme, seed, layer_index);
  return values;
}

// Waits for the kernels on ctx, then sums buf over the group.
template <class T>
void allreduce_after(Context& ctx, comm::Communicator& comm, Matrix<T> buf) {
  ctx.exec.fence();
  comm.allreduce(buf);
}
}  // namespace

// ------------------------------------------------------------ column-parallel
template <class T>
ColumnParallelLinear<T>::ColumnParallelLinear(std::size_t in, std::size_t out,
                                              comm::Communicator& tp)
    : in_(in),
      out_(out),
      local_out_(divided(out, tp, describe("Linear", in, out, tp.size()), "output")),
      first_(local_out_ * static_cast<std::size_t>(tp.rank())),
      tp_(tp),
      local_(in, local_out_) {}

template <class T>
std::string ColumnParallelLinear<T>::name() const {
  return describe("ColumnParallelLinear", in_, out_, tp_.size());
}

template <class T>
std::size_t ColumnParallelLinear<T>::out_features(std::size_t in) const {
  STRATA_REQUIRE(in == in_, config, name(), " expects inputs of width ", in_, " but gets width ",
                 in);
  return local_out_;
}

template <class T>
void ColumnParallelLinear<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                                   std::uint64_t layer_index) const {
  extract(full_init<T>(in_, out_, scheme, seed, layer_index).data(), params.data());
}

template <class T>
void ColumnParallelLinear<T>::extract(const T* full, T* shard) const {
  for (std::size_t o = 0; o < local_out_; ++o)
    for (std::size_t j = 0; j < in_; ++j) shard[o * in_ + j] = full[(first_ + o) * in_ + j];
  for (std::size_t o = 0; o < local_out_; ++o)
    shard[local_out_ * in_ + o] = full[out_ * in_ + first_ + o];
}

template <class T>
void ColumnParallelLinear<T>::assemble(const T* blocks, T* full) const {
  const std::size_t n = num_params();
  for (int r = 0; r < tp_.size(); ++r) {
    const T* block = blocks + static_cast<std::size_t>(r) * n;
    const std::size_t first = local_out_ * static_cast<std::size_t>(r);
    for (std::size_t o = 0; o < local_out_; ++o)
      for (std::size_t j = 0; j < in_; ++j) full[(first + o) * in_ + j] = block[o * in_ + j];
    for (std::size_t o = 0; o < local_out_; ++o)
      full[out_ * in_ + first + o] = block[local_out_ * in_ + o];
  }
}

template <class T>
void ColumnParallelLinear<T>::full_index(std::size_t* index) const {
  for (std::size_t o = 0; o < local_out_; ++o)
    for (std::size_t j = 0; j < in_; ++j) index[o * in_ + j] = (first_ + o) * in_ + j;
  for (std::size_t o = 0; o < local_out_; ++o) index[local_out_ * in_ + o] = out_ * in_ + first_ + o;
}

template <class T>
void ColumnParallelLinear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  local_.use_slot(this->slot_);
  local_.forward(ctx, x, y);
}

template <class T>
void ColumnParallelLinear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) {
  local_.use_slot(this->slot_);
  local_.backward(ctx, dy, dx);
  // dx = sum over ranks of dy_shard W_shard.
  if (dx.data() != nullptr && tp_.size() > 1) allreduce_after(ctx, tp_, dx);
}

// --------------------------------------------------------------- row-parallel
template <class T>
RowParallelLinear<T>::RowParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp)
    : in_(in),
      out_(out),
      local_in_(divided(in, tp, describe("Linear", in, out, tp.size()), "input")),
      first_(local_in_ * static_cast<std::size_t>(tp.rank())),
      tp_(tp),
      local_(local_in_, out, /*bias=*/false) {}

template <class T>
std::string RowParallelLinear<T>::name() const {
  return describe("RowParallelLinear", in_, out_, tp_.size());
}

template <class T>
std::size_t RowParallelLinear<T>::out_features(std::size_t in) const {
  STRATA_REQUIRE(in == local_in_, config, name(), " expects its shard of width ", local_in_,
                 " of the input but gets width ", in);
  return out_;
}

template <class T>
void RowParallelLinear<T>::bind(Vector<T> params, Vector<T> grads) {
  const std::size_t nw = out_ * local_in_;
  local_.bind(Kokkos::subview(params, Kokkos::make_pair(std::size_t(0), nw)),
              Kokkos::subview(grads, Kokkos::make_pair(std::size_t(0), nw)));
  b_ = Kokkos::subview(params, Kokkos::make_pair(nw, nw + out_));
  db_ = Kokkos::subview(grads, Kokkos::make_pair(nw, nw + out_));
}

template <class T>
void RowParallelLinear<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                                std::uint64_t layer_index) const {
  extract(full_init<T>(in_, out_, scheme, seed, layer_index).data(), params.data());
}

template <class T>
void RowParallelLinear<T>::extract(const T* full, T* shard) const {
  for (std::size_t o = 0; o < out_; ++o)
    for (std::size_t j = 0; j < local_in_; ++j) shard[o * local_in_ + j] = full[o * in_ + first_ + j];
  for (std::size_t o = 0; o < out_; ++o) shard[out_ * local_in_ + o] = full[out_ * in_ + o];
}

template <class T>
void RowParallelLinear<T>::assemble(const T* blocks, T* full) const {
  const std::size_t n = num_params();
  for (int r = 0; r < tp_.size(); ++r) {
    const T* block = blocks + static_cast<std::size_t>(r) * n;
    const std::size_t first = local_in_ * static_cast<std::size_t>(r);
    for (std::size_t o = 0; o < out_; ++o)
      for (std::size_t j = 0; j < local_in_; ++j) full[o * in_ + first + j] = block[o * local_in_ + j];
  }
  for (std::size_t o = 0; o < out_; ++o) full[out_ * in_ + o] = blocks[out_ * local_in_ + o];
}

template <class T>
void RowParallelLinear<T>::full_index(std::size_t* index) const {
  for (std::size_t o = 0; o < out_; ++o)
    for (std::size_t j = 0; j < local_in_; ++j) index[o * local_in_ + j] = o * in_ + first_ + j;
  // The bias is replicated: group rank 0 writes it.
  for (std::size_t o = 0; o < out_; ++o)
    index[out_ * local_in_ + o] = tp_.rank() == 0 ? out_ * in_ + o : ShardedLayer<T>::kReplica;
}

template <class T>
void RowParallelLinear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  local_.use_slot(this->slot_);
  local_.forward(ctx, x, y);  // this rank's part of x W^T
  if (tp_.size() > 1) allreduce_after(ctx, tp_, y);
  detail::add_bias<T>(ctx, y, b_);
}

template <class T>
void RowParallelLinear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) {
  detail::accumulate_bias_grad<T>(ctx, dy, db_);
  local_.use_slot(this->slot_);
  local_.backward(ctx, dy, dx);  // dx is this rank's shard of the input gradient
}

// ----------------------------------------------------------------- the MLP
template <class T>
MlpLayers<T> make_tensor_parallel_mlp(const MlpSpec& spec, comm::Communicator& tp) {
  const std::size_t linears = spec.widths.size() - 1;
  MlpLayers<T> m;
  m.layers = mlp_layers<T>(spec, [&](std::size_t k, std::size_t in, std::size_t out) -> LayerPtr<T> {
    if (tp.size() > 1) {
      if (k % 2 == 1) return std::make_unique<RowParallelLinear<T>>(in, out, tp);
      if (k + 1 < linears) return std::make_unique<ColumnParallelLinear<T>>(in, out, tp);
    }
    return std::make_unique<Linear<T>>(in, out);
  });
  // Walk the layers: after a column-parallel layer the activation is sharded
  // until the row-parallel layer that follows.
  const ColumnParallelLinear<T>* column = nullptr;
  std::size_t width = spec.widths[0];
  for (auto& layer : m.layers) {
    const std::size_t in = width;
    if (auto* c = dynamic_cast<const ColumnParallelLinear<T>*>(layer.get())) column = c;
    if (dynamic_cast<const RowParallelLinear<T>*>(layer.get())) column = nullptr;
    if (auto* d = dynamic_cast<Dropout<T>*>(layer.get()); d && column)
      d->set_columns(column->first_feature(), width * static_cast<std::size_t>(tp.size()));
    width = layer->out_features(in);
    m.cut_ok.push_back(column == nullptr);
    m.flops.push_back(layer->num_params() > 0 ? static_cast<double>(layer->num_params())
                                              : static_cast<double>(width));
  }
  return m;
}

template class ColumnParallelLinear<float>;
template class ColumnParallelLinear<double>;
template class RowParallelLinear<float>;
template class RowParallelLinear<double>;
template MlpLayers<float> make_tensor_parallel_mlp(const MlpSpec&, comm::Communicator&);
template MlpLayers<double> make_tensor_parallel_mlp(const MlpSpec&, comm::Communicator&);

}  // namespace strata
