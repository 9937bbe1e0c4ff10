// Blocks: layers made of layers, so that models are trees.
//
//   Block(f1, ..., fn)      y = fn(... f1(x))            a nested sequence
//   Residual(f1, ..., fn)   y = x + fn(... f1(x))        output shape = input shape
//
// A block keeps its inner layers' activations and their saved values in the
// scratch of its own per-micro-batch context (Saved::scratch, in T, rounded
// to the storage precision as Sequential rounds its own outputs: the memory
// of a block is not reduced by 16-bit storage), their Saved records in
// Saved::inner, and owns two input-gradient buffers. Parameters are one slice of the model's
// flat buffers, cut into the inner layers' slices in order; parameter and
// buffer names are the inner layers' prefixed with their position in the
// block ("1.weight") or the name given. Pipeline stages cut between the
// top-level layers of a model, so a block always stays on one stage.
//
// backward: the inner layers run in reverse; a residual adds dy to the
// gradient reaching its input (dx = dy + df/dx^T dy).
//
// Parameter pieces (layers/param_pieces.hpp): the model binds the inner
// leaf layers to their values one by one, and the block calls the model's
// hooks around each inner leaf that holds parameters (before its forward,
// its recomputation and its backward; done after its backward).
//
// Recomputation (set_recompute): forward runs the inner layers in a scratch
// arena shared with every other recomputing block of the model and keeps
// nothing but its input (Saved::x, the caller's); backward runs the inner
// forward again (same input, same row offset and pass: the same Dropout
// masks) and then the inner backward. Results are bitwise those without
// recomputation; inner activations cost one arena instead of one set per
// block and micro-batch in flight, for one more inner forward.
#pragma once

#include "layers/capabilities.hpp"

#include <string>
#include <vector>

namespace strata {

template <class T>
class Block : public Layer<T>, public Composite<T>, public Buffers<T>, public Decodable<T> {
 public:
  // names: parameter-name prefixes of the inner layers (empty: positions).
  Block(std::vector<LayerPtr<T>> layers, bool residual, std::vector<std::string> names = {});

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  void set_input_shape(const Shape& in) override;
  // The inner layers' tensors, their names prefixed ("1.weight").
  std::vector<ParamSpec> params() const override;
  std::vector<BufferInfo> buffer_table() const override;
  std::vector<double> read_buffer(std::size_t k) const override;
  void write_buffer(std::size_t k, const std::vector<double>& values) override;
  // The inner layers' costs one by one, marked in_block (and a residual's sum).
  void add_costs(std::vector<LayerCost>& out) const override;
  void set_storage(Precision p) override;
  void bind(Vector<T> params, Vector<T> grads) override;
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void reserve(std::size_t batch, std::size_t in) override;
  std::size_t saved_size(std::size_t batch) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override {
    return recompute_ || layers_.front()->backward_reads_input();
  }
  bool backward_reads_output() const override { return false; }
  std::size_t workspace_bytes(std::size_t max_batch) const override;
  void set_recompute(bool on) override { recompute_ = on; }
  // Decoding: the inner layers' states, then one output row per inner layer.
  std::size_t decode_size(std::size_t max_positions) const override;
  void decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
              std::size_t max_positions, Saved<T>& state) override;
  std::size_t arena_bytes(std::size_t max_batch) const override;
  void use_arena(Vector<T> arena) override;

  bool residual() const { return residual_; }
  bool recomputes() const override { return recompute_; }
  void set_piece_hooks(const PieceHooks* hooks, std::size_t first) override;
  std::size_t num_layers() const override { return layers_.size(); }
  Layer<T>& layer(std::size_t j) override { return *layers_[j]; }
  const Layer<T>& layer(std::size_t j) const override { return *layers_[j]; }
  const std::vector<std::string>& names() const { return names_; }
  // Hands the inner layers over (tensor parallelism rebuilds a block of
  // their shards); the block is empty afterwards and must not be used.
  std::vector<LayerPtr<T>> release_layers() { return std::move(layers_); }

  // The initialisation stream index of inner layer j of the layer at
  // `layer_index`: distinct from every top-level index and every other
  // inner layer's (the top bit is set; a 63-bit mix of both positions).
  static std::uint64_t inner_index(std::uint64_t layer_index, std::size_t j);

 private:
  // Which inner layer owns entry k of the joined buffer table.
  std::pair<std::size_t, std::size_t> buffer_owner(std::size_t k) const;
  // Values per position of shape j (the block's input is {T, ...}: a
  // position is a 1/T of each inner shape; a flat input is one position).
  std::size_t row_width(std::size_t j) const;
  // Elements of the inner outputs and of the widest inner input (per row).
  std::size_t inner_outputs() const;
  std::size_t widest_inner_input() const;
  // Values the inner outputs and the inner layers' saved values take for a
  // micro-batch of `batch` samples.
  std::size_t inner_size(std::size_t batch) const;
  // Runs the inner forward on x, filling saved.inner, with the inner outputs
  // and saved values laid out in `memory` (inner_size(batch) values);
  // returns the last output.
  ConstMatrix<T> inner_forward(Context& ctx, ConstMatrix<T> x, Saved<T>& saved, Vector<T> memory);

  std::vector<LayerPtr<T>> layers_;
  std::vector<std::string> names_;
  bool residual_;
  std::vector<Shape> shapes_;         // input of inner layer j; shapes_[n]: last output
  std::vector<std::size_t> offsets_;  // parameters of inner layer j start at offsets_[j]
  Precision storage_ = Precision::fp32;
  std::size_t max_batch_ = 0;
  bool recompute_ = false;
  const PieceHooks* hooks_ = nullptr;         // the model's (set_piece_hooks)
  std::vector<std::size_t> piece_;            // inner leaf layer j's piece (SIZE_MAX: none)
  Vector<T> arena_;                           // recomputation: the model's shared arena
  Vector<T> grad_a_, grad_b_;                 // input gradients of inner layers 1..n-1
  VectorBuffer<T> grads_owner_;               // what grad_a_ and grad_b_ view (no recomputation)
};

}  // namespace strata
