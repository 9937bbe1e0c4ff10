#include "layers/sequential.hpp"

#include "backends/error.hpp"
#include "backends/exact_sum.hpp"
#include "backends/units.hpp"
#include "backends/launch.hpp"
#include "backends/trace.hpp"
#include "layers/activation.hpp"
#include "layers/named_tables.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>
#include <type_traits>

namespace strata {

template <class T>
Sequential<T>::Sequential(std::size_t in_features, std::size_t first_index)
    : offsets_{0}, first_index_(first_index) {
  STRATA_REQUIRE(in_features > 0, config, "Sequential: input width must be positive");
  shapes_.push_back(Shape{in_features});
  widths_.push_back(in_features);
}

template <class T>
Sequential<T>::Sequential(const Shape& input, std::size_t first_index)
    : shapes_{input}, widths_{input.numel()}, offsets_{0}, first_index_(first_index) {
  STRATA_REQUIRE(input.rank() > 0, config, "Sequential: the input shape is empty");
}

template <class T>
Sequential<T> Sequential<T>::stage(const Shape& input, std::size_t first_index) {
  Sequential<T> s(input, first_index);
  s.tie_copies_allowed_ = true;
  return s;
}

template <class T>
Sequential<T>& Sequential<T>::add(LayerPtr<T> layer, std::string name) {
  STRATA_REQUIRE(!built_, config, "Sequential: cannot add layers after build()");
  const std::string where =
      "layer " + std::to_string(first_index_ + layers_.size()) + " (" + layer->name() + ")";
  Shape out;
  try {
    out = layer->output_shape(shapes_.back());
  } catch (const Error& e) {
    STRATA_THROW(config, where, " cannot take the output of the layer before it, of shape ",
                 shapes_.back().str(), ": ", e.message());
  }
  layer->set_input_shape(shapes_.back());
  if (auto* tie = capability<TiedWeight<T>>(*layer); tie && !tie->tied_to().empty()) {
    const std::string wanted = tie->tied_to() + ".weight";
    const auto params = parameters();
    const auto it = std::find_if(params.begin(), params.end(),
                                 [&](const ParamInfo& p) { return p.name == wanted; });
    if (it == params.end() && tie_copies_allowed_) {  // on another pipeline stage: a copy
      tie->untie_weight();
    } else {
      STRATA_REQUIRE(it != params.end(), config, where, ": ties its weight to '", wanted,
                     "', which no earlier layer of this model has (tie names an earlier "
                     "top-level layer with a weight)");
      try {
        tie->tie_weight(it->shape);
      } catch (const Error& e) {
        STRATA_THROW(config, where, ": ", e.message());
      }
      ties_.push_back({layers_.size(), it->offset, it->shape.numel()});
    }
  }
  if (name.empty()) name = std::to_string(first_index_ + layers_.size());
  for (std::size_t i = 0; i < names_.size(); ++i)
    STRATA_REQUIRE(names_[i] != name, config, where, ": the name '", name, "' is taken by layer ",
                   first_index_ + i, " (", layers_[i]->name(), "); parameter names must be unique");
  names_.push_back(std::move(name));
  shapes_.push_back(out);
  widths_.push_back(out.numel());
  offsets_.push_back(offsets_.back() + layer->num_params());
  layers_.push_back(std::move(layer));
  return *this;
}

template <class T>
void resolve_ties(std::vector<LayerPtr<T>>& layers, const std::vector<std::string>& names) {
  std::map<std::string, Shape> weights;  // "name.weight" of the layers so far
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string name = i < names.size() && !names[i].empty() ? names[i] : std::to_string(i);
    if (auto* tie = capability<TiedWeight<T>>(*layers[i]); tie && !tie->tied_to().empty()) {
      const auto it = weights.find(tie->tied_to() + ".weight");
      STRATA_REQUIRE(it != weights.end(), config, "layer ", i, " (", layers[i]->name(),
                     "): ties its weight to '", tie->tied_to(),
                     ".weight', which no earlier layer of the model has");
      tie->tie_weight(it->second);
    }
    for (const auto& p : layers[i]->param_table()) weights[name + "." + p.name] = p.shape;
  }
}

