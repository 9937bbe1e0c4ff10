// Tensor parallelism (Megatron-LM style): layers split over the ranks of a
// tensor-parallel group.
//
//   ColumnParallelLinear(in, out): rank t holds output features
//     [t * out/tp, (t+1) * out/tp) of W and b (with `groups` > 1: that block
//     of each of the groups equal parts of the output, e.g. the queries, keys
//     and values of an attention's QKV projection, so that a rank holds whole
//     heads of each). The input is replicated, the output stays sharded
//     (batch, out/tp). backward: the input gradient is a sum of every rank's
//     part, reduced with one allreduce (skipped when no input gradient is
//     needed).
//   RowParallelLinear(in, out): rank t holds input features
//     [t * in/tp, (t+1) * in/tp) of W (all of b, replicated). The input is
//     sharded, each rank's product is partial: one allreduce in forward, then
//     the bias. backward needs no communication.
//
// So Linear - activation - Linear as column then row parallel costs one
// allreduce in forward and one in backward, and the activation (and a
// Dropout) works on the shard. An attention block (qkv Linear, attention
// core, proj Linear) is the same pair with the core between them, running
// on the rank's tp-th of the heads. Embeddings and a language model's head
// split over the vocabulary (strategies/vocab_parallel.hpp). Replicated
// parameters (the row layer's bias, LayerNorm, unsplit layers) get identical
// gradients on every rank of the group, so tensor parallelism needs no
// gradient communication of its own.
//
// Parameters are initialised as the whole layer would be (the shard is cut
// out of the single-rank initialisation), so a tensor-parallel model starts
// from exactly the parameters of its single-rank counterpart.
#pragma once

#include "backends/comm/communicator.hpp"
#include "layers/block.hpp"
#include "layers/linear.hpp"
#include "layers/registry.hpp"
#include "strategies/sequence_shards.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace strata {

// What a layer holding one shard of a larger single-rank layer says about
// it (a second base of such layers, beside Layer<T>; tensor_shard() finds
// it). The shard's values are the layer's num_params() values, less a tied
// weight's copy that leads them on a pipeline stage without the tied layer
// (the model-parallel engine handles those): shard_size() values.
template <class T>
class TensorShard {
 public:
  virtual ~TensorShard() = default;
  // Parameters of the whole layer in single-rank layout (a tied weight left out).
  virtual std::size_t full_num_params() const = 0;
  // Values of the shard that map into the single-rank layout.
  virtual std::size_t shard_size() const = 0;
  // For value k of group rank r's shard: index[k], its position among the
  // whole layer's values, and replica[k]: kOwned, kReplicated when every
  // rank of the group holds the same value (a row-parallel layer's bias, a
  // LayerNorm in a block), or kPadding for a value the whole layer does not
  // have (a padded vocabulary's rows; index[k] is then meaningless).
  virtual void shard_map(int r, std::size_t* index, std::uint8_t* replica) const = 0;
};
constexpr std::uint8_t kOwned = 0, kReplicated = 1, kPadding = 2;

// A vocabulary (an embedding's rows, a head's classes) split over `ranks` in
// equal blocks, padded as Megatron-LM pads it: each rank holds `share` =
// ceil(whole / ranks) rows, the first held(r) of them real and the rest
// padding (zeros that no token id reaches and the softmax leaves out).
// possible(): every rank holds at least one real row.
struct VocabSplit {
  VocabSplit(std::size_t whole, int ranks)
      : whole(whole), share((whole + static_cast<std::size_t>(ranks) - 1) / static_cast<std::size_t>(ranks)),
        ranks(ranks) {}
  std::size_t first(int r) const { return share * static_cast<std::size_t>(r); }
  std::size_t held(int r) const { return first(r) < whole ? std::min(share, whole - first(r)) : 0; }
  bool possible() const { return ranks > 0 && held(ranks - 1) > 0; }
  bool padded() const { return share * static_cast<std::size_t>(ranks) != whole; }
  std::size_t whole, share;
  int ranks;
};

// The layer's shard interface, or nullptr for a layer that is whole.
template <class T>
const TensorShard<T>* tensor_shard(const Layer<T>& layer) {
  return dynamic_cast<const TensorShard<T>*>(&layer);
}

// Positions in the single-rank layout of a sharded checkpoint: kReplica for
// a value that another rank of the group writes (or no rank: padding).
constexpr std::size_t kReplica = ~std::size_t{0};

