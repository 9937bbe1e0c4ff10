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

// ----------------------------------------------------- what both kinds share
template <class T, class Shard>
TensorParallelLinear<T, Shard>::TensorParallelLinear(std::size_t in, std::size_t out,
                                                     comm::Communicator& tp, std::size_t local_in,
                                                     std::size_t local_out, bool bias)
    : in_(in), out_(out), tp_(tp), local_(local_in, local_out, bias) {}

template <class T, class Shard>
std::string TensorParallelLinear<T, Shard>::name() const {
  return describe(Shard::kind, in_, out_, tp_.size());
}

template <class T, class Shard>
void TensorParallelLinear<T, Shard>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                                          std::uint64_t layer_index) const {
  extract(full_init<T>(in_, out_, scheme, seed, layer_index).data(), params.data());
}

template <class T, class Shard>
void TensorParallelLinear<T, Shard>::extract(const T* full, T* shard) const {
  const auto& self = static_cast<const Shard&>(*this);
  const int r = tp_.rank();
  for (std::size_t k = 0, n = this->num_params(); k < n; ++k) shard[k] = full[self.position(r, k)];
}

template <class T, class Shard>
void TensorParallelLinear<T, Shard>::assemble(const T* blocks, T* full) const {
  const auto& self = static_cast<const Shard&>(*this);
  const std::size_t n = this->num_params();
  for (int r = 0; r < tp_.size(); ++r) {
    const T* block = blocks + static_cast<std::size_t>(r) * n;
    for (std::size_t k = 0; k < n; ++k)
      if (owns(r, k)) full[self.position(r, k)] = block[k];
  }
}

template <class T, class Shard>
void TensorParallelLinear<T, Shard>::full_index(std::size_t* index) const {
  const auto& self = static_cast<const Shard&>(*this);
  const int r = tp_.rank();
  for (std::size_t k = 0, n = this->num_params(); k < n; ++k)
    index[k] = owns(r, k) ? self.position(r, k) : ShardedLayer<T>::kReplica;
}

// ------------------------------------------------------------ column-parallel
template <class T>
ColumnParallelLinear<T>::ColumnParallelLinear(std::size_t in, std::size_t out,
                                              comm::Communicator& tp)
    : TensorParallelLinear<T, ColumnParallelLinear<T>>(
          in, out, tp, in, divided(out, tp, describe("Linear", in, out, tp.size()), "output"),
          /*bias=*/true),
      local_out_(out / static_cast<std::size_t>(tp.size())) {}

template <class T>
Shape ColumnParallelLinear<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in == Shape{this->in_}, config, this->name(), " expects inputs of shape {",
                 this->in_, "} but gets shape ", in.str());
  return Shape{local_out_};
}

template <class T>
void ColumnParallelLinear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  this->local_.forward(ctx, x, y, saved);
}

template <class T>
void ColumnParallelLinear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  this->local_.backward(ctx, dy, dx, saved);
  // dx = sum over ranks of dy_shard W_shard.
  if (dx.data() != nullptr && this->tp_.size() > 1) allreduce_after(ctx, this->tp_, dx);
}

// --------------------------------------------------------------- row-parallel
template <class T>
RowParallelLinear<T>::RowParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp)
    : TensorParallelLinear<T, RowParallelLinear<T>>(
          in, out, tp, divided(in, tp, describe("Linear", in, out, tp.size()), "input"), out,
          /*bias=*/false),
      local_in_(in / static_cast<std::size_t>(tp.size())) {}

template <class T>
Shape RowParallelLinear<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in == Shape{local_in_}, config, this->name(), " expects its shard of shape {",
                 local_in_, "} of the input but gets shape ", in.str());
  return Shape{this->out_};
}