template void resolve_ties<float>(std::vector<LayerPtr<float>>&, const std::vector<std::string>&);
template void resolve_ties<double>(std::vector<LayerPtr<double>>&, const std::vector<std::string>&);

template <class T>
std::vector<ParamInfo> Sequential<T>::parameters() const {
  return detail::joined_tables<ParamInfo>(layers_, names_, offsets_,
                                          [](const Layer<T>& l) { return l.param_table(); });
}

template <class T>
std::vector<BufferInfo> Sequential<T>::buffers() const {
  return detail::joined_tables<BufferInfo>(layers_, names_, offsets_,
                                           [](const Layer<T>& l) { return strata::buffer_table(l); });
}

template <class T>
std::vector<std::pair<std::string, std::string>> Sequential<T>::tied_weights() const {
  std::vector<std::pair<std::string, std::string>> ties;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::string to = strata::tied_to(*layers_[i]);
    // A pipeline stage's copy (untied) holds its weight itself.
    if (to.empty() || (!layers_[i]->param_table().empty() &&
                       layers_[i]->param_table().front().name == "weight"))
      continue;
    ties.emplace_back(names_[i] + ".weight", to + ".weight");
  }
  return ties;
}

template <class T>
std::map<std::string, std::vector<double>> Sequential<T>::read_buffers() const {
  std::map<std::string, std::vector<double>> all;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto* b = capability<Buffers<T>>(*layers_[i]);
    if (!b) continue;
    const auto table = b->buffer_table();
    for (std::size_t k = 0; k < table.size(); ++k)
      all[names_[i] + "." + table[k].name] = b->read_buffer(k);
  }
  return all;
}

template <class T>
void Sequential<T>::write_buffers(const std::map<std::string, std::vector<double>>& values) {
  std::size_t known = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto* b = capability<Buffers<T>>(*layers_[i]);
    if (!b) continue;
    const auto table = b->buffer_table();
    for (std::size_t k = 0; k < table.size(); ++k, ++known) {
      const std::string name = names_[i] + "." + table[k].name;
      const auto it = values.find(name);
      STRATA_REQUIRE(it != values.end(), config, "no values for buffer '", name, "' of layer ",
                     first_index_ + i, " (", layers_[i]->name(), ")");
      STRATA_REQUIRE(it->second.size() == table[k].size, config, "buffer '", name, "' has ",
                     table[k].size, " values, not ", it->second.size());
      b->write_buffer(k, it->second);
    }
  }
  // Every name of the model was found: more names means unknown ones.
  if (values.size() != known) {
    const auto have = read_buffers();
    for (const auto& entry : values)
      STRATA_REQUIRE(have.count(entry.first), config, "the model has no buffer '", entry.first, "'");
  }
}

template <class T>
std::vector<bool> Sequential<T>::kept_outputs() const {
  // Output i is read in backward by layer i itself or, as its input, by layer i + 1.
  std::vector<bool> kept(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i)
    kept[i] = layers_[i]->backward_reads_output() ||
              (i + 1 < layers_.size() && layers_[i + 1]->backward_reads_input());
  return kept;
}

template <class T>
std::vector<bool> Sequential<T>::fusions(const BuildOptions& o) const {
  std::vector<bool> f(layers_.size(), false);
  if (!o.fuse_activations || o.numerics.storage != Precision::fp32) return f;
  for (std::size_t i = 1; i < layers_.size(); ++i) {
    const auto* a = dynamic_cast<const Activation<T>*>(layers_[i].get());
    const auto* into = capability<FusedActivation>(*layers_[i - 1]);
    f[i] = a != nullptr && into != nullptr && !f[i - 1] && into->takes(a->kind());
  }
  return f;
}

template <class T>
Vector<T> Sequential<T>::output_buffer(std::size_t s, std::size_t i) const {
  while (fused(i)) --i;  // layer 0 is never fused
  return acts_[s * layers_.size() + i];
}

