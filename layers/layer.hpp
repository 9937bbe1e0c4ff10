// The layer interface: forward keeps what backward needs in a per-micro-batch
// context the caller owns (layers/saved.hpp), backward accumulates parameter
// gradients and returns the input gradient.
//
// Shapes: every layer declares the per-sample shape it produces from a
// per-sample input shape (layers/shape.hpp); the model checks the chain when
// it is assembled. Storage is one row per sample: x is (batch, numel of the
// input shape) and y is (batch, numel of the output shape), both device
// memory (MemSpace), row-major; a layer views its rows as the shape it needs.
// A layer's parameters and gradients are slices of the model's flat buffers,
// bound once by Sequential; param_table() names the pieces of the slice.
// Virtual calls happen once per layer per step (the model is assembled at
// run time); kernels never see them.
#pragma once

#include "backends/context.hpp"
#include "backends/kokkos.hpp"
#include "backends/precision.hpp"
#include "layers/layer_cost.hpp"
#include "layers/saved.hpp"
#include "layers/shape.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// Initialisation schemes for weights (biases start at zero unless stated).
enum class Init {
  kaiming_uniform,  // U(-b, b), b = sqrt(6 / fan_in): He et al., for ReLU
  kaiming_normal,   // N(0, 2 / fan_in)
  xavier_uniform,   // U(-b, b), b = sqrt(6 / (fan_in + fan_out)): Glorot
  xavier_normal,    // N(0, 2 / (fan_in + fan_out))
  torch_default,    // PyTorch's nn.Linear: weight and bias U(-1/sqrt(fan_in), +)
};

Init parse_init(const std::string& name);  // throws config on unknown names
const char* to_string(Init init);

class LayerArgs;      // layers/model_spec.hpp: a layer's options in a model file
struct LayerBuild;    // layers/registry.hpp: state shared while a model is built
template <class T>
class BatchGroup;     // layers/batch_group.hpp: the ranks sharing a batch

// Optimizer groups: weight decay applies to `decay` parameters only when the
// optimizer is told to spare the others (biases and normalisation scales).
enum class ParamGroup { decay, no_decay };

// One named parameter tensor of a layer: `offset` into the layer's slice of
// the flat buffers, `shape.numel()` values, row-major. Names follow PyTorch
// ("weight", "bias"); models prefix them with the layer's path ("3.1.weight").
struct ParamInfo {
  std::string name;
  Shape shape;
  std::size_t offset = 0;
  ParamGroup group = ParamGroup::decay;
};

// A non-trainable tensor a layer keeps across steps (running statistics,
// random-stream counters): checkpoints store and restore it by name.
// state_dict: PyTorch keeps it in the module's state_dict too (BatchNorm's
// running statistics; exported with the weights), unlike Strata's own
// bookkeeping (Dropout's pass counter); integer: an integer there (int64).
struct BufferInfo {
  std::string name;
  std::size_t size = 0;
  bool state_dict = true;
  bool integer = false;
};

// How tensor parallelism (strategies/tensor_parallel.hpp) may split a layer.
enum class TensorSplit {
  none,         // stays whole, replicated on every tensor rank
  elementwise,  // acts on each value alone: runs unchanged on a column shard
  linear,       // Linear(in, out): column- then row-parallel in a pair
  heads,        // attention over heads: a shard of whole heads between such a pair
  vocabulary,   // an embedding: its rows (token ids) split over the ranks
};

// Host memory, for initialisation.
template <class T>
using HostVector = Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;

template <class T>
class Layer {
 public:
  virtual ~Layer() = default;

