// A model as a sequence of layers whose parameters and gradients live in one
// flat buffer each (every layer holds subviews into them), with activation
// buffers sized once for the largest batch.
//
//   Sequential<float> model(784);
//   model.add(std::make_unique<Linear<float>>(784, 256));
//   model.add(make_activation<float>(ActivationKind::relu));
//   ...
//   model.build(max_batch);               // allocates everything, once
//                                         // (or build(BuildOptions): slots,
//                                         // padding, numerics)
//   model.init(Init::kaiming_uniform, seed);
//   auto y = model.forward(ctx, x);        // x: (batch <= max_batch, 784)
//   ... loss writes dy into model.output_grad(batch) ...
//   model.backward(ctx);                   // accumulates into grads()
#pragma once

#include "backends/precision.hpp"
#include "layers/activation_store.hpp"
#include "layers/build_options.hpp"
#include "layers/capabilities.hpp"
#include "layers/param_pieces.hpp"
#include "layers/unit_buffers.hpp"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// Resolves the weight ties (Layer::tied_to) among the top-level `layers` of
// a model (names: their parameter-name prefixes, "" for the position) as
// Sequential::add does, so that each layer's num_params() is its single-rank
// size before the layers are spread over pipeline stages; throws config as
// add() does for a tie to no earlier layer's weight.
template <class T>
void resolve_ties(std::vector<LayerPtr<T>>& layers, const std::vector<std::string>& names);

template <class T>
class Sequential {
 public:
  // first_index: position of the first layer in a larger model of which this
  // is a part (a pipeline stage): initialisation streams are drawn by global
  // layer position, so a stage starts with what the whole model would hold.
  explicit Sequential(std::size_t in_features, std::size_t first_index = 0);
  // A model whose samples have the per-sample shape `input`.
  explicit Sequential(const Shape& input, std::size_t first_index = 0);

  // A pipeline stage: layers first_index.. of a larger model. A layer whose
  // tied weight is on another stage keeps a copy of it
  // (TiedWeight::untie_weight) instead of being an error (strategies/
  // stage_ties.hpp keeps the copies equal).
  static Sequential stage(const Shape& input, std::size_t first_index);

  // Appends a layer; throws config (naming the layer, its position and both
  // shapes) when it cannot take the previous layer's output shape, and when
  // a layer that ties its weight (Layer::tied_to) names no earlier layer
  // with such a weight (else it uses that layer's slice). `name` prefixes its
  // parameter names (default: its global position, as in PyTorch's
  // nn.Sequential). Not after build().
  Sequential& add(LayerPtr<T> layer, std::string name = "");

  // Allocates the flat parameter and gradient buffers (gradients zeroed) and
  // the activation buffers for batches of up to o.max_batch rows, for o.slots
  // micro-batches in flight (pipeline schedules: one Saved record per layer
  // and slot, layers/saved.hpp), with the numerics policy o.numerics (see
  // layers/build_options.hpp). The flat buffers are padded with zeros to a
  // multiple of o.pad_multiple elements (sharded optimizers split them
  // evenly); num_params() excludes the padding. Once: everything a model is
  // built for is known here, so nothing is set "before build()".
  //
  // 16-bit storage (float models): every layer output, the loss gradient and
  // every gradient passed between layers is rounded to that type, so the
  // model computes with 16-bit values. The outputs some backward reads
  // (Layer::backward_reads_input/output) are kept in 16-bit buffers
  // (layers/activation_store.hpp) while layers compute on two float scratch
  // buffers; gradients stay transient float buffers holding rounded values.
  // Emulated: every output in a float buffer holding the rounded values (the
  // reference the real storage equals bitwise). The model input and the
  // parameter gradients stay fp32.
  //
  // Exact sums (--reproducible): backward also adds every parameter gradient
  // exactly (layers/batch_sums.hpp: the batch in chunks of exact_chunk
  // samples) into an exact twin of the gradient buffer (two doubles per
  // value, padding included), which zero_grad clears; finish_exact_grads
  // then rounds [first, last) of it into grads(). Throws config naming the
  // first layer that cannot (ExactSums). inner_chunk: the layers' inner sums
  // too, in chunks of that many values (TensorShardable::set_inner_chunk).
  void build(const BuildOptions& o);
  // A plain build: fp32, exact sums off.
  void build(std::size_t max_batch, std::size_t slots = 1, std::size_t pad_multiple = 1);
  bool built() const { return built_; }
  // Whether layer i is an activation that the layer before it applies in
  // its own kernels (BuildOptions::fuse_activations; after build()): it
  // runs nothing, and its output is that layer's.
  bool fused(std::size_t i) const { return i < fused_.size() && fused_[i]; }
  const Numerics& numerics() const { return numerics_; }

