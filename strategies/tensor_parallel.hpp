// Tensor parallelism (Megatron-LM style): a Linear layer's weight split over
// the ranks of a tensor-parallel group.
//
//   ColumnParallelLinear(in, out): rank t holds output features
//     [t * out/tp, (t+1) * out/tp) of W and b. The input is replicated, the
//     output stays sharded (batch, out/tp). backward: the input gradient is a
//     sum of every rank's part, reduced with one allreduce (skipped when no
//     input gradient is needed).
//   RowParallelLinear(in, out): rank t holds input features
//     [t * in/tp, (t+1) * in/tp) of W (all of b, replicated). The input is
//     sharded, each rank's product is partial: one allreduce in forward, then
//     the bias. backward needs no communication.
//
// So Linear - activation - Linear as column then row parallel costs one
// allreduce in forward and one in backward, and the activation (and a
// Dropout) works on the shard. Replicated parameters (the row layer's bias,
// unsharded layers) get identical gradients on every rank of the group, so
// tensor parallelism needs no gradient communication of its own.
//
// Parameters are initialised as the whole layer would be (the shard is cut
// out of the single-rank initialisation), so a tensor-parallel model starts
// from exactly the parameters of its single-rank counterpart.
#pragma once

#include "backends/comm/communicator.hpp"
#include "layers/linear.hpp"
#include "layers/registry.hpp"

#include <vector>

namespace strata {

// A layer whose parameters are one shard of a larger single-rank layer.
template <class T>
class ShardedLayer : public Layer<T> {
 public:
  // Parameters of the whole layer (single-rank layout).
  virtual std::size_t full_num_params() const = 0;
  // This rank's shard (num_params() values) out of the whole layer's values.
  virtual void extract(const T* full, T* shard) const = 0;
  // The whole layer's values from every rank's shard (tp blocks of
  // num_params() values, in rank order).
  virtual void assemble(const T* blocks, T* full) const = 0;
  // Parameters at the end of the shard that every rank of the group holds
  // identically (RowParallelLinear's bias): norms count them once.
  virtual std::size_t replicated_tail() const { return 0; }
  // For sharded checkpoints, which rank writes which value: index[k] (k <
  // num_params()) is the position of shard value k among the whole layer's
  // values (the one extract() reads), or kReplica for a value that every rank
  // of the group holds and group rank 0 writes.
  static constexpr std::size_t kReplica = ~std::size_t{0};
  virtual void full_index(std::size_t* index) const = 0;
};

// What column- and row-parallel Linear layers share: the shard of a
// Linear(in, out) held on each rank of tp, computed by a local Linear, and
// extract/assemble/full_index from one map, Shard::position(r, k): the
// position among the whole layer's values of value k of group rank r's shard.
template <class T, class Shard>
class TensorParallelLinear : public ShardedLayer<T> {
 public:
  std::string name() const override;
  std::size_t full_num_params() const override { return out_ * in_ + out_; }
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  std::size_t saved_size(std::size_t batch) const override { return local_.saved_size(batch); }
  bool backward_reads_output() const override { return false; }
  void extract(const T* full, T* shard) const override;
  void assemble(const T* blocks, T* full) const override;
  void full_index(std::size_t* index) const override;

 protected:
  // local_in x local_out: this rank's Linear (with a bias when `bias`).
  TensorParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp,
                       std::size_t local_in, std::size_t local_out, bool bias);
  // Whether group rank r writes shard value k (false for a replica on r > 0).
  bool owns(int r, std::size_t k) const {
    return r == 0 || k < this->num_params() - this->replicated_tail();
  }

  std::size_t in_, out_;
  comm::Communicator& tp_;
  Linear<T> local_;
};

template <class T>
class ColumnParallelLinear final : public TensorParallelLinear<T, ColumnParallelLinear<T>> {
 public:
  static constexpr const char* kind = "ColumnParallelLinear";
  ColumnParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp);

  Shape output_shape(const Shape& in) const override;
  std::size_t num_params() const override { return this->local_.num_params(); }
  std::vector<ParamInfo> param_table() const override { return this->local_.param_table(); }
  void bind(Vector<T> params, Vector<T> grads) override { this->local_.bind(params, grads); }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;

  std::size_t first_feature() const { return local_out_ * static_cast<std::size_t>(this->tp_.rank()); }
  // Rows [r * out/tp, (r+1) * out/tp) of W, then those entries of b.
  std::size_t position(int r, std::size_t k) const {
    const std::size_t first = local_out_ * static_cast<std::size_t>(r), in = this->in_;
    if (k < local_out_ * in) return (first + k / in) * in + k % in;
    return this->out_ * in + first + (k - local_out_ * in);
  }

 private:
  std::size_t local_out_;
};

template <class T>
class RowParallelLinear final : public TensorParallelLinear<T, RowParallelLinear<T>> {
 public:
  static constexpr const char* kind = "RowParallelLinear";
  RowParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp);

  Shape output_shape(const Shape& in) const override;
  std::size_t num_params() const override { return this->out_ * local_in_ + this->out_; }
  std::vector<ParamInfo> param_table() const override {
    return {{"weight", Shape{this->out_, local_in_}, 0, ParamGroup::decay},
            {"bias", Shape{this->out_}, this->out_ * local_in_, ParamGroup::no_decay}};
  }
  void bind(Vector<T> params, Vector<T> grads) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  std::size_t replicated_tail() const override { return this->out_; }

  // Columns [r * in/tp, (r+1) * in/tp) of W, then all of b.
  std::size_t position(int r, std::size_t k) const {
    const std::size_t first = local_in_ * static_cast<std::size_t>(r), out = this->out_;
    if (k < out * local_in_) return (k / local_in_) * this->in_ + first + k % local_in_;
    return out * this->in_ + (k - out * local_in_);
  }

 private:
  std::size_t local_in_;
  Vector<T> b_, db_;  // the replicated bias (the local Linear has none)
};

// A model's top-level layers with tensor parallelism over tp, as the layers
// declare (Layer::tensor_split): Linear layers (with a bias, on rank-1
// inputs) separated only by elementwise layers (activations, Dropout) are
// paired, column- then row-parallel; every other layer (an unpaired Linear,
// LayerNorm, blocks) stays whole and replicated.
// For an MLP that is every Linear in pairs, the last one whole when their
// number is odd. Dropout after a column-parallel layer masks its shard as the
// whole layer would. With tp of size 1: the layers as they are. Throws
// config, naming the layer, when tp does not divide a width it must split.
// cut_ok[i]: a pipeline stage may end after layer i (the activation there is
// whole, not sharded).
template <class T>
struct TensorParallelLayers {
  Shape input;
  std::vector<LayerPtr<T>> layers;
  std::vector<std::string> names;
  std::vector<bool> cut_ok;
  std::vector<double> flops;  // forward multiply-adds per sample, per layer
};

template <class T>
TensorParallelLayers<T> make_tensor_parallel(ModelLayers<T> model, comm::Communicator& tp);

}  // namespace strata
