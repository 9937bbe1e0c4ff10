#include "strategies/sequence_parallel.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/dropout.hpp"
#include "layers/layernorm.hpp"

#include <algorithm>

namespace strata {

// ------------------------------------------------------------------ summed
template <class T>
SequenceSummed<T>::SequenceSummed(LayerPtr<T>&& inner, comm::Communicator& tp)
    : inner_(std::move(inner)), tp_(tp) {}

template <class T>
std::string SequenceSummed<T>::reproducibility_issue() const {
  const auto* e = dynamic_cast<const ExactSums*>(inner_.get());
  return e ? e->reproducibility_issue() : inner_->name() + " has no exact sums";
}

template <class T>
void SequenceSummed<T>::set_input_shape(const Shape& in) {
  Layer<T>::set_input_shape(in);
  inner_->set_input_shape(in);
}

template <class T>
void SequenceSummed<T>::bind(Vector<T> params, Vector<T> grads) {
  grads_.bind(grads);
  inner_->bind(params, grads_.local());
}

template <class T>
void SequenceSummed<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  inner_->set_training(this->training());
  inner_->forward(ctx, x, y, saved);
}

template <class T>
void SequenceSummed<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  grads_.run(ctx, tp_, [&] { inner_->backward(ctx, dy, dx, saved); });
}

// ------------------------------------------------------------- edge blocks
template <class T>
SequenceEdgeBlock<T>::SequenceEdgeBlock(std::vector<LayerPtr<T>> layers, bool residual,
                                        std::vector<std::string> names,
                                        std::shared_ptr<SequenceShards> shards, bool entry,
                                        bool exit)
    : ShardedBlock<T>(std::move(layers), residual, std::move(names)),
      shards_(std::move(shards)),
      entry_(entry),
      exit_(exit) {}

template <class T>
std::string SequenceEdgeBlock<T>::name() const {
  return Block<T>::name() + (entry_ ? " [sequence shards from here]" : "") +
         (exit_ ? " [whole sequence after]" : "");
}

template <class T>
Shape SequenceEdgeBlock<T>::output_shape(const Shape& in) const {
  const Shape s = Block<T>::output_shape(entry_ ? shards_->shard(in, name()) : in);
  return exit_ ? shards_->whole(s) : s;
}

template <class T>
void SequenceEdgeBlock<T>::set_input_shape(const Shape& in) {
  inner_in_ = entry_ ? shards_->shard(in, name()) : in;
  Block<T>::set_input_shape(inner_in_);
  inner_out_ = Block<T>::output_shape(inner_in_);
  this->in_shape_ = in;
}

template <class T>
void SequenceEdgeBlock<T>::reserve(std::size_t batch, std::size_t /*in: the whole sequence's*/) {
  Block<T>::reserve(batch, inner_in_.numel());
  max_batch_ = batch;
  own_ = VectorBuffer<T>("strata::SequenceEdgeBlock::shards",
                         batch * ((exit_ ? out_shard() : 0) + (entry_ ? in_shard() : 0)));
}

template <class T>
std::size_t SequenceEdgeBlock<T>::workspace_bytes(std::size_t max_batch) const {
  return Block<T>::workspace_bytes(max_batch) +
         max_batch * ((exit_ ? out_shard() : 0) + (entry_ ? in_shard() : 0)) * sizeof(T);
}

template <class T>
std::size_t SequenceEdgeBlock<T>::saved_size(std::size_t batch) const {
  // The entry keeps its input's shard: the inner layers' input until backward.
  return Block<T>::saved_size(batch) + (entry_ ? batch * in_shard() : 0);
}

template <class T>
void SequenceEdgeBlock<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  const std::size_t batch = x.extent(0), inner = Block<T>::saved_size(batch);
  const Vector<T> scratch = saved.scratch;
  ConstMatrix<T> in = x;
  if (entry_) {
    T* shard = scratch.data() + inner;
    shards_->slice<T>(ctx, x.data(), shard, batch, in_shard());
    in = ConstMatrix<T>(shard, batch, in_shard());
  }
  Matrix<T> out = exit_ ? Matrix<T>(own_.data(), batch, out_shard()) : y;
  saved.scratch = Vector<T>(scratch.data(), inner);
  const ConstMatrix<T> caller_x = saved.x;
  saved.x = in;
  Block<T>::forward(ctx, in, out, saved);
  saved.x = caller_x;
  saved.scratch = scratch;
  if (exit_) shards_->gather<T>(ctx, out.data(), y.data(), batch, out_shard());
}

template <class T>
void SequenceEdgeBlock<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  const std::size_t batch = dy.extent(0), inner = Block<T>::saved_size(batch);
  ConstMatrix<T> g = dy;
  if (exit_) {
    T* shard = own_.data();
    shards_->slice<T>(ctx, dy.data(), shard, batch, out_shard());
    g = ConstMatrix<T>(shard, batch, out_shard());
  }
  Matrix<T> d = dx;
  if (entry_ && dx.data() != nullptr)
    d = Matrix<T>(own_.data() + (exit_ ? max_batch_ * out_shard() : 0), batch, in_shard());
  const Vector<T> scratch = saved.scratch;
  const ConstMatrix<T> caller_x = saved.x;
  if (entry_) saved.x = ConstMatrix<T>(scratch.data() + inner, batch, in_shard());
  saved.scratch = Vector<T>(scratch.data(), inner);
  Block<T>::backward(ctx, g, d, saved);
  saved.x = caller_x;
  saved.scratch = scratch;
  if (entry_ && dx.data() != nullptr) shards_->gather<T>(ctx, d.data(), dx.data(), batch, in_shard());
}