// shard = group rank r's values out of the whole layer's (padding: zeros).
template <class T>
void extract_shard(const TensorShard<T>& s, int r, const T* full, T* shard);
// full = the whole layer's values from every rank's shard (`ranks` blocks of
// shard_size() values in rank order; replicas taken from rank 0).
template <class T>
void assemble_shards(const TensorShard<T>& s, int ranks, const T* blocks, T* full);
// For each value of group rank r's shard, its position in the whole layer,
// or kReplica for a replica that rank 0 writes instead, or for padding.
template <class T>
std::vector<std::size_t> checkpoint_index(const TensorShard<T>& s, int r);
// Whether value k of group rank r's shard counts once over the group (the
// gradient norm): 1 unless it is padding or a replica on a rank other than 0.
template <class T>
std::vector<std::uint8_t> counted_once(const TensorShard<T>& s, int r);
// shard = group rank r's part of the initial values `whole` draws (its own
// stream: a shard starts from the single-rank initialisation).
template <class T>
void init_shard(const Layer<T>& whole, const TensorShard<T>& s, int r, T* shard, Init scheme,
                std::uint64_t seed, std::uint64_t layer_index);

// What column- and row-parallel Linear layers share: the whole Linear (its
// initialisation and tie), this rank's shard as a local Linear, and the
// communicator.
template <class T>
class TensorParallelLinear : public Layer<T>,
                             public TensorShard<T>,
                             public ExactSums,
                             public TensorShardable,
                             public SequenceScratchUser {
 public:
  std::size_t full_num_params() const override { return whole_->num_params(); }
  void init(HostVector<T> params, Init scheme, std::uint64_t seed,
            std::uint64_t layer_index) const override;
  std::string reproducibility_issue() const override { return local_.reproducibility_issue(); }
  // A shard is not split again.
  TensorSplit tensor_split() const override { return TensorSplit::none; }
  std::size_t saved_size(std::size_t batch) const override { return local_.saved_size(batch); }
  bool backward_reads_output() const override { return false; }
  void set_input_shape(const Shape& in) override;
  // Sequence parallelism (strategies/sequence_parallel.hpp): the layer's
  // sequence-sharded side (a column-parallel layer's input, a row-parallel
  // layer's output) is this rank's shard of the positions. Before the
  // layer's shapes are set.
  virtual void set_sequence(std::shared_ptr<SequenceShards> shards) { seq_ = std::move(shards); }
  bool sequence_parallel() const { return seq_ != nullptr; }
  // The whole-sequence values of a sample on the sequence-sharded side, in
  // each of the shared scratch's regions.
  std::size_t sequence_scratch(std::size_t max_batch, bool exact) const override;
  void reserve(std::size_t batch, std::size_t in) override;

 protected:
  // local: this rank's Linear (local_in x local_out, with a bias when the
  // whole layer has one, tied as the whole layer is).
  TensorParallelLinear(std::unique_ptr<Linear<T>>&& whole, comm::Communicator& tp,
                       std::size_t local_in, std::size_t local_out, bool local_bias);
  std::string describe(const char* kind) const;
  // The shard's cost with its GEMM, and what the group sums: a row-parallel
  // shard's output in forward, a column-parallel shard's input gradient in
  // backward.
  void add_shard_costs(std::vector<LayerCost>& out, bool row) const;

  // Values per sample of the sequence-sharded side, whole sequence.
  virtual std::size_t sequence_values() const = 0;

  std::unique_ptr<Linear<T>> whole_;
  comm::Communicator& tp_;
  Linear<T> local_;
  std::shared_ptr<SequenceShards> seq_;
};

template <class T>
class ColumnParallelLinear final : public TensorParallelLinear<T>, public TiedWeight<T> {
 public:
  // groups: the output is that many equal parts, each split over the ranks.
  // padded (a language model's head, groups 1): the output features split as
  // a vocabulary (VocabSplit), the last ranks' blocks padded with features
  // of zero weight.
  ColumnParallelLinear(std::unique_ptr<Linear<T>>&& whole, comm::Communicator& tp,
                       std::size_t groups = 1, bool padded = false);