template <class T>
std::size_t Sequential<T>::activation_bytes(const BuildOptions& o) const {
  const std::size_t max_batch = o.max_batch, slots = o.slots;
  const std::vector<bool> fused = fusions(o);
  std::size_t outputs = 0, widest = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) outputs += fused[i] ? 0 : widths_[i + 1];
  for (std::size_t i = 1; i < layers_.size(); ++i) widest = std::max(widest, widths_[i]);
  std::size_t workspace = slots * saved_per_slot(max_batch) * sizeof(T), arena = 0;
  for (const auto& l : layers_) {
    workspace += l->workspace_bytes(max_batch);
    arena = std::max(arena, strata::arena_bytes(*l, max_batch));
  }
  // Loss gradients per slot and the input-gradient ping-pong buffers.
  const std::size_t gradients = (slots * max_batch * widths_.back() + 2 * max_batch * widest) * sizeof(T);
  const std::size_t kept =
      o.numerics.storage16() ? ActivationStore<T>::bytes(std::vector<std::size_t>(widths_.begin() + 1, widths_.end()),
                                              kept_outputs(), max_batch, slots)
                  : slots * max_batch * outputs * sizeof(T);
  return kept + gradients + workspace + (arena + sizeof(T) - 1) / sizeof(T) * sizeof(T);
}

template <class T>
std::size_t Sequential<T>::allocated_activation_bytes() const {
  STRATA_REQUIRE(built_, config, "Sequential: allocated_activation_bytes() before build()");
  std::size_t n = (grad_a_.span() + grad_b_.span()) * sizeof(T);
  for (const auto& d : dout_) n += d.span() * sizeof(T);
  for (const auto& a : acts_) n += a.span() * sizeof(T);
  if (storage16()) n += store_.allocated_bytes();
  for (const auto& l : layers_) n += l->workspace_bytes(max_batch_);
  return n + (saved_memory_.span() + arena_.span()) * sizeof(T);
}

template <class T>
void Sequential<T>::build(std::size_t max_batch, std::size_t slots, std::size_t pad_multiple) {
  BuildOptions o;
  o.max_batch = max_batch;
  o.slots = slots;
  o.pad_multiple = pad_multiple;
  build(o);
}

template <class T>
void Sequential<T>::build(const BuildOptions& o) {
  STRATA_REQUIRE(!built_, config, "Sequential: build() twice (a model is built once, for "
                 "everything it is built for: BuildOptions)");
  STRATA_REQUIRE(!layers_.empty(), config, "Sequential: the model has no layers");
  STRATA_REQUIRE(o.max_batch > 0, config, "Sequential: batch size must be positive");
  STRATA_REQUIRE(o.slots > 0 && o.pad_multiple > 0, config,
                 "Sequential: slots and padding must be positive");
  const Numerics& nm = o.numerics;
  nm.check(std::is_same_v<T, float>);
  if (nm.exact())
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::string issue = strata::reproducibility_issue(*layers_[i]);
      STRATA_REQUIRE(issue.empty(), config, "--reproducible: layer ",
                     names_[i].empty() ? std::to_string(first_index_ + i) : names_[i], " (",
                     layers_[i]->name(), ") ", issue);
    }
  numerics_ = nm;
  fused_ = fusions(o);
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (fused_[i])
      capability<FusedActivation>(*layers_[i - 1])
          ->fuse(dynamic_cast<const Activation<T>&>(*layers_[i]).kind());
  for (auto& l : layers_) {
    strata::set_storage(*l, nm.storage);
    strata::set_inner_chunk(*l, nm.inner_chunk);
  }
  const std::size_t max_batch = o.max_batch, slots = o.slots;
  max_batch_ = max_batch;
  slots_ = slots;
  const std::size_t n = num_params();
  const std::size_t padded = (n + o.pad_multiple - 1) / o.pad_multiple * o.pad_multiple;
  const std::vector<std::size_t> pieces = piece_offsets();
  if (!o.param_units.empty()) param_units_ = UnitBuffers<T>(o.param_units, pieces, o.pad_multiple, "strata::unit_params");
  else params_ = VectorBuffer<T>("strata::params", padded);
  if (!o.grad_units.empty()) {
    STRATA_REQUIRE(!nm.exact(), config, "Sequential: gradient units with exact sums (the exact "
                   "twin follows one flat gradient buffer)");
    grad_units_ = UnitBuffers<T>(o.grad_units, pieces, o.pad_multiple, "strata::unit_grads");
  } else {
    grads_owner_ = VectorBuffer<T>("strata::grads", padded);
    grads_ = grads_owner_;
  }
  bind_layers();
  if (nm.exact()) exact_ = Kokkos::View<double*, MemSpace>("strata::exact_grads", 2 * padded);
  dout_.clear();
  for (std::size_t s = 0; s < slots; ++s) dout_.emplace_back("strata::dout", max_batch * widths_.back());
  allocate_activations();
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->reserve(max_batch, widths_[i]);
  // Per micro-batch in flight and layer: a Saved record and its scratch.
  saved_.assign(slots * layers_.size(), Saved<T>());
  saved_memory_ = VectorBuffer<T>("strata::saved", slots * saved_per_slot(max_batch));
  for (std::size_t s = 0, at = 0; s < slots; ++s)
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::size_t n = layers_[i]->saved_size(max_batch);
      saved_[s * layers_.size() + i].scratch = Vector<T>(saved_memory_.data() + at, n);
      at += n;
    }
  // One arena for every recomputing layer (they compute in it in turn).
  std::size_t arena = 0;
  for (const auto& l : layers_) arena = std::max(arena, strata::arena_bytes(*l, max_batch));
  arena_ = VectorBuffer<T>("strata::recompute_arena", (arena + sizeof(T) - 1) / sizeof(T));
  for (auto& l : layers_) strata::use_arena(*l, Vector<T>(arena_));
  batch_.assign(slots, 0);
  // Input gradients of layers 1..L-1 (layer 0's is never needed).
  std::size_t widest = 0;
  for (std::size_t i = 1; i < layers_.size(); ++i) widest = std::max(widest, widths_[i]);
  grad_a_ = VectorBuffer<T>("strata::grad_a", max_batch * widest);
  grad_b_ = VectorBuffer<T>("strata::grad_b", max_batch * widest);
  built_ = true;
}