template <class T>
void RowParallelLinear<T>::bind(Vector<T> params, Vector<T> grads) {
  const std::size_t nw = this->out_ * local_in_, out = this->out_;
  this->local_.bind(Kokkos::subview(params, Kokkos::make_pair(std::size_t(0), nw)),
                    Kokkos::subview(grads, Kokkos::make_pair(std::size_t(0), nw)));
  b_ = Kokkos::subview(params, Kokkos::make_pair(nw, nw + out));
  db_ = Kokkos::subview(grads, Kokkos::make_pair(nw, nw + out));
}

template <class T>
void RowParallelLinear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  this->local_.forward(ctx, x, y, saved);  // this rank's part of x W^T
  if (this->tp_.size() > 1) allreduce_after(ctx, this->tp_, y);
  detail::add_bias<T>(ctx, y, b_);
}

template <class T>
void RowParallelLinear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  detail::accumulate_bias_grad<T>(ctx, dy, db_);
  this->local_.backward(ctx, dy, dx, saved);  // dx is this rank's shard of the input gradient
}

// ----------------------------------------------------------------- the model
template <class T>
TensorParallelLayers<T> make_tensor_parallel(ModelLayers<T> model, comm::Communicator& tp) {
  TensorParallelLayers<T> m;
  m.input = model.input;
  m.names = std::move(model.names);
  std::vector<LayerPtr<T>>& layers = model.layers;
  const std::size_t n = layers.size();
  // Input shape of every layer.
  std::vector<Shape> shapes{model.input};
  for (const auto& l : layers) shapes.push_back(l->output_shape(shapes.back()));
  // What the layers declare (Layer::tensor_split).
  auto pairable = [&](std::size_t i) {
    return layers[i]->tensor_split() == TensorSplit::linear && shapes[i].rank() == 1;
  };
  auto elementwise = [&](std::size_t i) {
    return layers[i]->tensor_split() == TensorSplit::elementwise;
  };
  if (tp.size() > 1)
    for (std::size_t i = 0; i < n; ++i) {
      if (!pairable(i)) continue;
      std::size_t j = i + 1;
      while (j < n && elementwise(j)) ++j;
      if (j == n || !pairable(j)) continue;
      const auto& a = dynamic_cast<const Linear<T>&>(*layers[i]);
      const auto& b = dynamic_cast<const Linear<T>&>(*layers[j]);
      layers[i] = std::make_unique<ColumnParallelLinear<T>>(a.in(), a.out(), tp);
      layers[j] = std::make_unique<RowParallelLinear<T>>(b.in(), b.out(), tp);
      i = j;
    }
  // Walk the layers: after a column-parallel layer the activation is sharded
  // until the row-parallel layer that follows.
  const ColumnParallelLinear<T>* column = nullptr;
  Shape shape = model.input;
  for (auto& layer : layers) {
    if (auto* c = dynamic_cast<const ColumnParallelLinear<T>*>(layer.get())) column = c;
    if (dynamic_cast<const RowParallelLinear<T>*>(layer.get())) column = nullptr;
    if (column && layer->tensor_split() == TensorSplit::elementwise)
      layer->set_column_shard(column->first_feature(), shape.numel() * static_cast<std::size_t>(tp.size()));
    shape = layer->output_shape(shape);
    m.cut_ok.push_back(column == nullptr);
    m.flops.push_back(layer->num_params() > 0 ? static_cast<double>(layer->num_params())
                                              : static_cast<double>(shape.numel()));
    m.layers.push_back(std::move(layer));
  }
  return m;
}

template class TensorParallelLinear<float, ColumnParallelLinear<float>>;
template class TensorParallelLinear<double, ColumnParallelLinear<double>>;
template class TensorParallelLinear<float, RowParallelLinear<float>>;
template class TensorParallelLinear<double, RowParallelLinear<double>>;
template class ColumnParallelLinear<float>;
template class ColumnParallelLinear<double>;
template class RowParallelLinear<float>;
template class RowParallelLinear<double>;
template TensorParallelLayers<float> make_tensor_parallel(ModelLayers<float>, comm::Communicator&);
template TensorParallelLayers<double> make_tensor_parallel(ModelLayers<double>, comm::Communicator&);

}  // namespace strata
