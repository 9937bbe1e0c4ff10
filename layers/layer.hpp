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

// How a parameter tensor starts (Layer::init): value i of the tensor that
// starts at `offset` in the layer's slice draws counter offset + i of the
// layer's random stream, so the layer's values are the same whatever
// backend, and a layer's tensors draw from one stream without overlap.
struct ParamInit {
  enum class Kind {
    scheme,    // the model's Init (kaiming, xavier, torch_default) for these fans
    bias,      // zero; U(-1/sqrt(fan_in), +) under torch_default (PyTorch's Linear, Conv2d)
    normal,    // N(0, value^2): embeddings, GPT-2's weights (`std` in a model file)
    constant,  // every value `value`: normalisation scales and shifts
  };
  Kind kind = Kind::constant;
  double fan_in = 1, fan_out = 1;  // scheme, bias
  double value = 0;                // normal: the standard deviation; constant: the value
  static ParamInit weights(double fan_in, double fan_out) {
    return {Kind::scheme, fan_in, fan_out, 0};
  }
  static ParamInit bias(double fan_in) { return {Kind::bias, fan_in, 1, 0}; }
  static ParamInit normal(double sd) { return {Kind::normal, 1, 1, sd}; }
  static ParamInit constant(double v) { return {Kind::constant, 1, 1, v}; }
};

// One parameter tensor as a layer declares it (Layer::params): its name
// (PyTorch's: "weight", "bias"), shape (row-major), optimizer group and
// initialiser. The list is the layer's parameter layout: the tensors follow
// each other in the layer's slice of the flat buffers in this order, and the
// counts, the table, the binding and the initialisation follow from it.
struct ParamSpec {
  std::string name;
  Shape shape;
  ParamGroup group = ParamGroup::decay;
  ParamInit init;
};

// One named parameter tensor of a layer's slice (param_table(), from
// params()): `offset` into the slice, `shape.numel()` values, row-major.
// Models prefix the names with the layer's path ("3.1.weight").
struct ParamInfo {
  std::string name;
  Shape shape;
  std::size_t offset = 0;
  ParamGroup group = ParamGroup::decay;
};

// The parameter and gradient values of one tensor of a layer's slice
// (Layer::slices): bind() keeps them as the views it computes with.
template <class T>
struct ParamSlice {
  Vector<T> value, grad;
  Shape shape;
  // Rows of the first dimension, the others flattened.
  Matrix<T> value_matrix() const { return as_matrix(value); }
  Matrix<T> grad_matrix() const { return as_matrix(grad); }

 private:
  Matrix<T> as_matrix(Vector<T> v) const {
    const std::size_t rows = shape.rank() ? shape[0] : 1;
    return Matrix<T>(v.data(), rows, rows ? v.extent(0) / rows : 0);
  }
};

// A non-trainable tensor a layer keeps across steps (running statistics,
// random-stream counters): checkpoints store and restore it by name
// (layers/capabilities.hpp: Buffers). state_dict: PyTorch keeps it in the
// module's state_dict too (BatchNorm's running statistics; exported with the
// weights), unlike Strata's own bookkeeping (Dropout's pass counter);
// integer: an integer there (int64).
struct BufferInfo {
  std::string name;
  std::size_t size = 0;
  bool state_dict = true;
  bool integer = false;
};

// How tensor parallelism (strategies/tensor_parallel.hpp) may split a layer
// (layers/capabilities.hpp: TensorShardable).
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

// The core every layer implements (15 virtual functions). What only some
// layers do (buffers, weight tying, decoding, tensor sharding, batch-wide
// statistics, per-pass randomness, exact sums, holding other layers) are
// interfaces a layer adds as further bases, found with capability<>()
// (layers/capabilities.hpp).
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

  // Parameters, declared: the layer's tensors in slice order (none for
  // parameter-free layers). num_params(), param_table(), slices() and the
  // default init() follow from it.
  virtual std::vector<ParamSpec> params() const { return {}; }
  std::size_t num_params() const;
  std::vector<ParamInfo> param_table() const;
  // Binds the layer's slices of the flat parameter and gradient buffers
  // (slices() cuts them by params()).
  virtual void bind(Vector<T> /*params*/, Vector<T> /*grads*/) {}
  // Writes initial parameters into `params` (host memory, this layer's
  // slice) from params()' initialisers; `layer_index` makes each layer's
  // random stream distinct. Layers override it only to initialise as
  // another layout would (a block's inner streams, a shard of a whole
  // layer).
  virtual void init(HostVector<T> params, Init scheme, std::uint64_t seed,
                    std::uint64_t layer_index) const;

  // What the layer computes per sample for the input shape set, as entries
  // appended to `out` (layers/layer_cost.hpp): the planner's cost model and
  // --describe read it. Default: one FLOP per output value, the input and
  // output values moved, no GEMM.
  virtual void add_costs(std::vector<LayerCost>& out) const { out.push_back(cost(output_values())); }
  // Forward floating-point operations per sample (a multiply-add counts 2):
  // the sum of add_costs' entries.
  double flops() const;

  // Workspace the layer needs for a batch of `batch` rows (allocated once,
  // shared by every micro-batch: scratch that backward does not read), and
  // the bytes reserve(max_batch, .) allocates (memory accounting; the per-
  // micro-batch scratch is saved_size's, counted by the caller).
  virtual void reserve(std::size_t /*batch*/, std::size_t /*in*/) {}
  virtual std::size_t workspace_bytes(std::size_t /*max_batch*/) const { return 0; }
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
  // storage only the activations some backward reads (Numerics::storage); a layer
  // that says false must not read that view in backward.
  virtual bool backward_reads_input() const { return true; }
  virtual bool backward_reads_output() const { return true; }

  // Training or evaluation (Dropout, BatchNorm read it); a model sets it on
  // every layer of its tree (for_each_layer).
  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }

 protected:
  // The tensors of params() as views of the slices `params` and `grads`.
  std::vector<ParamSlice<T>> slices(Vector<T> params, Vector<T> grads) const;
  // One cost entry: `flops` and the input and output values.
  LayerCost cost(double flops) const;
  double output_values() const { return static_cast<double>(output_shape(in_shape_).numel()); }

  bool training_ = true;
  Shape in_shape_;
};

template <class T>
using LayerPtr = std::unique_ptr<Layer<T>>;

namespace detail {
// Writes the tensors of `specs` into params (host memory, in order) from
// their initialisers: stream `layer_index` of `seed`, the same values on
// every backend.
template <class T>
void init_params(HostVector<T> params, const std::vector<ParamSpec>& specs, Init scheme,
                 std::uint64_t seed, std::uint64_t layer_index);
}  // namespace detail

}  // namespace strata