template <class T>
void Sequential<T>::allocate_activations() {
  acts_.clear();
  store_ = ActivationStore<T>();
  if (storage16()) {
    store_.allocate(numerics_.storage, std::vector<std::size_t>(widths_.begin() + 1, widths_.end()),
                    kept_outputs(), max_batch_, slots_);
    return;
  }
  for (std::size_t s = 0; s < slots_; ++s)
    for (std::size_t i = 0; i < layers_.size(); ++i)
      acts_.emplace_back("strata::activation", fused_[i] ? 0 : max_batch_ * widths_[i + 1]);
}

template <class T>
void Sequential<T>::bind_layers() {
  // Leaf by leaf: with units, a block's values may lie in two unit buffers.
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for_each_leaf_slice(*layers_[i], offsets_[i], [&](Layer<T>& l, std::size_t first, std::size_t last) {
      l.bind(params(first, last), grads(first, last));
    });
  for (const Tie& t : ties_)
    capability<TiedWeight<T>>(*layers_[t.layer])->bind_tied(params(t.offset, t.offset + t.size),
                                                             grads(t.offset, t.offset + t.size));
}

template <class T>
Vector<T> Sequential<T>::flat_grads() const {
  STRATA_REQUIRE(grad_units_.empty(), config, "Sequential: the gradients are in units "
                 "(BuildOptions::grad_units), not in one flat buffer");
  return grads_;
}

template <class T>
Vector<T> Sequential<T>::flat_params() const {
  STRATA_REQUIRE(param_units_.empty(), config, "Sequential: the parameters are in units "
                 "(BuildOptions::param_units), not in one flat buffer");
  return params_;
}

template <class T>
Vector<T> Sequential<T>::grads(std::size_t first, std::size_t last) const {
  STRATA_REQUIRE(first <= last && last <= num_params(), config, "Sequential: gradients [", first,
                 ", ", last, ") of ", num_params());
  if (grad_units_.empty()) return Kokkos::subview(grads_, Kokkos::make_pair(first, last));
  return grad_units_.range(first, last);
}

