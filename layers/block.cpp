#include "layers/block.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/random.hpp"
#include "layers/named_tables.hpp"

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
  for (std::size_t j = 0; j < names_.size(); ++j)
    for (std::size_t k = 0; k < j; ++k)
      STRATA_REQUIRE(names_[j] != names_[k], config, name(), ": inner layers ", k, " and ", j,
                     " are both named '", names_[j], "'; parameter names must be unique");
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
std::vector<ParamInfo> Block<T>::param_table() const {
  return detail::joined_tables<ParamInfo>(layers_, names_, offsets_,
                                          [](const Layer<T>& l) { return l.param_table(); });
}

template <class T>
std::vector<BufferInfo> Block<T>::buffer_table() const {
  return detail::joined_tables<BufferInfo>(layers_, names_, offsets_,
                                           [](const Layer<T>& l) { return l.buffer_table(); });
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
  x_slot_.assign(n, ConstMatrix<T>());
  for (auto& l : layers_) l->set_slots(n);
}

template <class T>
std::size_t Block<T>::inner_outputs() const {
  std::size_t n = 0;
  for (std::size_t j = 0; j < layers_.size(); ++j) n += shapes_[j + 1].numel();
  return n;
}

template <class T>
std::size_t Block<T>::widest_inner_input() const {
  std::size_t widest = 0;
  for (std::size_t j = 1; j < layers_.size(); ++j) widest = std::max(widest, shapes_[j].numel());
  return widest;
}

template <class T>
std::size_t Block<T>::arena_bytes(std::size_t max_batch) const {
  return recompute_ ? max_batch * (inner_outputs() + 2 * widest_inner_input()) * sizeof(T) : 0;
}

template <class T>
void Block<T>::reserve(std::size_t batch, std::size_t) {
  const std::size_t n = layers_.size();
  max_batch_ = batch;
  row_offset_.assign(this->slots_, 0);
  acts_.assign(this->slots_, std::vector<Vector<T>>(n));
  owned_.clear();
  if (!recompute_) {  // the arena comes later (use_arena)
    for (std::size_t s = 0; s < this->slots_; ++s)
      for (std::size_t j = 0; j < n; ++j) {
        owned_.emplace_back("strata::Block::activation", batch * shapes_[j + 1].numel());
        acts_[s][j] = owned_.back();
      }
    owned_.emplace_back("strata::Block::grad_a", batch * widest_inner_input());
    grad_a_ = owned_.back();
    owned_.emplace_back("strata::Block::grad_b", batch * widest_inner_input());
    grad_b_ = owned_.back();
  }
  for (std::size_t j = 0; j < n; ++j) layers_[j]->reserve(batch, shapes_[j].numel());
}

template <class T>
void Block<T>::use_arena(Vector<T> arena) {
  if (!recompute_) return;
  STRATA_REQUIRE(arena.extent(0) * sizeof(T) >= arena_bytes(max_batch_), config, name(),
                 ": recomputation arena of ", arena.extent(0) * sizeof(T), " bytes for ",
                 arena_bytes(max_batch_));
  // Every slot computes in the same buffers: backward recomputes them first.
  std::size_t at = 0;
  auto take = [&](std::size_t count) {
    Vector<T> v(arena.data() + at, count);
    at += count;
    return v;
  };
  std::vector<Vector<T>> outs;
  for (std::size_t j = 0; j < layers_.size(); ++j) outs.push_back(take(max_batch_ * shapes_[j + 1].numel()));
  for (auto& slot : acts_) slot = outs;
  grad_a_ = take(max_batch_ * widest_inner_input());
  grad_b_ = take(max_batch_ * widest_inner_input());
}

template <class T>
std::size_t Block<T>::workspace_bytes(std::size_t max_batch, std::size_t slots) const {
  std::size_t inner = 0;
  for (const auto& l : layers_) inner += l->workspace_bytes(max_batch, slots);
  if (recompute_) return inner;  // the rest is the model's shared arena (arena_bytes)
  return (slots * max_batch * inner_outputs() + 2 * max_batch * widest_inner_input()) * sizeof(T) +
         inner;
}

namespace detail {
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
ConstMatrix<T> Block<T>::inner_forward(Context& ctx, ConstMatrix<T> x,
                                       const std::vector<Vector<T>>& outs) {
  const std::size_t batch = x.extent(0), n = layers_.size();
  ConstMatrix<T> in = x;
  for (std::size_t j = 0; j < n; ++j) {
    Matrix<T> out = reshape(outs[j], 0, batch, shapes_[j + 1].numel());
    layers_[j]->use_slot(this->slot_);
    layers_[j]->forward(ctx, in, out);
    // As Sequential rounds its layers' outputs (the caller rounds y as well).
    round_activations(ctx.exec, storage_, out.data(), out.size());
    in = out;
  }
  return in;
}

template <class T>
void Block<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) {
  const std::size_t batch = x.extent(0), slot = this->slot_;
  STRATA_REQUIRE(batch <= max_batch_ && slot < this->slots_, runtime, name(), ": batch of ",
                 batch, " rows in slot ", slot, " beyond the reserved ", max_batch_, " rows x ",
                 this->slots_, " slots");
  STRATA_REQUIRE(acts_[slot].front().data() != nullptr, config, name(),
                 ": recomputation without an arena (Sequential::build gives it)");
  row_offset_[slot] = next_row_offset_;
  x_slot_[slot] = x;
  ConstMatrix<T> f = inner_forward(ctx, x, acts_[slot]);
  if (residual_) {
    detail::add<T>(ctx, x, f, y);
  } else {
    const T* src = f.data();
    T* dst = y.data();
    for_range(ctx, "strata::Block::copy", f.size(), KOKKOS_LAMBDA(const std::size_t i) {
      dst[i] = src[i];
    });
  }
}

template <class T>
void Block<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) {
  const std::size_t batch = dy.extent(0), n = layers_.size(), slot = this->slot_;
  if (recompute_) {
    // The inside again, as the slot's forward computed it (its input is
    // still the caller's; Dropout draws by the row offset of that forward).
    for (auto& l : layers_) l->set_row_offset(row_offset_[slot]);
    inner_forward(ctx, x_slot_[slot], acts_[slot]);
    for (auto& l : layers_) l->set_row_offset(next_row_offset_);
  }
  Vector<T> bufs[2] = {grad_a_, grad_b_};
  ConstMatrix<T> g = dy;
  for (std::size_t j = n; j-- > 0;) {
    Matrix<T> dxj = dx;  // the block's input gradient: empty unless asked for
    if (j > 0) dxj = reshape(bufs[j % 2], 0, batch, shapes_[j].numel());
    layers_[j]->use_slot(slot);
    layers_[j]->backward(ctx, g, dxj);
    if (j > 0) round_activations(ctx.exec, storage_, dxj.data(), dxj.size());
    g = dxj;
  }
  // The skip connection: its gradient is dy itself (the caller rounds dx).
  if (residual_ && dx.data() != nullptr) detail::add<T>(ctx, dx, dy, dx);
}

template <class T>
void Block<T>::set_row_offset(std::size_t offset) {
  next_row_offset_ = offset;
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