  std::string name() const override { return this->describe("ColumnParallelLinear"); }
  void add_costs(std::vector<LayerCost>& out) const override { this->add_shard_costs(out, false); }
  Shape output_shape(const Shape& in) const override;
  std::vector<ParamSpec> params() const override { return this->local_.params(); }
  void bind(Vector<T> params, Vector<T> grads) override { this->local_.bind(params, grads); }
  std::string tied_to() const override { return this->local_.tied_to(); }
  void tie_weight(const Shape& shape) override;
  void untie_weight() override { this->local_.untie_weight(); }
  void bind_tied(Vector<T> weight, Vector<T> grad) override { this->local_.bind_tied(weight, grad); }
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  void set_inner_chunk(std::size_t s) override;
  std::size_t shard_size() const override;
  void shard_map(int r, std::size_t* index, std::uint8_t* replica) const override;

  // The whole output feature of this rank's local feature f (groups laid
  // out one after the other, this rank's block of each).
  std::size_t whole_feature(int r, std::size_t f) const;
  std::size_t local_out() const { return local_out_; }

 private:
  std::size_t sequence_values() const override;
  void sequence_backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved);
  std::size_t groups_, local_out_;
};

template <class T>
class RowParallelLinear final : public TensorParallelLinear<T> {
 public:
  RowParallelLinear(std::unique_ptr<Linear<T>>&& whole, comm::Communicator& tp);

  std::string name() const override { return this->describe("RowParallelLinear"); }
  void add_costs(std::vector<LayerCost>& out) const override { this->add_shard_costs(out, true); }
  Shape output_shape(const Shape& in) const override;
  // weight (out, in / tp), then the replicated bias (out).
  std::vector<ParamSpec> params() const override;
  void bind(Vector<T> params, Vector<T> grads) override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  void set_inner_chunk(std::size_t s) override;
  std::size_t shard_size() const override { return this->num_params(); }
  void shard_map(int r, std::size_t* index, std::uint8_t* replica) const override;

 private:
  std::size_t sequence_values() const override;
  std::size_t local_in_;
  Vector<T> b_, db_;  // the replicated bias (the local Linear has none)
  // Sequence parallelism: the bias is added on a shard of the positions, its
  // gradient summed over the group.
  SequenceSummedGrads<T> bias_grads_;
};

// A block some of whose inner layers are shards: its shard map joins theirs
// (whole inner layers are replicas).
template <class T>
class ShardedBlock : public Block<T>, public TensorShard<T> {
 public:
  using Block<T>::Block;
  std::size_t full_num_params() const override;
  std::size_t shard_size() const override { return this->num_params(); }
  void shard_map(int r, std::size_t* index, std::uint8_t* replica) const override;
};

// A model's layers with tensor parallelism over tp, as the layers declare
// (TensorShardable::tensor_split), at every depth of blocks:
//   - a Linear followed, through layers that run on a shard (elementwise
//     ones: activations, Dropout; `heads` ones: an attention core), by
//     another Linear: column- then row-parallel. With an attention core
//     between them the first splits its output in groups (queries, keys,
//     values: core input width / core output width) and the core becomes
//     the attention over the rank's heads;
//   - an embedding (`vocabulary`): split by rows (VocabParallelEmbedding);
//   - with vocab_head (a cross-entropy loss), a last top-level Linear on
//     per-position inputs ({T, C}: a language model's head, tied or not):
//     column-parallel, its output (the logits) left sharded for
//     VocabParallelCrossEntropy;
//   - a vocabulary that tp does not divide is padded (VocabSplit: the last
//     ranks hold rows and classes of zeros that the loss leaves out); one
//     too small for a row on every rank keeps its embedding and head whole;
//   - every other layer (an unpaired Linear, LayerNorm, convolutions, ...)
//     stays whole and replicated.
// For an MLP that is every Linear in pairs, the last one whole when their
// number is odd. Dropout after a column-parallel layer masks its shard as
// the whole layer would. With tp of size 1: the layers as they are. Throws
// config, naming the layer, when tp does not divide a width or a number of
// heads it must split.
// cut_ok[i]: a pipeline stage may end after layer i (the activation there is
// whole, not sharded).
template <class T>
struct TensorParallelLayers {
  Shape input;
  std::vector<LayerPtr<T>> layers;
  std::vector<std::string> names;
  std::vector<bool> cut_ok;
  std::vector<double> flops;  // forward multiply-adds per sample, per layer
  // vocab_head: the last layer's output is this rank's classes
  // [first_class, first_class + its width) of `classes` per position (0: whole).
  std::size_t first_class = 0, classes = 0;
};

// sequence: and sequence-parallel (strategies/sequence_parallel.hpp).
template <class T>
TensorParallelLayers<T> make_tensor_parallel(ModelLayers<T> model, comm::Communicator& tp,
                                             bool vocab_head = false, bool sequence = false);

}  // namespace strata