template <class T>
Vector<T> Sequential<T>::params(std::size_t first, std::size_t last) const {
  STRATA_REQUIRE(first <= last && last <= num_params(), config, "Sequential: parameters [", first,
                 ", ", last, ") of ", num_params());
  if (param_units_.empty()) return Kokkos::subview(Vector<T>(params_), Kokkos::make_pair(first, last));
  return param_units_.range(first, last);
}

template <class T>
void Sequential<T>::use_grad_storage(Vector<T> storage) {
  STRATA_REQUIRE(built_, config, "Sequential: use_grad_storage() before build()");
  STRATA_REQUIRE(grad_units_.empty(), config, "Sequential: use_grad_storage() with gradient units");
  STRATA_REQUIRE(storage.extent(0) >= grads_.extent(0), config, "Sequential: gradient storage of ",
                 storage.extent(0), " elements for ", grads_.extent(0));
  Vector<T> target(storage.data(), grads_.extent(0));
  Kokkos::deep_copy(target, grads_);
  grads_ = target;
  grads_owner_ = VectorBuffer<T>();
  bind_layers();
}

template <class T>
void Sequential<T>::init(Init scheme, std::uint64_t seed) {
  STRATA_REQUIRE(built_, config, "Sequential: init() before build()");
  if (!param_units_.empty()) {
    const std::vector<std::size_t> pieces = piece_offsets();
    for (std::size_t u = 0; u < param_units_.units().size(); ++u) {
      if (!param_units_.alone(u)) continue;
      const BufferUnit& unit = param_units_.units()[u];
      const std::size_t first = pieces[unit.first_piece], last = pieces[unit.last_piece];
      std::vector<T> v;
      if (last > first) {  // the values of the layers holding it, cut to the unit
        const std::size_t l0 = layer_of(first), l1 = layer_of(last - 1) + 1;
        const std::vector<T> all = initial_values(l0, l1, scheme, seed);
        v.assign(all.begin() + static_cast<std::ptrdiff_t>(first - offsets_[l0]),
                 all.begin() + static_cast<std::ptrdiff_t>(last - offsets_[l0]));
      }
      Kokkos::deep_copy(Kokkos::subview(param_units_.unit(u), Kokkos::make_pair(std::size_t(0), v.size())),
                        Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(v.data(), v.size()));
    }
    return;
  }
  const std::vector<T> v = initial_values(0, layers_.size(), scheme, seed);
  Kokkos::deep_copy(Kokkos::subview(Vector<T>(params_), Kokkos::make_pair(std::size_t(0), v.size())),
                    Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(v.data(), v.size()));
}

template <class T>
std::vector<T> Sequential<T>::initial_values(std::size_t first_layer, std::size_t last_layer,
                                             Init scheme, std::uint64_t seed) {
  STRATA_REQUIRE(first_layer <= last_layer && last_layer <= layers_.size(), config,
                 "Sequential: initial values of layers [", first_layer, ", ", last_layer, ") of ",
                 layers_.size());
  const std::size_t base = offsets_[first_layer];
  std::vector<T> host(offsets_[last_layer] - base, T(0));
  for (std::size_t i = first_layer; i < last_layer; ++i) {
    HostVector<T> slice(host.data() + offsets_[i] - base, offsets_[i + 1] - offsets_[i]);
    layers_[i]->init(slice, scheme, seed, first_index_ + i);
  }
  return host;
}

template <class T>
void Sequential<T>::round_storage(Context& ctx, Matrix<T> m) const {
  round_activations(ctx.exec, numerics_.storage, m.data(), m.size());
}

