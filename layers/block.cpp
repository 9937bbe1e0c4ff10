#include "layers/block.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/random.hpp"

#include <algorithm>
#include <type_traits>

namespace strata {

template <class T>
Block<T>::Block(std::vector<LayerPtr<T>> layers, bool residual, std::vector<std::string> names)
    : layers_(std::move(layers)), names_(std::move(names)), residual_(residual), offsets_{0} {
  STRATA_REQUIRE(!layers_.empty(), config, residual ? "Residual" : "Block", ": no inner layers");
  STRATA_REQUIRE(names_.empty() || names_.size() == layers_.size(), config, name(), ": ",
                 names_.size(), " names for ", layers_.size(), " layers");
  if (names_.empty())
    for (std::size_t j = 0; j < layers_.size(); ++j) names_.push_back(std::to_string(j));
  for (const auto& l : layers_) offsets_.push_back(offsets_.back() + l->num_params());
}

template <class T>
std::string Block<T>::name() const {
  std::string s = residual_ ? "Residual(" : "Block(";
  for (std::size_t j = 0; j < layers_.size(); ++j) s += (j ? ", " : "") + layers_[j]->name();
  return s + ")";
}

template <class T>
Shape Block<T>::output_shape(const Shape& in) const {
  Shape s = in;
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    try {
      s = layers_[j]->output_shape(s);
    } catch (const Error& e) {
      STRATA_THROW(config, "inner layer ", names_[j], " (", layers_[j]->name(), "): ", e.message());
    }
  }
  STRATA_REQUIRE(!residual_ || s == in, config, "a residual block must keep the shape of its input ",
                 in.str(), " but its inner layers make ", s.str());
  return s;
}

template <class T>
void Block<T>::set_input_shape(const Shape& in) {
  Layer<T>::set_input_shape(in);
  shapes_.assign(1, in);
  for (auto& l : layers_) {
    l->set_input_shape(shapes_.back());
    shapes_.push_back(l->output_shape(shapes_.back()));
  }
}

template <class T>
template <class Info, class Table>
std::vector<Info> Block<T>::joined(Table table) const {
  std::vector<Info> all;
  for (std::size_t j = 0; j < layers_.size(); ++j)
    for (Info p : table(*layers_[j])) {
      p.name = names_[j] + "." + p.name;
      if constexpr (std::is_same_v<Info, ParamInfo>) p.offset += offsets_[j];
      all.push_back(std::move(p));
    }
  return all;
}

template <class T>
std::vector<ParamInfo> Block<T>::param_table() const {
  return joined<ParamInfo>([](const Layer<T>& l) { return l.param_table(); });
}

template <class T>
std::vector<BufferInfo> Block<T>::buffer_table() const {
  return joined<BufferInfo>([](const Layer<T>& l) { return l.buffer_table(); });
}

template <class T>
std::pair<std::size_t, std::size_t> Block<T>::buffer_owner(std::size_t k) const {
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    const std::size_t n = layers_[j]->buffer_table().size();
    if (k < n) return {j, k};
    k -= n;
  }
  STRATA_THROW(config, name(), ": no buffer ", k);
}

template <class T>
std::vector<double> Block<T>::read_buffer(std::size_t k) const {
  const auto [j, kj] = buffer_owner(k);
  return layers_[j]->read_buffer(kj);
}

template <class T>
void Block<T>::write_buffer(std::size_t k, const std::vector<double>& values) {
  const auto [j, kj] = buffer_owner(k);
  layers_[j]->write_buffer(kj, values);
}

template <class T>
double Block<T>::flops() const {
  double f = residual_ ? static_cast<double>(this->in_shape_.numel()) : 0.0;
  for (const auto& l : layers_) f += l->flops();
  return f;
}

template <class T>
void Block<T>::set_storage(Precision p) {
  storage_ = p;
  for (auto& l : layers_) l->set_storage(p);
}

template <class T>
void Block<T>::bind(Vector<T> params, Vector<T> grads) {
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    const auto slice = Kokkos::make_pair(offsets_[j], offsets_[j + 1]);
    layers_[j]->bind(Kokkos::subview(params, slice), Kokkos::subview(grads, slice));
  }
}

template <class T>
std::uint64_t Block<T>::inner_index(std::uint64_t layer_index, std::size_t j) {
  return (std::uint64_t(1) << 63) |
         (random::mix64(random::mix64(layer_index) + j + 1) >> 1);
}

template <class T>
void Block<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                    std::uint64_t layer_index) const {
  for (std::size_t j = 0; j < layers_.size(); ++j)
    layers_[j]->init(HostVector<T>(params.data() + offsets_[j], offsets_[j + 1] - offsets_[j]),
                     scheme, seed, inner_index(layer_index, j));
}