  // Writes initial parameters (host-side counter-based generator, so the
  // same seed gives the same parameters on every backend). With parameter
  // units: those alone in their buffer (units taking turns hold nothing
  // between uses; see initial_values).
  void init(Init scheme, std::uint64_t seed);

  // y = model(x); x: (batch, in_features) with batch <= max_batch, device
  // memory; must stay valid until backward. Returns (batch, out_features).
  // slot: the micro-batch slot (< slots of build). new_pass: false for the
  // second and later micro-batches of one step (Layer::begin_pass).
  ConstMatrix<T> forward(Context& ctx, ConstMatrix<T> x, std::size_t slot = 0,
                         bool new_pass = true);
  // Buffer for the loss gradient of the last forward's batch in `slot`.
  Matrix<T> output_grad(std::size_t slot = 0) const;
  // Rounds the loss gradient written into output_grad(slot) to the storage
  // precision (backward(ctx, after_layer, slot) does it itself; callers of
  // the other backward that pass output_grad(slot) call it first).
  void round_output_grad(Context& ctx, std::size_t slot = 0);
  // Back-propagates output_grad(slot) (rounded to the storage precision
  // first) and accumulates into grads().
  // after_layer(i) is called once layer i's gradients are written (launched:
  // on GPUs the kernels may still run; order on ctx.exec), from the last layer
  // to the first: data parallelism starts gradient communication there.
  void backward(Context& ctx, const std::function<void(std::size_t)>& after_layer = {},
                std::size_t slot = 0);
  // Back-propagates dy (batch of the forward in `slot`, out_features) and,
  // when dx is not empty, writes the gradient of the model input into dx
  // (pipeline stages send it to the previous stage).
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, std::size_t slot,
                const std::function<void(std::size_t)>& after_layer = {});
  void zero_grad(Context& ctx);
  // Parameter pieces (layers/param_pieces.hpp: the leaf layers holding
  // parameters, in flat order): their first values and the end (pieces + 1
  // entries; {0} without parameters), the calls of one forward or backward,
  // and the hooks called around each (ZeRO-3 gathers a piece's unit there,
  // ZeRO-2 reduce-scatters a completed one; empty: none).
  std::vector<std::size_t> piece_offsets() const;
  std::vector<PieceCall> piece_calls(bool backward) const;
  void set_piece_hooks(PieceHooks hooks);
  // The top-level layer holding flat value `flat` (< num_params()).
  std::size_t layer_of(std::size_t flat) const;

  // The exact twin of the gradient buffer (empty without exact sums).
  Kokkos::View<double*, MemSpace> exact_grads() const { return exact_; }
  void finish_exact_grads(Context& ctx, std::size_t first, std::size_t last);
  // Whether activations are kept in 16-bit buffers.
  bool storage16() const { return numerics_.storage16(); }
  // Declares that the working weights hold values of the storage precision
  // (the mixed-precision engines call it after rounding them). Then layer
  // i's GEMMs are told their operands hold that precision
  // (Blas::set_float_inputs: 16-bit-input GEMMs on cuBLAS) during its
  // forward and backward, since its input and the gradients are rounded
  // activations too; except layer 0, which reads the model input (the data,
  // not rounded; for a pipeline stage after the first, a rounded activation,
  // left in fp32 to keep one rule). Off by default: a 16-bit storage alone
  // says nothing of the weights.
  void set_weights_rounded(bool on) { weights_rounded_ = on; }
  Precision gemm_inputs(std::size_t i) const {
    return i == 0 || !weights_rounded_ ? Precision::fp32 : numerics_.storage;
  }
  void set_training(bool training);
  // The data-parallel ranks sharing each batch, for SyncBatchNorm
  // (Layer::set_batch_group; nullptr: none). Returns the layers that use it.
  std::size_t set_batch_group(BatchGroup<T>* group);
  // Position of the next forward's first row in the global batch (data
  // parallelism gives each rank a shard): layers that draw per-sample random
  // numbers (Dropout) index them globally (Saved::row_offset), so that a
  // shard sees exactly what single-rank training of the whole batch would.
  void set_row_offset(std::size_t offset);
  std::size_t in_features() const { return widths_.front(); }
  std::size_t out_features() const { return widths_.back(); }
  // Per-sample shape of the input of layer i (i == num_layers(): the output).
  const Shape& shape(std::size_t i) const { return shapes_[i]; }
  const std::string& layer_name(std::size_t i) const { return names_[i]; }

  // Every parameter tensor of the model with its full name ("2.weight",
  // "blocks.3.1.bias") and its offset in the flat buffers, in buffer order.
  std::vector<ParamInfo> parameters() const;
  // Every buffer of the model (full names), in layer order.
  std::vector<BufferInfo> buffers() const;
  // Weights that layers use from another layer (Layer::tied_to): (the name
  // the tying layer's weight would have, the name of the weight it uses),
  // e.g. ("lm_head.weight", "wte.weight").
  std::vector<std::pair<std::string, std::string>> tied_weights() const;
  // The flat ranges of the weights that later layers use (their gradients
  // arrive while those layers run backward).
  std::vector<std::pair<std::size_t, std::size_t>> tied_ranges() const {
    std::vector<std::pair<std::size_t, std::size_t>> r;
    for (const Tie& t : ties_) r.push_back({t.offset, t.offset + t.size});
    return r;
  }
  // Every buffer of the model (full names) with its values, and back:
  // write_buffers throws config naming a buffer the model has and `values`
  // lacks, or one of another size; names the model lacks are errors too.
  std::map<std::string, std::vector<double>> read_buffers() const;
  void write_buffers(const std::map<std::string, std::vector<double>>& values);
  std::size_t max_batch() const { return max_batch_; }
  std::size_t slots() const { return slots_; }
  std::size_t first_index() const { return first_index_; }
  std::size_t num_layers() const { return layers_.size(); }
  std::size_t num_params() const { return offsets_.back(); }
  Layer<T>& layer(std::size_t i) { return *layers_[i]; }
  const Layer<T>& layer(std::size_t i) const { return *layers_[i]; }
  // Width of the input of layer i (i == num_layers(): the output width).
  std::size_t width(std::size_t i) const { return widths_[i]; }
  // Offset of layer i's parameters in the flat buffers.
  std::size_t param_offset(std::size_t i) const { return offsets_[i]; }

  // The flat buffers without padding (num_params() elements) and with it.
  // They are flat unless the model was built with units (then these throw;
  // see params(first, last) and grads(first, last)).
  Vector<T> params() const { return Vector<T>(flat_params().data(), num_params()); }
  Vector<T> grads() const { return Vector<T>(flat_grads().data(), num_params()); }
  Vector<T> padded_params() const { return flat_params(); }
  Vector<T> padded_grads() const { return flat_grads(); }
  // Where the parameters or gradients of the flat values [first, last) are,
  // flat or in a unit (throws config for a range across two units).
  Vector<T> params(std::size_t first, std::size_t last) const;
  Vector<T> grads(std::size_t first, std::size_t last) const;
  // Units (BuildOptions::grad_units, param_units; runs of pieces): unit u's
  // buffer, its values followed by zeros up to a multiple of pad_multiple.
  const std::vector<BufferUnit>& grad_units() const { return grad_units_.units(); }
  Vector<T> unit_grads(std::size_t u) const { return grad_units_.unit(u); }
  const std::vector<BufferUnit>& param_units() const { return param_units_.units(); }
  Vector<T> unit_params(std::size_t u) const { return param_units_.unit(u); }
  // Whether parameter unit u has its buffer to itself (init() writes it,
  // and its values stay between uses).
  bool holds_unit_params(std::size_t u) const { return param_units_.alone(u); }
  // The initial values init() gives layers [first_layer, last_layer) (host).
  std::vector<T> initial_values(std::size_t first_layer, std::size_t last_layer, Init scheme,
                                std::uint64_t seed);

  // Moves the flat gradient buffer into `storage` (at least
  // padded_grads().extent(0) elements, host or device memory as MemSpace;
  // for example a communicator's shared memory, Communicator::allocate_shared).
  // The storage must outlive every later use of the model. After build().
  void use_grad_storage(Vector<T> storage);

  // Bytes of activation storage build(o) would allocate: layer outputs
  // (fp32, emulated: every output in float; 16-bit: the kept outputs in 16
  // bits and two float scratch buffers) and loss gradients per slot,
  // input-gradient ping-pong buffers, what layers save for backward per
  // slot, layer workspaces and the recomputation arena. Known before build()
  // (memory budgets are checked first).
  std::size_t activation_bytes(const BuildOptions& o) const;
  // The same figure from the sizes of the buffers allocated (after build()).
  std::size_t allocated_activation_bytes() const;

  // The layer table of --describe: name, layer, output shape, parameters,
  // forward FLOPs and activation bytes per sample; then the totals. Fused
  // activations (fused()) say so; before build(), those a build with
  // `planned` would fuse.
  std::string describe(const BuildOptions& planned = BuildOptions()) const;

  // After a forward and backward with a non-finite loss: names the first
  // layer (forward order) whose output holds a NaN or an Inf, else the first
  // (backward order) whose parameter gradients do; "" when none does. Used to
  // report where a numerical failure began. A layer with a fused ReLU
  // (fused()) holds its output after the ReLU, which turns a NaN into 0:
  // such a NaN shows in the layer's parameter gradients instead. With
  // 16-bit storage, outputs
  // that are not kept for backward are checked only while the scratch still
  // holds them; the answer names the earlier ones it could not check.
  std::string first_nonfinite(Context& ctx) const;

 private:
  void bind_layers();
  Vector<T> flat_grads() const;
  Vector<T> flat_params() const;
  void allocate_activations();
  std::vector<bool> kept_outputs() const;
  // The layers build(o) fuses into the layer before them (fused()).
  std::vector<bool> fusions(const BuildOptions& o) const;
  // Slot s's output buffer of layer i (a fused layer's is the one before).
  Vector<T> output_buffer(std::size_t s, std::size_t i) const;
  std::size_t saved_per_slot(std::size_t max_batch) const;  // Layer::saved_size of all

  std::vector<LayerPtr<T>> layers_;
  std::vector<std::string> names_;    // parameter-name prefix of layer i
  std::vector<Shape> shapes_;         // shapes_[i]: per-sample input shape of layer i
  std::vector<std::size_t> widths_;   // widths_[i]: shapes_[i].numel()
  std::vector<std::size_t> offsets_;  // offsets_[i]: first parameter of layer i
  struct Tie {                        // layer `layer` uses the weight at [offset, offset + size)
    std::size_t layer, offset, size;
  };
  std::vector<Tie> ties_;
  bool tie_copies_allowed_ = false;  // stage()
  std::size_t first_index_ = 0;
  std::size_t max_batch_ = 0, slots_ = 1;
  std::size_t row_offset_ = 0;
  std::vector<std::size_t> batch_;  // rows of the last forward, per slot
  void round_storage(Context& ctx, Matrix<T> m) const;
  bool built_ = false, training_ = true;
  std::vector<bool> fused_;       // build(): fusions(o)
  Numerics numerics_;             // build()
  bool weights_rounded_ = false;  // set_weights_rounded
  VectorBuffer<T> params_, grads_owner_;
  Vector<T> grads_;  // grads_owner_, or storage given by use_grad_storage
  UnitBuffers<T> grad_units_, param_units_;  // or the values in units
  // set_piece_hooks; on the heap, so that the blocks holding its address
  // keep it when the model is moved.
  std::unique_ptr<PieceHooks> hooks_ = std::make_unique<PieceHooks>();
  std::vector<std::size_t> piece_of_;  // top-level leaf layer i's piece (SIZE_MAX: none)
  Kokkos::View<double*, MemSpace> exact_;  // its exact gradients (2 per padded value)
  std::vector<VectorBuffer<T>> acts_;  // fp32, emulated: acts_[s * L + i]: output of layer i in slot s
  ActivationStore<T> store_;           // 16-bit storage
  VectorBuffer<T> grad_a_, grad_b_;    // ping-pong input gradients (flat)
  VectorBuffer<T> arena_;              // shared by recomputing layers (Layer::arena_bytes)
  std::vector<Saved<T>> saved_;        // saved_[s * L + i]: layer i's context in slot s
  VectorBuffer<T> saved_memory_;       // their scratch (Layer::saved_size)
  std::vector<VectorBuffer<T>> dout_;  // per slot: gradient of the model output (flat)
};

}  // namespace strata
