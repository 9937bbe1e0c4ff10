#include "strategies/tensor_parallel.hpp"

#include "backends/error.hpp"
#include "layers/attention.hpp"
#include "layers/batch_sums.hpp"
#include "strategies/sequence_parallel.hpp"
#include "strategies/vocab_parallel.hpp"

namespace strata {

namespace {
// The width each rank holds of one split `what` of `width`.
std::size_t divided(std::size_t width, comm::Communicator& tp, const std::string& layer,
                    const char* what) {
  const auto n = static_cast<std::size_t>(tp.size());
  STRATA_REQUIRE(width % n == 0, config, "tensor parallelism: --tp ", n, " does not divide the ",
                 what, " ", width, " of ", layer);
  return width / n;
}

// Waits for the kernels on ctx, then sums buf over the group.
template <class View>
void allreduce_after(Context& ctx, comm::Communicator& comm, const View& buf) {
  ctx.exec.fence();
  comm.allreduce(buf);
}
}  // namespace

// ---------------------------------------------------------------- shard maps
namespace {
// Group rank r's shard map (TensorShard::shard_map) as two vectors.
template <class T>
struct Map {
  std::vector<std::size_t> index;
  std::vector<std::uint8_t> replica;
  Map(const TensorShard<T>& s, int r) : index(s.shard_size()), replica(s.shard_size()) {
    s.shard_map(r, index.data(), replica.data());
  }
};
}  // namespace

template <class T>
void extract_shard(const TensorShard<T>& s, int r, const T* full, T* shard) {
  const Map<T> m(s, r);
  for (std::size_t k = 0; k < m.index.size(); ++k)
    shard[k] = m.replica[k] == kPadding ? T(0) : full[m.index[k]];
}

template <class T>
void assemble_shards(const TensorShard<T>& s, int ranks, const T* blocks, T* full) {
  for (int r = 0; r < ranks; ++r) {
    const Map<T> m(s, r);
    const T* block = blocks + static_cast<std::size_t>(r) * m.index.size();
    for (std::size_t k = 0; k < m.index.size(); ++k)
      if (m.replica[k] == kOwned || (r == 0 && m.replica[k] == kReplicated)) full[m.index[k]] = block[k];
  }
}

template <class T>
std::vector<std::size_t> checkpoint_index(const TensorShard<T>& s, int r) {
  Map<T> m(s, r);
  for (std::size_t k = 0; k < m.index.size(); ++k)
    if (m.replica[k] == kPadding || (r != 0 && m.replica[k] == kReplicated)) m.index[k] = kReplica;
  return std::move(m.index);
}

template <class T>
std::vector<std::uint8_t> counted_once(const TensorShard<T>& s, int r) {
  Map<T> m(s, r);
  for (auto& x : m.replica) x = x == kOwned || (r == 0 && x == kReplicated);
  return std::move(m.replica);
}

template <class T>
void init_shard(const Layer<T>& whole, const TensorShard<T>& s, int r, T* shard, Init scheme,
                std::uint64_t seed, std::uint64_t layer_index) {
  std::vector<T> full(whole.num_params());
  whole.init(HostVector<T>(full.data(), full.size()), scheme, seed, layer_index);
  extract_shard<T>(s, r, full.data(), shard);
}

// ----------------------------------------------------- what both kinds share
template <class T>
TensorParallelLinear<T>::TensorParallelLinear(std::unique_ptr<Linear<T>>&& whole,
                                              comm::Communicator& tp, std::size_t local_in,
                                              std::size_t local_out, bool local_bias)
    : whole_(std::move(whole)),
      tp_(tp),
      local_(local_in, local_out, local_bias, whole_->init_std(), whole_->tied_to()) {}

template <class T>
std::string TensorParallelLinear<T>::describe(const char* kind) const {
  return std::string(kind) + "(" + std::to_string(whole_->in()) + ", " +
         std::to_string(whole_->out()) + ", tp=" + std::to_string(tp_.size()) + ")";
}

template <class T>
void TensorParallelLinear<T>::add_shard_costs(std::vector<LayerCost>& out, bool row) const {
  // A column-parallel shard under sequence parallelism computes on the
  // whole sequence (its input shape is this rank's positions).
  out.push_back(this->cost(local_.flops() * (seq_ && !row ? static_cast<double>(seq_->ranks()) : 1.0)));
  const Shape& in = this->input_shape();
  const Shape o = this->output_shape(in);
  LayerCost& c = out.back();
  c.gemm = features_last_gemm(in.numel(), in.back(), o.back());
  if (seq_) {
    // A gather or reduce-scatter moves half what an allreduce of the whole
    // sequence's values does: a column-parallel layer gathers its input
    // (forward), gathers it again and reduce-scatters its gradient
    // (backward); a row-parallel one reduce-scatters its output and gathers
    // its gradient.
    const double whole = static_cast<double>(sequence_values());
    c.tp_forward = 0.5 * whole;
    c.tp_backward = (row ? 0.5 : 1.0) * whole;
    c.gemm = features_last_gemm(row ? in.numel() : whole, in.back(), o.back());
  } else if (row) {
    c.tp_forward = static_cast<double>(o.numel());
  } else {
    c.tp_backward = static_cast<double>(in.numel());
  }
}

template <class T>
std::size_t TensorParallelLinear<T>::sequence_scratch(std::size_t max_batch, bool exact) const {
  if (!seq_) return 0;
  return max_batch * sequence_values() * (exact ? 2 * sizeof(double) : sizeof(T));
}

template <class T>
void TensorParallelLinear<T>::reserve(std::size_t batch, std::size_t in) {
  Layer<T>::reserve(batch, in);
  if (seq_)
    seq_->reserve(sequence_scratch(batch, local_.exact_forward() || local_.exact_input_grad()));
}

template <class T>
void TensorParallelLinear<T>::set_input_shape(const Shape& in) {
  Layer<T>::set_input_shape(in);
  local_.set_input_shape(in);
}

template <class T>
void TensorParallelLinear<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                                   std::uint64_t layer_index) const {
  // A tied weight's copy (leading the values) is filled by the engine.
  const std::size_t copy = this->num_params() - this->shard_size();
  init_shard<T>(*whole_, *this, tp_.rank(), params.data() + copy, scheme, seed, layer_index);
}

