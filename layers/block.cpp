#include "layers/block.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/random.hpp"
#include "layers/named_tables.hpp"
#include "layers/param_pieces.hpp"

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
std::vector<ParamSpec> Block<T>::params() const {
  return detail::joined_tables<ParamSpec>(layers_, names_, offsets_,
                                          [](const Layer<T>& l) { return l.params(); });
}

template <class T>
std::vector<BufferInfo> Block<T>::buffer_table() const {
  return detail::joined_tables<BufferInfo>(layers_, names_, offsets_,
                                           [](const Layer<T>& l) { return strata::buffer_table(l); });
}

template <class T>
std::pair<std::size_t, std::size_t> Block<T>::buffer_owner(std::size_t k) const {
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    const std::size_t n = strata::buffer_table(*layers_[j]).size();
    if (k < n) return {j, k};
    k -= n;
  }
  STRATA_THROW(config, name(), ": no buffer ", k);
}

template <class T>
std::vector<double> Block<T>::read_buffer(std::size_t k) const {
  const auto [j, kj] = buffer_owner(k);
  return capability<Buffers<T>>(*layers_[j])->read_buffer(kj);
}

template <class T>
void Block<T>::write_buffer(std::size_t k, const std::vector<double>& values) {
  const auto [j, kj] = buffer_owner(k);
  capability<Buffers<T>>(*layers_[j])->write_buffer(kj, values);
}

template <class T>
void Block<T>::add_costs(std::vector<LayerCost>& out) const {
  const std::size_t first = out.size();
  for (const auto& l : layers_) l->add_costs(out);
  if (residual_) out.push_back(this->cost(static_cast<double>(this->in_shape_.numel())));
  for (std::size_t i = first; i < out.size(); ++i) out[i].in_block = true;
}

template <class T>
void Block<T>::set_storage(Precision p) {
  storage_ = p;
  for (auto& l : layers_)
    if (auto* c = capability<Composite<T>>(*l)) c->set_storage(p);
}

template <class T>
void Block<T>::bind(Vector<T> params, Vector<T> grads) {
  for (std::size_t j = 0; j < layers_.size(); ++j) {
    const auto slice = Kokkos::make_pair(offsets_[j], offsets_[j + 1]);
    layers_[j]->bind(Kokkos::subview(params, slice), Kokkos::subview(grads, slice));
  }
}

template <class T>
void Block<T>::set_piece_hooks(const PieceHooks* hooks, std::size_t first) {
  hooks_ = hooks;
  piece_ = hook_pieces(layers_, hooks, first);
}

template <class T>
void Block<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                    std::uint64_t layer_index) const {
  for (std::size_t j = 0; j < layers_.size(); ++j)
    layers_[j]->init(HostVector<T>(params.data() + offsets_[j], offsets_[j + 1] - offsets_[j]),
                     scheme, seed, inner_index(layer_index, j));
}