template <class T>
void Block<T>::set_slots(std::size_t n) {
  Layer<T>::set_slots(n);
  for (auto& l : layers_) l->set_slots(n);
}

template <class T>
void Block<T>::reserve(std::size_t batch, std::size_t) {
  const std::size_t n = layers_.size();
  max_batch_ = batch;
  acts_.clear();
  for (std::size_t s = 0; s < this->slots_; ++s)
    for (std::size_t j = 0; j < n; ++j)
      acts_.emplace_back("strata::Block::activation", batch * shapes_[j + 1].numel());
  std::size_t widest = 0;  // inputs of inner layers 1..n-1
  for (std::size_t j = 1; j < n; ++j) widest = std::max(widest, shapes_[j].numel());
  grad_a_ = VectorBuffer<T>("strata::Block::grad_a", batch * widest);
  grad_b_ = VectorBuffer<T>("strata::Block::grad_b", batch * widest);
  for (std::size_t j = 0; j < n; ++j) layers_[j]->reserve(batch, shapes_[j].numel());
}

template <class T>
std::size_t Block<T>::workspace_bytes(std::size_t max_batch, std::size_t slots) const {
  std::size_t outputs = 0, widest = 0, inner = 0;
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    outputs += shapes_[j + 1].numel();
    if (j > 0) widest = std::max(widest, shapes_[j].numel());
    inner += layers_[j]->workspace_bytes(max_batch, slots);
  }
  return (slots * max_batch * outputs + 2 * max_batch * widest) * sizeof(T) + inner;
}

namespace detail {
// The activations between inner layers are rounded to the storage precision,
// as Sequential rounds those between its layers.
template <class T>
void round_to(Context& ctx, Precision p, Matrix<T> m) {
  if constexpr (std::is_same_v<T, float>) {
    if (p != Precision::fp32) round_in_place(ctx.exec, p, Vector<float>(m.data(), m.size()));
  } else {
    (void)ctx, (void)p, (void)m;
  }
}

// y = a + b, elementwise over equal shapes (y may alias a or b).
template <class T>
void add(Context& ctx, ConstMatrix<T> a, ConstMatrix<T> b, Matrix<T> y) {
  const T* pa = a.data();
  const T* pb = b.data();
  T* py = y.data();
  for_range(ctx, "strata::Block::add", a.size(), KOKKOS_LAMBDA(const std::size_t i) {
    py[i] = pa[i] + pb[i];
  });
}
}  // namespace detail

template <class T>
void Block<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  const std::size_t batch = x.extent(0), n = layers_.size(), slot = this->slot_;
  STRATA_REQUIRE(batch <= max_batch_ && slot < this->slots_, runtime, name(), ": batch of ",
                 batch, " rows in slot ", slot, " beyond the reserved ", max_batch_, " rows x ",
                 this->slots_, " slots");
  ConstMatrix<T> in = x;
  for (std::size_t j = 0; j < n; ++j) {
    Matrix<T> out = reshape(Vector<T>(acts_[slot * n + j]), 0, batch, shapes_[j + 1].numel());
    layers_[j]->use_slot(slot);
    layers_[j]->forward(ctx, in, out);
    if (j + 1 < n) detail::round_to(ctx, storage_, out);  // the last output: the caller rounds y
    in = out;
  }
  if (residual_) {
    detail::add<T>(ctx, x, in, y);
  } else {
    const T* src = in.data();
    T* dst = y.data();
    for_range(ctx, "strata::Block::copy", in.size(), KOKKOS_LAMBDA(const std::size_t i) {
      dst[i] = src[i];
    });
  }
}

template <class T>
void Block<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) {
  const std::size_t batch = dy.extent(0), n = layers_.size();
  Vector<T> bufs[2] = {grad_a_, grad_b_};
  ConstMatrix<T> g = dy;
  for (std::size_t j = n; j-- > 0;) {
    Matrix<T> dxj = dx;  // the block's input gradient: empty unless asked for
    if (j > 0) dxj = reshape(bufs[j % 2], 0, batch, shapes_[j].numel());
    layers_[j]->use_slot(this->slot_);
    layers_[j]->backward(ctx, g, dxj);
    if (j > 0) detail::round_to(ctx, storage_, dxj);
    g = dxj;
  }
  // The skip connection: its gradient is dy itself (the caller rounds dx).
  if (residual_ && dx.data() != nullptr) detail::add<T>(ctx, dx, dy, dx);
}

template <class T>
void Block<T>::set_row_offset(std::size_t offset) {
  for (auto& l : layers_) l->set_row_offset(offset);
}

template <class T>
void Block<T>::begin_pass() {
  for (auto& l : layers_) l->begin_pass();
}

template <class T>
void Block<T>::set_training(bool training) {
  Layer<T>::set_training(training);
  for (auto& l : layers_) l->set_training(training);
}

template class Block<float>;
template class Block<double>;

}  // namespace strata