// ------------------------------------------------------------ column-parallel
namespace {
// A column-parallel layer's output features on each rank.
template <class T>
std::size_t column_width(const Linear<T>& w, comm::Communicator& tp, std::size_t groups, bool padded) {
  STRATA_REQUIRE(groups > 0 && w.out() % groups == 0, config, "tensor parallelism: ", w.name(),
                 " cannot be cut into ", groups, " equal parts");
  if (padded) {
    const VocabSplit v(w.out(), tp.size());
    STRATA_REQUIRE(groups == 1 && v.possible(), config, "tensor parallelism: --tp ", tp.size(),
                   " leaves a rank without a class of the ", w.out(), " of ", w.name());
    return v.share;
  }
  if (groups == 1) return divided(w.out(), tp, w.name(), "output width");
  return groups * divided(w.out() / groups, tp, w.name() + " (" + std::to_string(groups) +
                                                    " parts: queries, keys, values)", "part width");
}
}  // namespace

template <class T>
ColumnParallelLinear<T>::ColumnParallelLinear(std::unique_ptr<Linear<T>>&& whole,
                                              comm::Communicator& tp, std::size_t groups,
                                              bool padded)
    : TensorParallelLinear<T>(std::move(whole), tp, whole->in(),
                              column_width(*whole, tp, groups, padded), whole->has_bias()),
      groups_(groups),
      local_out_(this->local_.out()) {
  if (this->whole_->weight_tied()) this->local_.tie_weight(Shape{local_out_, this->whole_->in()});
}

template <class T>
std::size_t ColumnParallelLinear<T>::whole_feature(int r, std::size_t f) const {
  const std::size_t part = local_out_ / groups_, whole_part = this->whole_->out() / groups_;
  return (f / part) * whole_part + static_cast<std::size_t>(r) * part + f % part;
}