template <class T>
ConstMatrix<T> Sequential<T>::forward(Context& ctx, ConstMatrix<T> x, std::size_t slot,
                                      bool new_pass) {
  STRATA_REQUIRE(built_, config, "Sequential: forward() before build()");
  const std::size_t batch = x.extent(0);
  STRATA_REQUIRE(x.extent(1) == in_features(), config, "model input has width ", x.extent(1),
                 " but the first layer (", layers_[0]->name(), ") expects width ", in_features());
  STRATA_REQUIRE(batch <= max_batch_, config, "batch of ", batch,
                 " rows exceeds the model's maximum batch of ", max_batch_);
  STRATA_REQUIRE(slot < slots_, config, "Sequential: slot ", slot, " of ", slots_);
  batch_[slot] = batch;
  const std::size_t L = layers_.size();
  ConstMatrix<T> in = x;
  const bool real16 = storage16();
  for (std::size_t i = 0; i < L; ++i) {
    if (fused_[i]) continue;  // the layer before applied it: `in` is its output
    if (new_pass) strata::begin_pass(*layers_[i]);
    if (hooks_->before && piece_of_[i] != SIZE_MAX) hooks_->before(piece_of_[i], Pass::forward);
    Matrix<T> out = real16 ? store_.output(i, batch)
                           : reshape(output_buffer(slot, i), 0, batch, widths_[i + 1]);
    {
      STRATA_SPAN("compute", "forward " + layers_[i]->name());
      ScopedFloatInputs inputs(ctx.blas, gemm_inputs(i));
      Saved<T>& s = saved_[slot * L + i];
      s.x = in;
      s.y = out;
      s.row_offset = row_offset_;
      s.training = training_;
      layers_[i]->forward(ctx, in, out, s);
      if (real16) store_.store(ctx, slot, i, batch, training_);
      else round_storage(ctx, out);
      if (trace::enabled()) ctx.exec.fence();  // spans time the kernels, not their launch
    }
    in = out;
  }
  return in;
}

template <class T>
Matrix<T> Sequential<T>::output_grad(std::size_t slot) const {
  return reshape(Vector<T>(dout_[slot]), 0, batch_[slot], widths_.back());
}

template <class T>
void Sequential<T>::round_output_grad(Context& ctx, std::size_t slot) {
  round_storage(ctx, output_grad(slot));
}

template <class T>
void Sequential<T>::backward(Context& ctx, const std::function<void(std::size_t)>& after_layer,
                             std::size_t slot) {
  round_output_grad(ctx, slot);
  backward(ctx, output_grad(slot), Matrix<T>(), slot, after_layer);
}

template <class T>
void Sequential<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx_in, std::size_t slot,
                             const std::function<void(std::size_t)>& after_layer) {
  STRATA_REQUIRE(slot < slots_, config, "Sequential: slot ", slot, " of ", slots_);
  const std::size_t batch = batch_[slot];
  STRATA_REQUIRE(dy.extent(0) == batch && dy.extent(1) == out_features(), config,
                 "Sequential: output gradient of shape (", dy.extent(0), ", ", dy.extent(1),
                 ") for an output of (", batch, ", ", out_features(), ")");
  STRATA_REQUIRE(dx_in.data() == nullptr ||
                     (dx_in.extent(0) == batch && dx_in.extent(1) == in_features()),
                 config, "Sequential: input gradient buffer of shape (", dx_in.extent(0), ", ",
                 dx_in.extent(1), ") for an input of (", batch, ", ", in_features(), ")");
  // --reproducible: layers add parameter gradients into the exact twin.
  ExactGradients exact{grads_.data(), exact_.data(), grads_.extent(0), numerics_.exact_chunk};
  struct Restore {
    Context& ctx;
    const ExactGradients* previous;
    ~Restore() { ctx.exact = previous; }
  } restore{ctx, ctx.exact};
  if (numerics_.exact()) ctx.exact = &exact;
  Vector<T> bufs[2] = {grad_a_, grad_b_};
  std::size_t next = 0;  // the buffer not holding dy
  const bool real16 = storage16();
  for (std::size_t k = layers_.size(); k-- > 0;) {
    if (fused_[k]) {  // the layer before applies its derivative: dy passes through
      if (after_layer) after_layer(k);
      continue;
    }
    Matrix<T> dx = dx_in;  // the model input's gradient: empty unless asked for
    if (k > 0) dx = reshape(bufs[next], 0, batch, widths_[k]);
    next ^= 1;
    const bool piece = !piece_of_.empty() && piece_of_[k] != SIZE_MAX;
    if (piece && hooks_->before) hooks_->before(piece_of_[k], Pass::backward);
    {
      STRATA_SPAN("compute", "backward " + layers_[k]->name());
      if (real16) {  // the views the layer saved in forward hold its activations again
        if (k > 0 && layers_[k]->backward_reads_input()) store_.restore(ctx, slot, k - 1);
        if (layers_[k]->backward_reads_output()) store_.restore(ctx, slot, k);
      }
      ScopedFloatInputs inputs(ctx.blas, gemm_inputs(k));
      layers_[k]->backward(ctx, dy, dx, saved_[slot * layers_.size() + k]);
      // Also the model input's gradient (a pipeline stage sends it on, and
      // single-rank training rounds it as the gradient between two layers).
      if (dx.data() != nullptr) round_storage(ctx, dx);
      if (trace::enabled()) ctx.exec.fence();
    }
    if (piece && hooks_->done) hooks_->done(piece_of_[k]);
    if (after_layer) after_layer(k);
    dy = dx;
  }
}

