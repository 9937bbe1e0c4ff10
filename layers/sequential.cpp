#include "layers/sequential.hpp"

#include "backends/error.hpp"

#include <algorithm>
#include <sstream>

namespace strata {

template <class T>
Sequential<T>::Sequential(std::size_t in_features) : widths_{in_features}, offsets_{0} {
  STRATA_REQUIRE(in_features > 0, config, "Sequential: input width must be positive");
}

template <class T>
Sequential<T>& Sequential<T>::add(LayerPtr<T> layer) {
  STRATA_REQUIRE(!built_, config, "Sequential: cannot add layers after build()");
  std::size_t out = 0;
  try {
    out = layer->out_features(widths_.back());
  } catch (const Error& e) {
    STRATA_THROW(config, "layer ", layers_.size(), " (", layer->name(), "): ", e.message());
  }
  widths_.push_back(out);
  offsets_.push_back(offsets_.back() + layer->num_params());
  layers_.push_back(std::move(layer));
  return *this;
}

template <class T>
void Sequential<T>::build(std::size_t max_batch) {
  STRATA_REQUIRE(!layers_.empty(), config, "Sequential: the model has no layers");
  STRATA_REQUIRE(max_batch > 0, config, "Sequential: batch size must be positive");
  max_batch_ = max_batch;
  const std::size_t n = num_params();
  if (!built_) {
    params_ = VectorBuffer<T>("strata::params", n);
    grads_ = VectorBuffer<T>("strata::grads", n);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const auto slice = Kokkos::make_pair(offsets_[i], offsets_[i + 1]);
      layers_[i]->bind(Kokkos::subview(Vector<T>(params_), slice),
                       Kokkos::subview(Vector<T>(grads_), slice));
    }
  }
  acts_.clear();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    acts_.emplace_back("strata::activation", max_batch * widths_[i + 1]);
    layers_[i]->reserve(max_batch, widths_[i]);
  }
  // Input gradients of layers 1..L-1 (layer 0's is never needed).
  std::size_t widest = 0;
  for (std::size_t i = 1; i < layers_.size(); ++i) widest = std::max(widest, widths_[i]);
  grad_a_ = VectorBuffer<T>("strata::grad_a", max_batch * widest);
  grad_b_ = VectorBuffer<T>("strata::grad_b", max_batch * widest);
  dout_ = VectorBuffer<T>("strata::dout", max_batch * widths_.back());
  built_ = true;
}

template <class T>
void Sequential<T>::init(Init scheme, std::uint64_t seed) {
  STRATA_REQUIRE(built_, config, "Sequential: init() before build()");
  auto host = Kokkos::create_mirror_view(params_);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    HostVector<T> slice(host.data() + offsets_[i], offsets_[i + 1] - offsets_[i]);
    layers_[i]->init(slice, scheme, seed, i);
  }
  Kokkos::deep_copy(params_, host);
}

template <class T>
ConstMatrix<T> Sequential<T>::forward(Context& ctx, ConstMatrix<T> x) {
  STRATA_REQUIRE(built_, config, "Sequential: forward() before build()");
  const std::size_t batch = x.extent(0);
  STRATA_REQUIRE(x.extent(1) == in_features(), config, "model input has width ", x.extent(1),
                 " but the first layer (", layers_[0]->name(), ") expects width ", in_features());
  STRATA_REQUIRE(batch <= max_batch_, config, "batch of ", batch,
                 " rows exceeds the model's maximum batch of ", max_batch_);
  batch_ = batch;
  input_ = x;
  ConstMatrix<T> in = x;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Matrix<T> out = reshape(Vector<T>(acts_[i]), 0, batch, widths_[i + 1]);
    layers_[i]->forward(ctx, in, out);
    in = out;
  }
  return in;
}

template <class T>
Matrix<T> Sequential<T>::output_grad() const {
  return reshape(Vector<T>(dout_), 0, batch_, widths_.back());
}

template <class T>
void Sequential<T>::backward(Context& ctx, const std::function<void(std::size_t)>& after_layer) {
  ConstMatrix<T> dy = output_grad();
  Vector<T> bufs[2] = {grad_a_, grad_b_};
  for (std::size_t k = layers_.size(); k-- > 0;) {
    Matrix<T> dx;  // empty for the first layer: its input gradient is not needed
    if (k > 0) dx = reshape(bufs[k % 2], 0, batch_, widths_[k]);
    layers_[k]->backward(ctx, dy, dx);
    if (after_layer) after_layer(k);
    dy = dx;
  }
}

template <class T>
void Sequential<T>::zero_grad(Context& ctx) {
  Kokkos::deep_copy(ctx.exec, grads_, T(0));
}

template <class T>
void Sequential<T>::set_row_offset(std::size_t offset) {
  for (auto& l : layers_) l->set_row_offset(offset);
}

template <class T>
void Sequential<T>::set_training(bool training) {
  for (auto& l : layers_) l->set_training(training);
}

template <class T>
std::string Sequential<T>::summary() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    os << "  " << i << "  " << layers_[i]->name() << "  -> " << widths_[i + 1] << "  ("
       << (offsets_[i + 1] - offsets_[i]) << " parameters)\n";
  os << "  total parameters: " << num_params() << "\n";
  return os.str();
}

namespace detail {
template <class T>
std::size_t count_nonfinite(Context& ctx, const T* p, std::size_t n) {
  std::size_t bad = 0;
  Kokkos::parallel_reduce(
      "strata::count_nonfinite", Range(ctx.exec, 0, n),
      KOKKOS_LAMBDA(const std::size_t i, std::size_t& acc) {
        const T v = p[i];
        acc += (v != v || v - v != v - v) ? 1 : 0;  // NaN, or Inf (Inf - Inf is NaN)
      },
      bad);
  return bad;
}
}  // namespace detail

template <class T>
std::string Sequential<T>::first_nonfinite(Context& ctx) const {
  auto where = [&](std::size_t i) {
    return "layer " + std::to_string(i) + " (" + layers_[i]->name() + ")";
  };
  // Forward order for outputs, then backward order for gradients.
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (detail::count_nonfinite(ctx, acts_[i].data(), batch_ * widths_[i + 1]) > 0)
      return "the output of " + where(i);
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const std::size_t n = offsets_[i + 1] - offsets_[i];
    if (n > 0 && detail::count_nonfinite(ctx, grads_.data() + offsets_[i], n) > 0)
      return "the parameter gradients of " + where(i);
  }
  return "";
}

template class Sequential<float>;
template class Sequential<double>;

}  // namespace strata