template <class T>
std::size_t ColumnParallelLinear<T>::shard_size() const {
  const Linear<T>& w = *this->whole_;
  return (w.weight_tied() ? 0 : local_out_ * w.in()) + (w.has_bias() ? local_out_ : 0);
}

template <class T>
void ColumnParallelLinear<T>::shard_map(int r, std::size_t* index, std::uint8_t* replica) const {
  // Whole layout: W (out, in) unless tied, then b (out).
  const Linear<T>& w = *this->whole_;
  const std::size_t in = w.in(), weights = w.weight_tied() ? 0 : local_out_ * in;
  const std::size_t whole_weights = w.weight_tied() ? 0 : w.out() * in;
  // Features past the whole output are a padded vocabulary's.
  for (std::size_t k = 0; k < weights; ++k) {
    const std::size_t f = whole_feature(r, k / in);
    index[k] = f * in + k % in;
    replica[k] = f < w.out() ? kOwned : kPadding;
  }
  if (w.has_bias())
    for (std::size_t f = 0; f < local_out_; ++f) {
      index[weights + f] = whole_weights + whole_feature(r, f);
      replica[weights + f] = whole_feature(r, f) < w.out() ? kOwned : kPadding;
    }
}

template <class T>
void ColumnParallelLinear<T>::tie_weight(const Shape& shape) {
  this->local_.tie_weight(shape);
  this->whole_->tie_weight(Shape{this->whole_->out(), this->whole_->in()});
}

template <class T>
Shape ColumnParallelLinear<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.back() == this->whole_->in(), config, name(),
                 " expects inputs whose last dimension is ", this->whole_->in(), " but gets shape ",
                 in.str());
  // Sequence parallelism: the input is a shard of the positions, the output all of them.
  return (this->seq_ ? this->seq_->whole(in) : in).with_back(local_out_);
}

template <class T>
std::size_t ColumnParallelLinear<T>::sequence_values() const {
  return this->input_shape().numel() * this->seq_->ranks();
}

template <class T>
void ColumnParallelLinear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  if (!this->seq_) {
    this->local_.forward(ctx, x, y, saved);
    return;
  }
  // The whole sequence gathered (again in backward: it is not kept).
  const std::size_t batch = x.extent(0), w = x.extent(1), whole = w * this->seq_->ranks();
  T* full = this->seq_->template region<T>(1, batch * whole);
  this->seq_->template gather<T>(ctx, x.data(), full, batch, w);
  this->local_.forward(ctx, ConstMatrix<T>(full, batch, whole), y, saved);
}

template <class T>
void ColumnParallelLinear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  if (this->seq_) {
    sequence_backward(ctx, dy, dx, saved);
    return;
  }
  // dx = sum over ranks of dy_shard W_shard: exact pairs summed before they
  // are rounded (set_inner_chunk), else rounded values.
  const bool exact = dx.data() != nullptr && this->local_.exact_input_grad();
  this->local_.backward(ctx, dy, exact ? Matrix<T>() : dx, saved);
  if (exact) {
    const auto pairs = this->local_.exact_product(ctx, dy, true);
    if (this->tp_.size() > 1) allreduce_after(ctx, this->tp_, pairs);
    detail::round_exact<T>(ctx, pairs, as_rows(dx, this->whole_->in()));
  } else if (dx.data() != nullptr && this->tp_.size() > 1) {
    allreduce_after(ctx, this->tp_, dx);
  }
}

