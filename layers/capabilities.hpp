// What only some layers do, as interfaces a layer adds beside Layer<T>
// (layers/layer.hpp keeps the core every layer implements):
//
//   Buffers           non-trainable tensors kept across steps (checkpointed)
//   TiedWeight        uses an earlier layer's weight (a language-model head)
//   Decodable         generation one position at a time (a KV cache)
//   TensorShardable   how tensor parallelism may split it; column shards
//   BatchStatistics   statistics over the whole data-parallel batch
//   PerPass           draws new random values each training pass
//   ExactSums         its sums over the batch are exact under --reproducible
//   FusedActivation   applies the activation after it in its own kernels
//   Composite         holds other layers (Block): the model is a tree
//
// capability<Cap>(layer) finds one (nullptr: the layer has none), and the
// free functions below give a layer without it the default behaviour, so
// callers never test a layer's concrete type. for_each_layer walks a tree of
// layers, so a capability reaches layers inside blocks without each
// container passing it on.
#pragma once

#include "layers/layer.hpp"

#include <string>
#include <vector>

namespace strata {

struct PieceHooks;         // layers/param_pieces.hpp
enum class ActivationKind;  // layers/activation.hpp

template <class T>
class Buffers {
 public:
  virtual ~Buffers() = default;
  // read_buffer(k) / write_buffer(k, v) move buffer k (buffer_table()[k].size
  // values) through host memory.
  virtual std::vector<BufferInfo> buffer_table() const = 0;
  virtual std::vector<double> read_buffer(std::size_t k) const = 0;
  virtual void write_buffer(std::size_t k, const std::vector<double>& values) = 0;
};

// Weight tying: tied_to() names the earlier layer whose "weight" this layer
// uses ("" for none). Sequential::add finds that tensor in the same model and
// calls tie_weight(shape): from then on params() leaves the weight out, and
// bind_tied() gives the layer the shared parameter and gradient slices (both
// layers add into the one gradient). tie_weight throws config when the shape
// is not the one the layer needs. untie_weight: a pipeline stage without the
// tied layer (Sequential::stage) keeps a copy of the weight in the
// layer's own slice again, which the model-parallel engine keeps equal to
// the original.
template <class T>
class TiedWeight {
 public:
  virtual ~TiedWeight() = default;
  virtual std::string tied_to() const = 0;
  virtual void tie_weight(const Shape& shape) = 0;
  virtual void untie_weight() = 0;
  virtual void bind_tied(Vector<T> weight, Vector<T> grad) = 0;
};

// Generation one position at a time (layers/decoder.hpp): y = the layer's
// output at `position` (< max_positions) for x, the input row of that
// position alone (one row of the per-position width), given what earlier
// positions left in `state` (its scratch holds decode_size(max_positions)
// values, zeroed before position 0; a block keeps its inner layers' states
// in state.inner). Layers that act on each position alone (Linear,
// LayerNorm, activations, Dropout in evaluation, Embedding) do not need it:
// decode_layer runs their forward on the row. Layers that look at the
// position or at other positions (PositionEmbedding, CausalAttention,
// blocks) implement it.
template <class T>
class Decodable {
 public:
  virtual ~Decodable() = default;
  virtual std::size_t decode_size(std::size_t max_positions) const = 0;
  virtual void decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
                      std::size_t max_positions, Saved<T>& state) = 0;
};

// Tensor parallelism: how the layer splits; set_column_shard (elementwise
// layers): the layer sees columns [first, first + its width) of the last
// dimension of an activation whose last dimension is `total` wide (a layer
// that indexes values by position, Dropout's masks, uses it);
// set_inner_chunk (--reproducible with tensor parallelism,
// strategies/reproducible.hpp): the sums over an inner dimension that tensor
// parallelism may split (a Linear's input features in forward, its output
// features for the input gradient) in chunks of s values, each a fixed
// chain, added exactly; a dimension that s does not divide keeps the plain
// chain. A layer holding a shard throws config unless its shard is whole
// chunks. 0: off. A layer without the capability stays whole.
class TensorShardable {
 public:
  virtual ~TensorShardable() = default;
  virtual TensorSplit tensor_split() const = 0;
  virtual void set_column_shard(std::size_t /*first*/, std::size_t /*total*/) {}
  virtual void set_inner_chunk(std::size_t /*s*/) {}
};