template <class T>
std::vector<std::size_t> Sequential<T>::piece_offsets() const {
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < layers_.size(); ++i) append_piece_starts<T>(*layers_[i], offsets_[i], starts);
  if (starts.empty()) starts.push_back(0);
  starts.push_back(num_params());
  return starts;
}

template <class T>
std::vector<PieceCall> Sequential<T>::piece_calls(bool backward) const {
  std::vector<std::size_t> first(layers_.size() + 1, 0);
  for (std::size_t i = 0; i < layers_.size(); ++i)
    first[i + 1] = first[i] + append_piece_calls<T>(*layers_[i], first[i], Pass::forward, nullptr);
  std::vector<PieceCall> calls;
  if (!backward) {
    for (std::size_t i = 0; i < layers_.size(); ++i) append_piece_calls<T>(*layers_[i], first[i], Pass::forward, &calls);
    return calls;
  }
  for (std::size_t k = layers_.size(); k-- > 0;) append_backward_calls<T>(*layers_[k], first[k], calls);
  return calls;
}

template <class T>
void Sequential<T>::set_piece_hooks(PieceHooks hooks) {
  *hooks_ = std::move(hooks);
  const PieceHooks* h = hooks_->empty() ? nullptr : hooks_.get();
  piece_of_ = hook_pieces(layers_, h, 0);
  if (!h) piece_of_.clear();
}

template <class T>
std::size_t Sequential<T>::layer_of(std::size_t flat) const {
  STRATA_REQUIRE(flat < num_params(), config, "Sequential: value ", flat, " of ", num_params());
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), flat);
  return static_cast<std::size_t>(it - offsets_.begin()) - 1;
}

template <class T>
void Sequential<T>::zero_grad(Context& ctx) {
  // Padding included: it stays zero. A kernel rather than deep_copy, so that
  // a tiny model's fill runs inline (backends/launch.hpp).
  T* g = grads_.data();
  for_range(ctx, "strata::zero_grad", grads_.extent(0),
            KOKKOS_LAMBDA(const std::size_t i) { g[i] = T(0); });
  grad_units_.zero(ctx);
  if (numerics_.exact()) {
    double* e = exact_.data();
    for_range(ctx, "strata::zero_exact_grad", exact_.extent(0),
              KOKKOS_LAMBDA(const std::size_t i) { e[i] = 0.0; });
  }
}

template <class T>
void Sequential<T>::finish_exact_grads(Context& ctx, std::size_t first, std::size_t last) {
  STRATA_REQUIRE(numerics_.exact() && first <= last && last <= grads_.extent(0), config,
                 "Sequential: finish_exact_grads(", first, ", ", last, ") of ", grads_.extent(0),
                 numerics_.exact() ? "" : " of a model built without exact sums");
  T* g = grads_.data();
  const double* e = exact_.data();
  for_range(ctx, "strata::finish_exact_grads", last - first, KOKKOS_LAMBDA(const std::size_t i) {
        const std::size_t v = first + i;
        g[v] = static_cast<T>(exact_value(e[2 * v], e[2 * v + 1]));
      });
}

template <class T>
void Sequential<T>::set_row_offset(std::size_t offset) {
  row_offset_ = offset;
}