template <class T>
void ColumnParallelLinear<T>::sequence_backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx,
                                                Saved<T>& saved) {
  // The weight gradient reads the whole sequence's input: gathered again.
  SequenceShards& seq = *this->seq_;
  const std::size_t batch = dy.extent(0), w = this->input_shape().numel(), whole = w * seq.ranks();
  T* full = seq.template region<T>(1, batch * whole);
  seq.template gather<T>(ctx, saved.x.data(), full, batch, w);
  Saved<T> s;
  s.x = ConstMatrix<T>(full, batch, whole);
  s.y = saved.y;
  s.row_offset = saved.row_offset;
  s.training = saved.training;
  s.scratch = saved.scratch;
  // dx = this rank's positions of the sum over ranks of dy_shard W_shard.
  if (dx.data() != nullptr && this->local_.exact_input_grad()) {
    this->local_.backward(ctx, dy, Matrix<T>(), s);
    const auto pairs = this->local_.exact_product(ctx, dy, true);
    double* mine = seq.template region<double>(2, 2 * batch * w);
    seq.template reduce_scatter<double>(ctx, pairs.data(), mine, batch, 2 * w);
    detail::round_exact<T>(ctx, Kokkos::View<const double*, MemSpace>(mine, 2 * batch * w),
                           as_rows(dx, this->whole_->in()));
  } else if (dx.data() != nullptr) {
    T* partial = seq.template region<T>(2, batch * whole);
    this->local_.backward(ctx, dy, Matrix<T>(partial, batch, whole), s);
    seq.template reduce_scatter<T>(ctx, partial, dx.data(), batch, w);
  } else {
    this->local_.backward(ctx, dy, dx, s);
  }
}

template <class T>
void ColumnParallelLinear<T>::set_inner_chunk(std::size_t s) {
  // The input gradient's sum runs over this rank's block of each group.
  const std::size_t block = local_out_ / groups_;
  STRATA_REQUIRE(s == 0 || block % s == 0, config, "--tp-chunk ", s, ": ", name(), " holds ",
                 block, " output features", groups_ > 1 ? " of each of its parts" : "",
                 " on a rank, not whole chunks of ", s,
                 " (its input gradient sums over them); give a --tp-chunk that divides ", block);
  this->local_.set_inner_chunk(s);
}

// --------------------------------------------------------------- row-parallel
template <class T>
RowParallelLinear<T>::RowParallelLinear(std::unique_ptr<Linear<T>>&& whole, comm::Communicator& tp)
    : TensorParallelLinear<T>(std::move(whole), tp, divided(whole->in(), tp, whole->name(), "input width"),
                              whole->out(), /*local_bias=*/false),
      local_in_(this->local_.in()) {}

template <class T>
std::vector<ParamSpec> RowParallelLinear<T>::params() const {
  // The whole layer's initialisers (init() cuts the shard out of the whole's values).
  const Linear<T>& w = *this->whole_;
  const double in = static_cast<double>(w.in()), out = static_cast<double>(w.out());
  std::vector<ParamSpec> t{{"weight", Shape{w.out(), local_in_}, ParamGroup::decay,
                            ParamInit::weights(in, out)}};
  if (w.has_bias()) t.push_back({"bias", Shape{w.out()}, ParamGroup::no_decay, ParamInit::bias(in)});
  return t;
}

template <class T>
void RowParallelLinear<T>::shard_map(int r, std::size_t* index, std::uint8_t* replica) const {
  // Columns [r * in/tp, (r+1) * in/tp) of W, then all of b (replicated).
  const std::size_t in = this->whole_->in(), out = this->whole_->out();
  const std::size_t first = local_in_ * static_cast<std::size_t>(r), weights = out * local_in_;
  for (std::size_t k = 0; k < weights; ++k) {
    index[k] = (k / local_in_) * in + first + k % local_in_;
    replica[k] = kOwned;
  }
  for (std::size_t k = weights; k < this->num_params(); ++k) {
    index[k] = out * in + (k - weights);
    replica[k] = kReplicated;
  }
}

template <class T>
Shape RowParallelLinear<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.back() == local_in_, config, name(), " expects its shard of ", local_in_,
                 " input features in the last dimension but gets shape ", in.str());
  const Shape out = in.with_back(this->whole_->out());
  // Sequence parallelism: the output is this rank's shard of the positions.
  return this->seq_ ? this->seq_->shard(out, name()) : out;
}

template <class T>
std::size_t RowParallelLinear<T>::sequence_values() const {
  return this->input_shape().numel() / local_in_ * this->whole_->out();
}

template <class T>
void RowParallelLinear<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  this->local_.bind(s[0].value, s[0].grad);
  if (!this->whole_->has_bias()) return;
  b_ = s[1].value;
  db_ = s[1].grad;
  if (this->seq_) bias_grads_.bind(db_);
}