// The data-parallel ranks sharing the batch (layers/batch_group.hpp), for
// layers whose forward needs statistics of the whole batch (SyncBatchNorm);
// nullptr: this rank's samples alone. Returns whether the layer uses it.
template <class T>
class BatchStatistics {
 public:
  virtual ~BatchStatistics() = default;
  virtual bool set_batch_group(BatchGroup<T>* group) = 0;
};

// A new training pass (one per optimizer step; the micro-batches of a
// pipeline step belong to the same pass): Dropout draws new masks here, so
// that splitting a batch into micro-batches draws what the whole batch would.
class PerPass {
 public:
  virtual ~PerPass() = default;
  virtual void begin_pass() = 0;
};

// --reproducible (layers/batch_sums.hpp): "" when every sum over the batch
// the layer takes (its parameter gradients, statistics) is exact, so that
// its results do not depend on how the batch is split; else why not. A layer
// with parameters that does not implement it is refused by the mode (a new
// layer is not exact until it says so).
class ExactSums {
 public:
  virtual ~ExactSums() = default;
  virtual std::string reproducibility_issue() const = 0;
};

// An elementwise activation fused into the layer before it: takes(kind)
// says whether the layer can apply `kind` inside its own kernels, fuse(kind)
// makes it do so from then on: forward writes f(output) where it wrote the
// output, and backward multiplies the gradient it receives by f' (at that
// output, which the layer computes again from what it kept) before using
// it, so the two layers give the bits they gave apart, with one pass over
// the activation where they made two (forward) and three (backward).
// Sequential::build fuses (BuildOptions::fuse_activations, fp32 storage):
// the activation layer then runs nothing, its output is the fused layer's
// and its input gradient the gradient it receives.
class FusedActivation {
 public:
  virtual ~FusedActivation() = default;
  virtual bool takes(ActivationKind kind) const = 0;
  virtual void fuse(ActivationKind kind) = 0;
};

// A layer made of layers (layers/block.hpp). The model's 16-bit storage and
// activation recomputation reach its inner activations through it:
// set_storage rounds the activations between the inner layers; with
// set_recompute forward keeps only the layer's input and backward computes
// the inside again in a scratch arena that the model shares among all such
// layers (arena_bytes(max_batch): the arena it needs, 0: none; use_arena
// gives it, after reserve()). Its parameters are its inner layers' in order;
// the model binds each inner leaf layer to its values itself, and
// set_piece_hooks gives it the model's hooks (nullptr: none) to call around
// its inner pieces, numbered from `first` (layers/param_pieces.hpp).
template <class T>
class Composite {
 public:
  virtual ~Composite() = default;
  virtual std::size_t num_layers() const = 0;
  virtual Layer<T>& layer(std::size_t j) = 0;
  virtual const Layer<T>& layer(std::size_t j) const = 0;
  virtual void set_storage(Precision p) = 0;
  virtual void set_recompute(bool on) = 0;
  virtual bool recomputes() const = 0;
  virtual void set_piece_hooks(const PieceHooks* hooks, std::size_t first) = 0;
  virtual std::size_t arena_bytes(std::size_t max_batch) const = 0;
  virtual void use_arena(Vector<T> arena) = 0;
};

// The capability Cap of `layer`, or nullptr.
template <class Cap, class T>
Cap* capability(Layer<T>& layer) {
  return dynamic_cast<Cap*>(&layer);
}
template <class Cap, class T>
const Cap* capability(const Layer<T>& layer) {
  return dynamic_cast<const Cap*>(&layer);
}

// f(layer) for `layer` and, through Composite, every layer inside it (the
// layer before its inner ones).
template <class T, class F>
void for_each_layer(Layer<T>& layer, F&& f) {
  f(layer);
  if (auto* c = capability<Composite<T>>(layer))
    for (std::size_t j = 0; j < c->num_layers(); ++j) for_each_layer(c->layer(j), f);
}
template <class T, class F>
void for_each_layer(const Layer<T>& layer, F&& f) {
  f(layer);
  if (const auto* c = capability<Composite<T>>(layer))
    for (std::size_t j = 0; j < c->num_layers(); ++j) for_each_layer(c->layer(j), f);
}