template <class T>
std::size_t Sequential<T>::saved_per_slot(std::size_t max_batch) const {
  std::size_t n = 0;
  for (const auto& l : layers_) n += l->saved_size(max_batch);
  return n;
}

template <class T>
std::size_t Sequential<T>::set_batch_group(BatchGroup<T>* group) {
  std::size_t n = 0;
  for (auto& l : layers_) n += strata::set_batch_group(*l, group);
  return n;
}

template <class T>
void Sequential<T>::set_training(bool training) {
  training_ = training;
  for (auto& l : layers_) strata::set_training(*l, training);
}

template <class T>
std::string Sequential<T>::describe(const BuildOptions& planned) const {
  // Columns: name, layer, output shape, parameters, forward FLOPs and
  // activation bytes per sample: the output plus what the layer saves for
  // backward and its workspace (blocks: their inner outputs and gradient
  // buffers).
  std::vector<std::array<std::string, 6>> rows{
      {"name", "layer", "output", "params", "FLOPs/sample", "act/sample"}};
  double flops = 0, acts = 0;
  const std::vector<bool> fused = built_ ? fused_ : fusions(planned);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const double f = layers_[i]->flops();
    const double a = static_cast<double>(((fused[i] ? 0 : widths_[i + 1]) + layers_[i]->saved_size(1)) *
                                             sizeof(T) + layers_[i]->workspace_bytes(1));
    flops += f;
    acts += a;
    rows.push_back({names_[i], layers_[i]->name() + (fused[i] ? " (fused)" : ""), shapes_[i + 1].str(),
                    std::to_string(offsets_[i + 1] - offsets_[i]), format_count(f), format_bytes(a)});
  }
  std::size_t arena = 0;  // recomputed blocks' shared inner activations
  for (const auto& l : layers_) arena = std::max(arena, strata::arena_bytes(*l, 1));
  if (arena > 0) {
    acts += static_cast<double>(arena);
    rows.push_back({"", "recomputation arena", "", "", "", format_bytes(static_cast<double>(arena))});
  }
  rows.push_back({"total", "input " + shapes_.front().str(), shapes_.back().str(),
                  std::to_string(num_params()), format_count(flops), format_bytes(acts)});
  std::array<std::size_t, 6> w{};
  for (const auto& r : rows)
    for (std::size_t c = 0; c < 6; ++c) w[c] = std::max(w[c], r[c].size());
  std::ostringstream os;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (k + 1 == rows.size()) os << std::string(w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + 10, '-') << "\n";
    for (std::size_t c = 0; c < 6; ++c) {
      const bool right = c >= 3;
      os << (right ? std::string(w[c] - rows[k][c].size(), ' ') + rows[k][c]
                   : rows[k][c] + std::string(w[c] - rows[k][c].size(), ' '))
         << (c + 1 < 6 ? "  " : "\n");
    }
  }
  return os.str();
}

template <class T>
std::string Sequential<T>::first_nonfinite(Context& ctx) const {
  auto where = [&](std::size_t i) {
    return "layer " + std::to_string(first_index_ + i) + " (" + layers_[i]->name() + ")";
  };
  // Forward order for outputs, then backward order for gradients.
  std::string unchecked;  // earlier outputs 16-bit storage did not keep
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const long long bad = storage16() ? store_.count_nonfinite(ctx, 0, i)
                                      : static_cast<long long>(detail::count_nonfinite(
                                            ctx, output_buffer(0, i).data(), batch_[0] * widths_[i + 1]));
    if (bad > 0)
      return "the output of " + where(i) +
             (unchecked.empty() ? "" : " (or of " + unchecked + ", not kept by 16-bit storage)");
    if (bad < 0) unchecked += (unchecked.empty() ? "" : ", ") + where(i);
  }
  for (std::size_t i = layers_.size(); i-- > 0;) {
    const std::size_t n = offsets_[i + 1] - offsets_[i];
    if (n > 0 && detail::count_nonfinite(ctx, grads(offsets_[i], offsets_[i + 1]).data(), n) > 0)
      return "the parameter gradients of " + where(i);
  }
  return "";
}

template class Sequential<float>;
template class Sequential<double>;

}  // namespace strata