template <class T>
void RowParallelLinear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  if (this->seq_) {
    // The partial products of the whole sequence, reduce-scattered: each rank
    // gets the sum at its positions.
    SequenceShards& seq = *this->seq_;
    const std::size_t batch = x.extent(0), w = y.extent(1), whole = w * seq.ranks();
    if (this->local_.exact_forward()) {
      const auto pairs = this->local_.exact_product(ctx, x, false);
      double* mine = seq.template region<double>(2, 2 * batch * w);
      seq.template reduce_scatter<double>(ctx, pairs.data(), mine, batch, 2 * w);
      detail::round_exact<T>(ctx, Kokkos::View<const double*, MemSpace>(mine, 2 * batch * w),
                             as_rows(y, this->whole_->out()));
    } else {
      T* partial = seq.template region<T>(1, batch * whole);
      this->local_.forward(ctx, x, Matrix<T>(partial, batch, whole), saved);
      seq.template reduce_scatter<T>(ctx, partial, y.data(), batch, w);
    }
  } else if (this->local_.exact_forward()) {  // exact pairs summed before they are rounded
    const auto pairs = this->local_.exact_product(ctx, x, false);
    if (this->tp_.size() > 1) allreduce_after(ctx, this->tp_, pairs);
    detail::round_exact<T>(ctx, pairs, as_rows(y, this->whole_->out()));
  } else {
    this->local_.forward(ctx, x, y, saved);  // this rank's part of x W^T
    if (this->tp_.size() > 1) allreduce_after(ctx, this->tp_, y);
  }
  if (this->whole_->has_bias()) detail::add_bias<T>(ctx, as_rows(y, this->whole_->out()), b_);
}

template <class T>
void RowParallelLinear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  if (this->seq_) {
    // The bias gradient over this rank's positions, summed over the group;
    // the weight's and the input's need the whole sequence's dy.
    SequenceShards& seq = *this->seq_;
    if (this->whole_->has_bias())
      bias_grads_.run(ctx, this->tp_, [&] {
        add_column_sums<T>(ctx, as_rows(dy, this->whole_->out()), bias_grads_.local());
      });
    const std::size_t batch = dy.extent(0), w = dy.extent(1), whole = w * seq.ranks();
    T* full = seq.template region<T>(1, batch * whole);
    seq.template gather<T>(ctx, dy.data(), full, batch, w);
    this->local_.backward(ctx, ConstMatrix<T>(full, batch, whole), dx, saved);
    return;
  }
  if (this->whole_->has_bias())
    add_column_sums<T>(ctx, as_rows(dy, this->whole_->out()), db_);
  this->local_.backward(ctx, dy, dx, saved);  // dx is this rank's shard of the input gradient
}

template <class T>
void RowParallelLinear<T>::set_inner_chunk(std::size_t s) {
  STRATA_REQUIRE(s == 0 || local_in_ % s == 0, config, "--tp-chunk ", s, ": ", name(), " holds ",
                 local_in_, " input features on a rank, not whole chunks of ", s,
                 " (its output sums over them); give a --tp-chunk that divides ", local_in_);
  this->local_.set_inner_chunk(s);
}

// --------------------------------------------------------------------- blocks
template <class T>
std::size_t ShardedBlock<T>::full_num_params() const {
  std::size_t n = 0;
  for (std::size_t j = 0; j < this->num_layers(); ++j) {
    const TensorShard<T>* s = tensor_shard(this->layer(j));
    n += s ? s->full_num_params() : this->layer(j).num_params();
  }
  return n;
}

template <class T>
void ShardedBlock<T>::shard_map(int r, std::size_t* index, std::uint8_t* replica) const {
  std::size_t local = 0, whole = 0;  // where inner layer j starts in each layout
  for (std::size_t j = 0; j < this->num_layers(); ++j) {
    const Layer<T>& l = this->layer(j);
    const std::size_t n = l.num_params();
    if (const TensorShard<T>* s = tensor_shard(l)) {
      s->shard_map(r, index + local, replica + local);
      for (std::size_t k = 0; k < n; ++k) index[local + k] += whole;
      whole += s->full_num_params();
    } else {
      for (std::size_t k = 0; k < n; ++k) {
        index[local + k] = whole + k;
        replica[local + k] = kReplicated;
      }
      whole += n;
    }
    local += n;
  }
}