// ------------------------------------------------------------ the region
namespace {
template <class T>
class Converter {
 public:
  Converter(comm::Communicator& tp, std::shared_ptr<SequenceShards> shards)
      : tp_(tp), shards_(std::move(shards)) {}

  // Layers [first, last) of one list, all on shards of the sequence except
  // between a column- and a row-parallel layer.
  void convert(std::vector<LayerPtr<T>>& layers, std::size_t first, std::size_t last,
               const std::vector<std::string>& labels) {
    bool in_pair = false;
    for (std::size_t i = first; i < last; ++i) {
      Layer<T>& l = *layers[i];
      if (auto* c = dynamic_cast<ColumnParallelLinear<T>*>(&l)) {
        c->set_sequence(shards_);
        in_pair = true;
        continue;
      }
      if (auto* r = dynamic_cast<RowParallelLinear<T>*>(&l)) {
        r->set_sequence(shards_);
        in_pair = false;
        continue;
      }
      if (in_pair) continue;  // on a feature shard of the whole sequence, as before
      if (auto* b = dynamic_cast<Block<T>*>(&l)) {
        layers[i] = convert_block(*b, labels[i], false, false);
        continue;
      }
      if (auto* d = dynamic_cast<Dropout<T>*>(&l)) {
        d->set_sequence_shard(shards_->rank(), shards_->ranks());
        continue;
      }
      if (dynamic_cast<LayerNorm<T>*>(&l)) {
        layers[i] = std::make_unique<SequenceSummed<T>>(std::move(layers[i]), tp_);
        continue;
      }
      STRATA_REQUIRE(l.num_params() == 0 && tensor_split(l) == TensorSplit::elementwise, config,
                     "sequence parallelism: ", labels[i], " (", l.name(),
                     ") cannot run on a shard of the sequence (it is not a LayerNorm, Dropout, "
                     "elementwise layer or tensor-parallel pair); run without "
                     "--sequence-parallel");
    }
  }

  LayerPtr<T> convert_block(Block<T>& block, const std::string& path, bool entry, bool exit) {
    const bool residual = block.residual(), recompute = block.recomputes();
    const std::vector<std::string> names = block.names();
    std::vector<LayerPtr<T>> inner = block.release_layers();
    std::vector<std::string> paths;
    for (const auto& n : names) paths.push_back(path + "." + n);
    convert(inner, 0, inner.size(), paths);
    LayerPtr<T> rebuilt;
    if (entry || exit)
      rebuilt = std::make_unique<SequenceEdgeBlock<T>>(std::move(inner), residual, names, shards_,
                                                       entry, exit);
    else
      rebuilt = std::make_unique<ShardedBlock<T>>(std::move(inner), residual, names);
    set_recompute(*rebuilt, recompute);
    return rebuilt;
  }

 private:
  comm::Communicator& tp_;
  std::shared_ptr<SequenceShards> shards_;
};
}  // namespace

template <class T>
void make_sequence_parallel(TensorParallelLayers<T>& model, comm::Communicator& tp) {
  if (tp.size() == 1) return;
  auto& layers = model.layers;
  const std::size_t n = layers.size();
  auto is_block = [&](std::size_t i) { return dynamic_cast<const ShardedBlock<T>*>(layers[i].get()); };
  std::size_t first = 0;
  while (first < n && !is_block(first)) ++first;
  STRATA_REQUIRE(first < n, config, "sequence parallelism: the model has no block with a "
                 "tensor-parallel pair (a Linear, elementwise layers or an attention core, a "
                 "Linear) for the sequence shards to run between; run without "
                 "--sequence-parallel");
  // To the end when the head gathers its input itself, else to the last block.
  const bool head = n > 0 && dynamic_cast<const ColumnParallelLinear<T>*>(layers[n - 1].get());
  std::size_t last = n;
  if (!head)
    while (!is_block(last - 1)) --last;
  std::vector<std::string> labels(n);
  for (std::size_t i = 0; i < n; ++i)
    labels[i] = model.names[i].empty() ? std::to_string(i) : model.names[i];
  auto shards = std::make_shared<SequenceShards>(tp);
  Converter<T> convert(tp, shards);
  for (std::size_t i = first; i < last;) {
    if (auto* b = dynamic_cast<Block<T>*>(layers[i].get())) {
      layers[i] = convert.convert_block(*b, labels[i], i == first, !head && i + 1 == last);
      ++i;
      continue;
    }
    std::size_t j = i;  // a run of top-level layers between blocks (a pair may span it)
    while (j < last && !dynamic_cast<Block<T>*>(layers[j].get())) ++j;
    convert.convert(layers, i, j, labels);
    i = j;
  }
}

#define STRATA_SEQUENCE_PARALLEL(T)                                                            \
  template class SequenceSummed<T>;                                                            \
  template class SequenceEdgeBlock<T>;                                                         \
  template void make_sequence_parallel<T>(TensorParallelLayers<T>&, comm::Communicator&);
STRATA_SEQUENCE_PARALLEL(float)
STRATA_SEQUENCE_PARALLEL(double)
#undef STRATA_SEQUENCE_PARALLEL

}  // namespace strata
