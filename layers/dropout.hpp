// Dropout with a counter-based mask: element (row r, column j) of training
// pass c keeps its value with probability 1 - p, scaled by 1 / (1 - p). The
// random number is indexed by the element's position in the global batch
// (the micro-batch's Saved::row_offset; with tensor parallelism the layer sees a block of columns
// of a wider activation, set_column_shard), so data-parallel shards, pipeline
// micro-batches and tensor-parallel shards drop what single-rank training
// would. The mask is a pure function of (seed, c, global index), identical on
// every backend, and recomputed in backward instead of stored. A pass begins
// with begin_pass() (Sequential calls it once per step). In evaluation mode
// the layer is the identity.
#pragma once

#include "layers/capabilities.hpp"

#include <vector>

namespace strata {

template <class T>
class Dropout final : public Layer<T>,
                      public TensorShardable,
                      public Buffers<T>,
                      public PerPass {
 public:
  // p in [0, 1): probability of dropping an element.
  Dropout(double p, std::uint64_t seed);

  // The layer a model file describes (layers/registry.hpp).
  static LayerPtr<T> from_args(LayerArgs& args, const Shape& in, LayerBuild& build);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_input() const override { return false; }  // the mask is recomputed
  bool backward_reads_output() const override { return false; }

  void begin_pass() override {
    if (this->training_ && p_ > 0.0) ++calls_;
  }
  TensorSplit tensor_split() const override { return TensorSplit::elementwise; }
  void set_column_shard(std::size_t first, std::size_t total) override {
    col_first_ = first;
    col_total_ = total;
  }
  // Sequence parallelism: each sample's row is run `rank` of `ranks` equal
  // runs of its positions (the whole row's mask, cut as the row is).
  void set_sequence_shard(std::size_t rank, std::size_t ranks) {
    seq_rank_ = rank;
    seq_ranks_ = ranks;
  }

  // Number of training passes so far: the buffer "calls", checkpointed for
  // an exact resume (a double holds it exactly up to 2^53 passes).
  std::uint64_t calls() const { return calls_; }
  void set_calls(std::uint64_t calls) { calls_ = calls; }
  std::vector<BufferInfo> buffer_table() const override { return {{"calls", 1, /*state_dict=*/false}}; }
  std::vector<double> read_buffer(std::size_t) const override {
    return {static_cast<double>(calls_)};
  }
  void write_buffer(std::size_t, const std::vector<double>& v) override;

 private:
  // The (rows, cols) block of the whole activation (`total` columns) that a
  // micro-batch's values are, and its first row.
  struct Block {
    std::size_t rows, cols, first_row, total;
  };
  Block block(std::size_t rows, std::size_t cols, std::size_t row_offset) const;
  std::size_t first_col(std::size_t cols) const {
    return seq_ranks_ > 0 ? seq_rank_ * cols : col_first_;
  }

  double p_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
  // A column shard (set_column_shard): columns [col_first_, + width) of the
  // last dimension, col_total_ wide; 0: the whole input.
  std::size_t col_first_ = 0, col_total_ = 0;
  // A sequence shard (set_sequence_shard); 0 ranks: none.
  std::size_t seq_rank_ = 0, seq_ranks_ = 0;
};

}  // namespace strata