// ----------------------------------------------------------------- the model
namespace {
// Splits one list of layers (the model's, or a block's inner layers) whose
// inputs have the shapes `shapes` (one more: the last output).
template <class T>
class Splitter {
 public:
  explicit Splitter(comm::Communicator& tp) : tp_(tp) {}

  void split(std::vector<LayerPtr<T>>& layers, const std::vector<Shape>& shapes,
             const std::vector<std::string>& names) {
    const std::size_t n = layers.size();
    auto is = [&](std::size_t i, TensorSplit s) { return tensor_split(*layers[i]) == s; };
    auto label = [&](std::size_t i) { return names[i] + " (" + layers[i]->name() + ")"; };
    for (std::size_t i = 0; i < n; ++i) {
      if (auto* block = dynamic_cast<Block<T>*>(layers[i].get())) {
        layers[i] = split_block(*block, shapes[i], names[i]);
        continue;
      }
      if (is(i, TensorSplit::vocabulary)) {
        // Padded when tp does not divide it; whole when too small for every rank.
        if (!VocabSplit(dynamic_cast<Embedding<T>&>(*layers[i]).vocab(), tp_.size()).possible())
          continue;
        layers[i] = std::make_unique<VocabParallelEmbedding<T>>(
            std::unique_ptr<Embedding<T>>(static_cast<Embedding<T>*>(layers[i].release())), tp_);
        continue;
      }
      if (!is(i, TensorSplit::linear)) continue;
      // A pair: Linear, layers that run on a shard, Linear.
      std::size_t j = i + 1, heads_at = n;
      while (j < n && (is(j, TensorSplit::elementwise) || is(j, TensorSplit::heads))) {
        if (is(j, TensorSplit::heads)) {
          if (heads_at != n) break;  // two attention cores: no pair
          heads_at = j;
        }
        ++j;
      }
      if (j == n || !is(j, TensorSplit::linear)) continue;
      std::size_t groups = 1;
      if (heads_at != n) {
        STRATA_REQUIRE(heads_at == i + 1, config, "tensor parallelism: ", label(i + 1),
                       " between ", label(i), " and the attention core ", label(heads_at),
                       " would see this rank's queries, keys and values side by side");
        groups = shapes[heads_at].back() / shapes[heads_at + 1].back();
        auto& core = dynamic_cast<CausalAttention<T>&>(*layers[heads_at]);
        const std::size_t heads = divided(core.heads(), tp_, label(heads_at), "number of heads");
        layers[heads_at] = std::make_unique<CausalAttention<T>>(heads, core.head_size());
      }
      layers[i] = std::make_unique<ColumnParallelLinear<T>>(take_linear(layers[i]), tp_, groups);
      layers[j] = std::make_unique<RowParallelLinear<T>>(take_linear(layers[j]), tp_);
      // The layers between see columns [first, first + width) of the whole
      // activation's last dimension (after a core: this rank's heads).
      for (std::size_t k = (heads_at != n ? heads_at : i) + 1; k < j; ++k) {
        const std::size_t whole = shapes[k].back(), local = whole / static_cast<std::size_t>(tp_.size());
        capability<TensorShardable>(*layers[k])->set_column_shard(local * static_cast<std::size_t>(tp_.rank()), whole);
      }
      i = j;
    }
  }

  static std::unique_ptr<Linear<T>> take_linear(LayerPtr<T>& l) {
    return std::unique_ptr<Linear<T>>(static_cast<Linear<T>*>(l.release()));
  }

 private:
  // path: the block's name in the model ("h.0"), which errors prefix to
  // the inner layers' names ("h.0.0.attn.core").
  LayerPtr<T> split_block(Block<T>& block, const Shape& input, const std::string& path) {
    const bool residual = block.residual(), recompute = block.recomputes();
    const std::vector<std::string> names = block.names();
    std::vector<LayerPtr<T>> inner = block.release_layers();
    std::vector<Shape> shapes{input};
    for (const auto& l : inner) shapes.push_back(l->output_shape(shapes.back()));
    std::vector<std::string> paths;
    for (const auto& n : names) paths.push_back(path + "." + n);
    split(inner, shapes, paths);
    bool sharded = false;
    for (const auto& l : inner) sharded = sharded || tensor_shard(*l) != nullptr;
    LayerPtr<T> rebuilt = sharded ? std::make_unique<ShardedBlock<T>>(std::move(inner), residual, names)
                                  : std::make_unique<Block<T>>(std::move(inner), residual, names);
    set_recompute(*rebuilt, recompute);  // a model file's `recompute = true` on the block
    return rebuilt;
  }

