// Parameter pieces: the leaf layers of a model's tree that hold parameters,
// numbered in the order of the flat buffers. A piece is the finest grain the
// ZeRO stages cut a model into units (strategies/shard_map.hpp): a unit may
// end inside a block (a transformer block's attention and its MLP in two
// units), so that ZeRO-2's gradient and ZeRO-3's parameter buffers need hold
// only the largest layer, not the largest block.
//
// Each piece is bound to its values on its own (Sequential::build: a unit
// buffer may hold part of a block), and whoever runs a piece's layer calls
// the model's hooks around it: `before` just before the layer runs, in
// forward, in a recomputing block's second forward (Pass::recompute) and in
// backward; `done` once its backward has written its gradients (launched: on
// GPUs the kernels may still run). The top-level model calls them for its
// own leaf layers, a Composite for the pieces inside it.
//
//   PieceHooks h;
//   h.before = [&](std::size_t p, Pass pass) { gather.before_piece(p, pass); };
//   h.done = [&](std::size_t p) { reduce_scatter.piece_done(p); };
//   model.set_piece_hooks(std::move(h));
//
// piece_calls lists the calls one pass makes, in order (every rank makes the
// same: ZeRO-3's prefetch plans from them, and a rank without rows replays
// them to take part in the collectives).
#pragma once

#include "layers/capabilities.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace strata {

enum class Pass { forward, recompute, backward };

struct PieceHooks {
  std::function<void(std::size_t, Pass)> before;
  std::function<void(std::size_t)> done;
  bool empty() const { return !before && !done; }
};

using PieceCall = std::pair<std::size_t, Pass>;

// The first flat values of the pieces of `layer`, whose slice of the flat
// buffers starts at `base`, appended to `starts`; returns the values of the
// slice. A composite's values are its inner layers' in order.
template <class T>
std::size_t append_piece_starts(const Layer<T>& layer, std::size_t base,
                                std::vector<std::size_t>& starts) {
  if (const auto* c = capability<Composite<T>>(layer)) {
    std::size_t at = base;
    for (std::size_t j = 0; j < c->num_layers(); ++j) at += append_piece_starts(c->layer(j), at, starts);
    return at - base;
  }
  if (layer.num_params() > 0) starts.push_back(base);
  return layer.num_params();
}

// f(leaf, first, last) for every leaf layer of `layer` (with parameters or
// not) and its flat values [first, last), `layer`'s slice starting at `base`.
template <class T, class F>
std::size_t for_each_leaf_slice(Layer<T>& layer, std::size_t base, F&& f) {
  if (auto* c = capability<Composite<T>>(layer)) {
    std::size_t at = base;
    for (std::size_t j = 0; j < c->num_layers(); ++j) at += for_each_leaf_slice(c->layer(j), at, f);
    return at - base;
  }
  f(layer, base, base + layer.num_params());
  return layer.num_params();
}

// The pieces of `layer` (numbered from `first`), each called with `pass`,
// appended to `out` when it is not null; returns how many it holds.
template <class T>
std::size_t append_piece_calls(const Layer<T>& layer, std::size_t first, Pass pass,
                               std::vector<PieceCall>* out) {
  if (const auto* c = capability<Composite<T>>(layer)) {
    std::size_t n = 0;
    for (std::size_t j = 0; j < c->num_layers(); ++j) n += append_piece_calls(c->layer(j), first + n, pass, out);
    return n;
  }
  if (layer.num_params() == 0) return 0;
  if (out) out->push_back({first, pass});
  return 1;
}

// Gives the hooks (nullptr: none) to the composites among `layers`, whose
// pieces are numbered from `first`, and returns each layer's own piece: its
// number for a leaf layer holding parameters, else SIZE_MAX (a composite
// calls the hooks of its inner pieces itself).
template <class T>
std::vector<std::size_t> hook_pieces(std::vector<LayerPtr<T>>& layers, const PieceHooks* hooks,
                                     std::size_t first) {
  std::vector<std::size_t> own(layers.size(), SIZE_MAX);
  for (std::size_t j = 0; j < layers.size(); ++j) {
    if (auto* c = capability<Composite<T>>(*layers[j])) c->set_piece_hooks(hooks, first);
    else if (layers[j]->num_params() > 0) own[j] = first;
    first += append_piece_calls<T>(*layers[j], first, Pass::forward, nullptr);
  }
  return own;
}

// The calls of `layer`'s backward (its pieces numbered from `first`): a
// recomputing composite runs its inside forward again first, then its inner
// layers' backward in reverse.
template <class T>
std::size_t append_backward_calls(const Layer<T>& layer, std::size_t first, std::vector<PieceCall>& out) {
  const auto* c = capability<Composite<T>>(layer);
  if (!c) return append_piece_calls(layer, first, Pass::backward, &out);
  const std::size_t n = append_piece_calls(layer, first, Pass::recompute, c->recomputes() ? &out : nullptr);
  std::vector<std::size_t> starts;
  for (std::size_t j = 0, at = first; j < c->num_layers(); ++j) {
    starts.push_back(at);
    at += append_piece_calls(c->layer(j), at, Pass::backward, nullptr);
  }
  for (std::size_t j = c->num_layers(); j-- > 0;) append_backward_calls(c->layer(j), starts[j], out);
  return n;
}

}  // namespace strata
