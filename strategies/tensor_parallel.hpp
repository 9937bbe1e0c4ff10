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
#include "layers/mlp.hpp"

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

template <class T>
class ColumnParallelLinear final : public ShardedLayer<T> {
 public:
  ColumnParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp);

  std::string name() const override;
  std::size_t out_features(std::size_t in) const override;
  std::size_t num_params() const override { return local_.num_params(); }
  void bind(Vector<T> params, Vector<T> grads) override { local_.bind(params, grads); }
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void set_slots(std::size_t n) override {
    Layer<T>::set_slots(n);
    local_.set_slots(n);
  }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) override;
  bool backward_reads_output() const override { return false; }

  std::size_t full_num_params() const override { return out_ * in_ + out_; }
  void extract(const T* full, T* shard) const override;
  void assemble(const T* blocks, T* full) const override;
  void full_index(std::size_t* index) const override;
  std::size_t first_feature() const { return first_; }

 private:
  std::size_t in_, out_, local_out_, first_;
  comm::Communicator& tp_;
  Linear<T> local_;  // Linear(in, out / tp) on this rank's rows of W and b
};

template <class T>
class RowParallelLinear final : public ShardedLayer<T> {
 public:
  RowParallelLinear(std::size_t in, std::size_t out, comm::Communicator& tp);

  std::string name() const override;
  std::size_t out_features(std::size_t in) const override;
  std::size_t num_params() const override { return out_ * local_in_ + out_; }
  void bind(Vector<T> params, Vector<T> grads) override;
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  void set_slots(std::size_t n) override {
    Layer<T>::set_slots(n);
    local_.set_slots(n);
  }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) override;
  bool backward_reads_output() const override { return false; }

  std::size_t full_num_params() const override { return out_ * in_ + out_; }
  void extract(const T* full, T* shard) const override;
  void assemble(const T* blocks, T* full) const override;
  std::size_t replicated_tail() const override { return out_; }
  void full_index(std::size_t* index) const override;

 private:
  std::size_t in_, out_, local_in_, first_;
  comm::Communicator& tp_;
  Linear<T> local_;  // Linear(in / tp, out, no bias) on this rank's columns of W
  Vector<T> b_, db_;
};

// The MLP of spec with tensor parallelism over tp: Linear layers in pairs,
// column- then row-parallel (an unpaired last Linear stays whole and
// replicated); Dropout after a column-parallel layer masks its shard as the
// whole layer would. With tp of size 1: the plain layers. Throws config,
// naming the layer, when tp does not divide a width it must split.
// cut_ok[i]: a pipeline stage may end after layer i (the activation there is
// whole, not sharded).
template <class T>
struct MlpLayers {
  std::vector<LayerPtr<T>> layers;
  std::vector<bool> cut_ok;
  std::vector<double> flops;  // forward multiply-adds per sample, per layer
};

template <class T>
MlpLayers<T> make_tensor_parallel_mlp(const MlpSpec& spec, comm::Communicator& tp);

}  // namespace strata