  comm::Communicator& tp_;
};
}  // namespace

template <class T>
TensorParallelLayers<T> make_tensor_parallel(ModelLayers<T> model, comm::Communicator& tp,
                                             bool vocab_head, bool sequence) {
  TensorParallelLayers<T> m;
  m.input = model.input;
  m.names = std::move(model.names);
  std::vector<LayerPtr<T>>& layers = model.layers;
  const std::size_t n = layers.size();
  std::vector<Shape> shapes{model.input};
  for (const auto& l : layers) shapes.push_back(l->output_shape(shapes.back()));
  if (tp.size() > 1) {
    std::vector<std::string> labels(n);
    for (std::size_t i = 0; i < n; ++i) labels[i] = m.names[i].empty() ? std::to_string(i) : m.names[i];
    Splitter<T>(tp).split(layers, shapes, labels);
    // A language model's head: column-parallel over the vocabulary, padded
    // as its embedding (whole, as its embedding, when too small for every rank).
    const auto* last = n > 0 ? dynamic_cast<const Linear<T>*>(layers[n - 1].get()) : nullptr;
    if (vocab_head && last && shapes[n - 1].rank() >= 2 && VocabSplit(last->out(), tp.size()).possible()) {
      auto head = Splitter<T>::take_linear(layers[n - 1]);
      m.classes = head->out();
      layers[n - 1] = std::make_unique<ColumnParallelLinear<T>>(std::move(head), tp, 1, true);
      m.first_class = VocabSplit(m.classes, tp.size()).first(tp.rank());
    }
    if (sequence) {
      m.layers = std::move(layers);
      make_sequence_parallel(m, tp);
      layers = std::move(m.layers);
      m.layers.clear();
    }
  }
  // Walk the top level: after a column-parallel layer the activation is
  // sharded until the row-parallel layer that follows.
  bool sharded = false;
  Shape shape = model.input;
  for (auto& layer : layers) {
    if (dynamic_cast<const ColumnParallelLinear<T>*>(layer.get())) sharded = true;
    if (dynamic_cast<const RowParallelLinear<T>*>(layer.get())) sharded = false;
    shape = layer->output_shape(shape);
    m.cut_ok.push_back(!sharded);
    m.flops.push_back(layer->num_params() > 0 ? static_cast<double>(layer->num_params())
                                              : static_cast<double>(shape.numel()));
    m.layers.push_back(std::move(layer));
  }
  return m;
}

#define STRATA_TENSOR_PARALLEL(T)                                                              \
  template void extract_shard<T>(const TensorShard<T>&, int, const T*, T*);                    \
  template void assemble_shards<T>(const TensorShard<T>&, int, const T*, T*);                  \
  template std::vector<std::size_t> checkpoint_index<T>(const TensorShard<T>&, int);           \
  template std::vector<std::uint8_t> counted_once<T>(const TensorShard<T>&, int);              \
  template void init_shard<T>(const Layer<T>&, const TensorShard<T>&, int, T*, Init,            \
                              std::uint64_t, std::uint64_t);                                    \
  template class TensorParallelLinear<T>;                                                      \
  template class ColumnParallelLinear<T>;                                                      \
  template class RowParallelLinear<T>;                                                         \
  template class ShardedBlock<T>;                                                              \
  template TensorParallelLayers<T> make_tensor_parallel(ModelLayers<T>, comm::Communicator&, bool, \
                                                        bool);
STRATA_TENSOR_PARALLEL(float)
STRATA_TENSOR_PARALLEL(double)
#undef STRATA_TENSOR_PARALLEL

}  // namespace strata