template <class T>
std::uint64_t Block<T>::inner_index(std::uint64_t layer_index, std::size_t j) {
  return (std::uint64_t(1) << 63) |
         (random::mix64(random::mix64(layer_index) + j + 1) >> 1);
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
std::size_t Block<T>::inner_size(std::size_t batch) const {
  std::size_t n = batch * inner_outputs();
  for (const auto& l : layers_) n += l->saved_size(batch);
  return n;
}

template <class T>
std::size_t Block<T>::saved_size(std::size_t batch) const {
  return recompute_ ? 0 : inner_size(batch);
}

template <class T>
std::size_t Block<T>::arena_bytes(std::size_t max_batch) const {
  return recompute_ ? (inner_size(max_batch) + 2 * max_batch * widest_inner_input()) * sizeof(T) : 0;
}

template <class T>
void Block<T>::reserve(std::size_t batch, std::size_t) {
  max_batch_ = batch;
  if (!recompute_) {  // else in the arena (use_arena)
    const std::size_t g = batch * widest_inner_input();
    grads_owner_ = VectorBuffer<T>("strata::Block::input_grads", 2 * g);
    grad_a_ = Vector<T>(grads_owner_.data(), g);
    grad_b_ = Vector<T>(grads_owner_.data() + g, g);
  }
  for (std::size_t j = 0; j < layers_.size(); ++j) layers_[j]->reserve(batch, shapes_[j].numel());
}

template <class T>
void Block<T>::use_arena(Vector<T> arena) {
  if (!recompute_) return;
  STRATA_REQUIRE(arena.extent(0) * sizeof(T) >= arena_bytes(max_batch_), config, name(),
                 ": recomputation arena of ", arena.extent(0) * sizeof(T), " bytes for ",
                 arena_bytes(max_batch_));
  // Every micro-batch computes in the same place: backward recomputes it first.
  const std::size_t inner = inner_size(max_batch_), g = max_batch_ * widest_inner_input();
  arena_ = Vector<T>(arena.data(), inner);
  grad_a_ = Vector<T>(arena.data() + inner, g);
  grad_b_ = Vector<T>(arena.data() + inner + g, g);
}

template <class T>
std::size_t Block<T>::workspace_bytes(std::size_t max_batch) const {
  std::size_t inner = 0;
  for (const auto& l : layers_) inner += l->workspace_bytes(max_batch);
  if (recompute_) return inner;  // the rest is the model's shared arena (arena_bytes)
  return 2 * max_batch * widest_inner_input() * sizeof(T) + inner;
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
ConstMatrix<T> Block<T>::inner_forward(Context& ctx, ConstMatrix<T> x, Saved<T>& saved,
                                       Vector<T> memory) {
  const std::size_t batch = x.extent(0), n = layers_.size();
  STRATA_REQUIRE(batch <= max_batch_ && memory.extent(0) >= inner_size(batch), runtime, name(),
                 ": a micro-batch of ", batch, " samples needs ", inner_size(batch),
                 " saved values, has ", memory.extent(0),
                 recompute_ ? " (recomputation arena: Sequential::build gives it)" : "");
  saved.inner.resize(n);
  std::size_t at = 0;
  auto take = [&](std::size_t count) {
    Vector<T> v(memory.data() + at, count);
    at += count;
    return v;
  };
  ConstMatrix<T> in = x;
  for (std::size_t j = 0; j < n; ++j) {
    Matrix<T> out = reshape(take(batch * shapes_[j + 1].numel()), 0, batch, shapes_[j + 1].numel());
    Saved<T>& s = saved.inner[j];
    s.x = in;
    s.y = out;
    s.row_offset = saved.row_offset;
    s.training = saved.training;
    s.recomputing = saved.recomputing;
    s.scratch = take(layers_[j]->saved_size(batch));
    if (hooks_ && hooks_->before && piece_[j] != SIZE_MAX)
      hooks_->before(piece_[j], saved.recomputing ? Pass::recompute : Pass::forward);
    layers_[j]->forward(ctx, in, out, s);
    // As Sequential rounds its layers' outputs (the caller rounds y as well).
    round_activations(ctx.exec, storage_, out.data(), out.size());
    in = out;
  }
  return in;
}

template <class T>
void Block<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  ConstMatrix<T> f = inner_forward(ctx, x, saved, recompute_ ? arena_ : saved.scratch);
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
std::size_t Block<T>::row_width(std::size_t j) const {
  const std::size_t positions = shapes_[0].rank() >= 2 ? shapes_[0][0] : 1;
  return shapes_[j].numel() / positions;
}

template <class T>
std::size_t Block<T>::decode_size(std::size_t max_positions) const {
  std::size_t n = 0;
  for (std::size_t j = 0; j < layers_.size(); ++j)
    n += strata::decode_size(*layers_[j], max_positions) + row_width(j + 1);
  return n;
}

template <class T>
void Block<T>::decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
                      std::size_t max_positions, Saved<T>& state) {
  const std::size_t n = layers_.size();
  STRATA_REQUIRE(state.scratch.extent(0) >= decode_size(max_positions), runtime, name(),
                 ": decoding needs ", decode_size(max_positions), " values of state, has ",
                 state.scratch.extent(0));
  state.inner.resize(n);
  std::size_t at = 0;
  auto take = [&](std::size_t count) {
    Vector<T> v(state.scratch.data() + at, count);
    at += count;
    return v;
  };
  // The same layout at every position: each inner layer's state, then its output row.
  ConstMatrix<T> in = x;
  for (std::size_t j = 0; j < n; ++j) {
    Saved<T>& s = state.inner[j];
    s.scratch = take(strata::decode_size(*layers_[j], max_positions));
    Matrix<T> out = reshape(take(row_width(j + 1)), 0, 1, row_width(j + 1));
    decode_layer(ctx, *layers_[j], in, out, position, max_positions, s);
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
void Block<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const std::size_t batch = dy.extent(0), n = layers_.size();
  // The inside again, as the micro-batch's forward computed it: its input is
  // still the caller's, and its row offset and Dropout passes are in `saved`.
  if (recompute_) {
    saved.recomputing = true;  // no second update of running statistics
    inner_forward(ctx, saved.x, saved, arena_);
    saved.recomputing = false;
  }
  Vector<T> bufs[2] = {grad_a_, grad_b_};
  ConstMatrix<T> g = dy;
  for (std::size_t j = n; j-- > 0;) {
    Matrix<T> dxj = dx;  // the block's input gradient: empty unless asked for
    if (j > 0) dxj = reshape(bufs[j % 2], 0, batch, shapes_[j].numel());
    const bool piece = hooks_ && piece_[j] != SIZE_MAX;
    if (piece && hooks_->before) hooks_->before(piece_[j], Pass::backward);
    layers_[j]->backward(ctx, g, dxj, saved.inner[j]);
    if (piece && hooks_->done) hooks_->done(piece_[j]);
    if (j > 0) round_activations(ctx.exec, storage_, dxj.data(), dxj.size());
    g = dxj;
  }
  // The skip connection: its gradient is dy itself (the caller rounds dx).
  if (residual_ && dx.data() != nullptr) detail::add<T>(ctx, dx, dy, dx);
}

template class Block<float>;
template class Block<double>;

}  // namespace strata