  // "Linear(784, 256)" and the like.
  virtual std::string name() const = 0;
  // Per-sample output shape for a per-sample input shape; throws config
  // (naming the layer and the shape it expects) when it cannot take `in`.
  virtual Shape output_shape(const Shape& in) const = 0;
  // Called once when the model is assembled, after output_shape accepted
  // `in`: the shape forward will see.
  virtual void set_input_shape(const Shape& in) { in_shape_ = in; }
  const Shape& input_shape() const { return in_shape_; }
  // Number of parameters (0 for parameter-free layers).
  virtual std::size_t num_params() const { return 0; }
  // The named tensors of the parameter slice, covering it exactly.
  virtual std::vector<ParamInfo> param_table() const { return {}; }
  // Non-trainable buffers; read_buffer(k) / write_buffer(k, v) move buffer k
  // (buffer_table()[k].size values) through host memory.
  virtual std::vector<BufferInfo> buffer_table() const { return {}; }
  virtual std::vector<double> read_buffer(std::size_t /*k*/) const { return {}; }
  virtual void write_buffer(std::size_t /*k*/, const std::vector<double>& /*values*/) {}
  // Forward floating-point operations per sample for the input shape set
  // (--describe; a multiply-add counts 2); default: one per output element.
  virtual double flops() const { return static_cast<double>(output_shape(in_shape_).numel()); }
  // What the layer computes per sample for the input shape set, as entries
  // appended to `out` (layers/layer_cost.hpp); default: flops() and the
  // input and output values, no GEMM.
  virtual void add_costs(std::vector<LayerCost>& out) const {
    LayerCost c;
    c.flops = flops();
    c.values = static_cast<double>(in_shape_.numel() + output_shape(in_shape_).numel());
    out.push_back(c);
  }
  // Storage precision of activations (Sequential::set_storage): blocks round
  // the activations between their inner layers to it.
  virtual void set_storage(Precision /*p*/) {}
  // Activation recomputation (blocks): forward keeps only the layer's input,
  // backward computes the inside again in a scratch arena that the model
  // shares among all such layers. arena_bytes(max_batch): the arena this
  // layer needs (0: none); use_arena gives it, after reserve().
  virtual void set_recompute(bool /*on*/) {}
  virtual std::size_t arena_bytes(std::size_t /*max_batch*/) const { return 0; }
  virtual void use_arena(Vector<T> /*arena*/) {}
  // Binds the layer's slices of the flat parameter and gradient buffers.
  virtual void bind(Vector<T> /*params*/, Vector<T> /*grads*/) {}
  // Weight tying (a language-model head on the token embedding's weight):
  // the name of the earlier layer whose "weight" this layer uses, "" for
  // none. Sequential::add finds that tensor in the same model and calls
  // tie_weight(shape): from then on num_params() and param_table() leave the
  // weight out, and bind_tied() gives the layer the shared parameter and
  // gradient slices (both layers add into the one gradient). tie_weight
  // throws config when the shape is not the one the layer needs.
  virtual std::string tied_to() const { return ""; }
  virtual void tie_weight(const Shape& /*shape*/) {}
  // A pipeline stage without the tied layer (Sequential::set_tie_copies):
  // the layer keeps a copy of the weight in its own slice again, which the
  // model-parallel engine keeps equal to the original.
  virtual void untie_weight() {}
  virtual void bind_tied(Vector<T> /*weight*/, Vector<T> /*grad*/) {}
  // Writes initial parameters into `params` (host memory, this layer's slice).
  // `layer_index` makes each layer's random stream distinct.
  virtual void init(HostVector<T> /*params*/, Init /*scheme*/, std::uint64_t /*seed*/,
                    std::uint64_t /*layer_index*/) const {}
  // Workspace the layer needs for a batch of `batch` rows (allocated once,
  // shared by every micro-batch: scratch that backward does not read).
  virtual void reserve(std::size_t /*batch*/, std::size_t /*in*/) {}
  // What a micro-batch's forward keeps for its backward beyond its input and
  // output (layers/saved.hpp): saved_size(batch) values of Saved::scratch
  // for a micro-batch of `batch` samples (0: none). Proportional to batch.
  virtual std::size_t saved_size(std::size_t /*batch*/) const { return 0; }
  // y = f(x), keeping in `saved` what backward needs (the caller has set its
  // x, y, row_offset, training and scratch).
  virtual void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) = 0;
  // Accumulates parameter gradients from dy and, unless dx is empty (first
  // layer), writes dx; `saved` is the one the micro-batch's forward filled
  // (a recomputing block fills its inner records again). dx may alias dy
  // only where a layer says so.
  virtual void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) = 0;
  // Whether backward reads saved.x / saved.y. Sequential keeps in 16-bit
  // storage only the activations some backward reads (set_storage); a layer
  // that says false must not read that view in backward.
  virtual bool backward_reads_input() const { return true; }
  virtual bool backward_reads_output() const { return true; }
  // A new training pass (one per optimizer step; the micro-batches of a
  // pipeline step belong to the same pass): Dropout draws new masks here, so
  // that splitting a batch into micro-batches draws what the whole batch would.
  virtual void begin_pass() {}
  // Bytes of workspace reserve(max_batch, .) allocates (memory accounting;
  // the per-micro-batch scratch is saved_size's, counted by the caller).
  virtual std::size_t workspace_bytes(std::size_t /*max_batch*/) const { return 0; }
  // Tensor parallelism: how the layer splits, and (elementwise layers) that
  // it sees columns [first, first + its width) of the last dimension of an
  // activation whose last dimension is `total` wide: a layer that indexes
  // values by position (Dropout's masks) uses it.
  virtual TensorSplit tensor_split() const { return TensorSplit::none; }
  virtual void set_column_shard(std::size_t /*first*/, std::size_t /*total*/) {}
  // Generation one position at a time (layers/decoder.hpp, a KV cache):
  // y = this layer's output at `position` (< max_positions) for x, the input
  // row of that position alone (one row of the per-position width), given
  // what earlier positions left in `state` (its scratch holds
  // decode_size(max_positions) values, zeroed before position 0; a block
  // keeps its inner layers' states in state.inner). The default runs
  // forward on the row: right for layers
  // that act on each position alone (Linear, LayerNorm, activations,
  // Dropout in evaluation, Embedding); layers that look at the position or
  // at other positions (PositionEmbedding, CausalAttention, blocks)
  // override both.
  virtual std::size_t decode_size(std::size_t /*max_positions*/) const { return saved_size(1); }
  virtual void decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t /*position*/,
                      std::size_t /*max_positions*/, Saved<T>& state) {
    state.x = x;
    state.y = y;
    state.training = false;
    forward(ctx, x, y, state);
  }
  // --reproducible (layers/batch_sums.hpp): "" when every sum over the
  // batch the layer takes (its parameter gradients; statistics) is exact, so
  // that its results do not depend on how the batch is split; else why not
  // (a model with such a layer refuses the mode, naming it and the reason).
  // Default: layers without parameters take no such sum.
  virtual std::string reproducibility_issue() const {
    return num_params() == 0 ? "" : "does not sum its gradients exactly yet";
  }
  // --reproducible with tensor parallelism (strategies/reproducible.hpp): the
  // sums over an inner dimension that tensor parallelism may split (a
  // Linear's input features in forward, its output features for the input
  // gradient) in chunks of s values, each a fixed chain, added exactly; a
  // dimension that s does not divide keeps the plain chain. A layer holding
  // a shard throws config unless its shard is whole chunks. 0: off. Layers
  // without such sums ignore it; a block passes it on.
  virtual void set_inner_chunk(std::size_t /*s*/) {}
  virtual void set_training(bool training) { training_ = training; }
  // The data-parallel ranks sharing the batch (layers/batch_group.hpp), for
  // layers whose forward needs statistics of the whole batch (SyncBatchNorm);
  // nullptr: this rank's samples alone. Returns the layers that use it.
  virtual std::size_t set_batch_group(BatchGroup<T>* /*group*/) { return 0; }
  bool training() const { return training_; }

 protected:
  bool training_ = true;
  Shape in_shape_;
};

template <class T>
using LayerPtr = std::unique_ptr<Layer<T>>;

namespace detail {
// Writes `weights` weights drawn by `scheme` for a layer of the given fans,
// then `biases` biases (zero, or U(-1/sqrt(fan_in), +) for torch_default as
// PyTorch's Linear and Conv2d), into params (weights first). Stream
// `layer_index` of `seed`: the same values on every backend.
template <class T>
void init_dense(HostVector<T> params, Init scheme, std::uint64_t seed, std::uint64_t layer_index,
                std::size_t weights, double fan_in, double fan_out, std::size_t biases);
// Writes `count` values drawn from N(0, sd^2) into params (stream
// `layer_index` of `seed`): embeddings and layers given `std` in a model file
// (GPT-2 initialises its weights with sd 0.02).
template <class T>
void init_normal(HostVector<T> params, std::size_t count, double sd, std::uint64_t seed,
                 std::uint64_t layer_index);
}  // namespace detail

}  // namespace strata