// The defaults of a layer without the capability.
template <class T>
TensorSplit tensor_split(const Layer<T>& layer) {
  const auto* s = capability<TensorShardable>(layer);
  return s ? s->tensor_split() : TensorSplit::none;
}
template <class T>
std::vector<BufferInfo> buffer_table(const Layer<T>& layer) {
  const auto* b = capability<Buffers<T>>(layer);
  return b ? b->buffer_table() : std::vector<BufferInfo>{};
}
template <class T>
std::string tied_to(const Layer<T>& layer) {
  const auto* t = capability<TiedWeight<T>>(layer);
  return t ? t->tied_to() : "";
}
// Why --reproducible cannot run `layer` (and the layers inside it), naming
// the first that cannot; "" when all can.
template <class T>
std::string reproducibility_issue(const Layer<T>& layer) {
  std::string issue;
  for_each_layer(layer, [&](const Layer<T>& l) {
    if (!issue.empty() || capability<Composite<T>>(l)) return;
    if (const auto* e = capability<ExactSums>(l)) {
      if (std::string why = e->reproducibility_issue(); !why.empty()) issue = why;
    } else if (l.num_params() > 0) {
      issue = "does not sum its gradients exactly yet";
    }
    if (!issue.empty() && &l != &layer) issue = l.name() + " " + issue;
  });
  return issue;
}
// Sets the data-parallel batch group on every layer of the tree that takes
// one; returns how many do.
template <class T>
std::size_t set_batch_group(Layer<T>& layer, BatchGroup<T>* group) {
  std::size_t n = 0;
  for_each_layer(layer, [&](Layer<T>& l) {
    if (auto* b = capability<BatchStatistics<T>>(l)) n += b->set_batch_group(group) ? 1 : 0;
  });
  return n;
}
// A new training pass for every layer of the tree (PerPass).
template <class T>
void begin_pass(Layer<T>& layer) {
  for_each_layer(layer, [](Layer<T>& l) {
    if (auto* p = capability<PerPass>(l)) p->begin_pass();
  });
}
// Training or evaluation for every layer of the tree.
template <class T>
void set_training(Layer<T>& layer, bool training) {
  for_each_layer(layer, [&](Layer<T>& l) { l.set_training(training); });
}
// set_inner_chunk on every layer of the tree that shards.
template <class T>
void set_inner_chunk(Layer<T>& layer, std::size_t s) {
  for_each_layer(layer, [&](Layer<T>& l) {
    if (auto* t = capability<TensorShardable>(l)) t->set_inner_chunk(s);
  });
}
// The composite's storage, recomputation and arena; nothing for other layers.
template <class T>
void set_storage(Layer<T>& layer, Precision p) {
  if (auto* c = capability<Composite<T>>(layer)) c->set_storage(p);
}
template <class T>
void set_recompute(Layer<T>& layer, bool on) {
  if (auto* c = capability<Composite<T>>(layer)) c->set_recompute(on);
}
template <class T>
std::size_t arena_bytes(const Layer<T>& layer, std::size_t max_batch) {
  const auto* c = capability<Composite<T>>(layer);
  return c ? c->arena_bytes(max_batch) : 0;
}
template <class T>
void use_arena(Layer<T>& layer, Vector<T> arena) {
  if (auto* c = capability<Composite<T>>(layer)) c->use_arena(arena);
}
// Decoding for any layer: its own (Decodable), else its forward on the row.
template <class T>
std::size_t decode_size(const Layer<T>& layer, std::size_t max_positions) {
  const auto* d = capability<Decodable<T>>(layer);
  return d ? d->decode_size(max_positions) : layer.saved_size(1);
}
template <class T>
void decode_layer(Context& ctx, Layer<T>& layer, ConstMatrix<T> x, Matrix<T> y,
                  std::size_t position, std::size_t max_positions, Saved<T>& state) {
  if (auto* d = capability<Decodable<T>>(layer)) {
    d->decode(ctx, x, y, position, max_positions, state);
    return;
  }
  state.x = x;
  state.y = y;
  state.training = false;
  layer.forward(ctx, x, y, state);
}

}  // namespace strata
