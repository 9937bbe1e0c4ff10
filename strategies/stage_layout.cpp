#include "strategies/stage_layout.hpp"

#include "backends/error.hpp"
#include "backends/host_copy.hpp"
#include "strategies/tensor_parallel.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace strata {

template <class T>
StageLayout<T>::StageLayout(Mesh& mesh, Sequential<T>& stage, const StageTies<T>& ties,
                            std::vector<std::size_t> bounds, std::vector<std::size_t> full_sizes,
                            const ShardMap* shards)
    : mesh_(mesh), stage_(stage), ties_(ties), bounds_(std::move(bounds)),
      full_sizes_(std::move(full_sizes)), shards_(shards) {}

template <class T>
std::vector<T> StageLayout<T>::gather(const std::vector<T>& stage_values) {
  // This stage's layers in single-rank layout (tensor shards gathered).
  std::vector<T> mine;
  comm::Communicator& tp = mesh_.tp();
  for (std::size_t i = 0; i < stage_.num_layers(); ++i) {
    const T* values = stage_values.data() + stage_.param_offset(i);
    std::size_t n = stage_.layer(i).num_params();
    if (const CrossTie* t = ties_.copy_at(i)) {  // a copy of a tied weight: the original is in the layout
      values += t->size;
      n -= t->size;
    }
    if (const TensorShard<T>* sharded = tensor_shard(stage_.layer(i))) {
      std::vector<T> blocks(n * static_cast<std::size_t>(tp.size()));
      tp.allgather(values, blocks.data(), n, comm::data_type_of<T>());
      std::vector<T> full(sharded->full_num_params());
      assemble_shards(*sharded, tp.size(), blocks.data(), full.data());
      mine.insert(mine.end(), full.begin(), full.end());
    } else {
      mine.insert(mine.end(), values, values + n);
    }
  }
  // The stages in order (padded to the longest for the allgather).
  comm::Communicator& pp = mesh_.pp();
  const auto S = static_cast<std::size_t>(pp.size());
  std::vector<std::int64_t> lengths(S);
  const auto len = static_cast<std::int64_t>(mine.size());
  pp.allgather(&len, lengths.data(), 1, comm::DataType::i64);
  const auto longest = static_cast<std::size_t>(*std::max_element(lengths.begin(), lengths.end()));
  mine.resize(longest);
  std::vector<T> blocks(longest * S);
  pp.allgather(mine.data(), blocks.data(), longest, comm::data_type_of<T>());
  std::vector<T> full;
  for (std::size_t s = 0; s < S; ++s)
    full.insert(full.end(), blocks.begin() + s * longest,
                blocks.begin() + s * longest + lengths[s]);
  return full;
}

template <class T>
std::vector<T> StageLayout<T>::scatter(const std::vector<T>& full) const {
  std::size_t total = 0, offset = 0;
  const std::size_t first = bounds_[mesh_.pp_rank()];
  for (std::size_t i = 0; i < full_sizes_.size(); ++i) {
    if (i == first) offset = total;
    total += full_sizes_[i];
  }
  STRATA_REQUIRE(full.size() == total, config, "model parallel: ", full.size(),
                 " values given for a model of ", total, " parameters");
  std::vector<T> mine(stage_.num_params());
  for (std::size_t i = 0; i < stage_.num_layers(); ++i) {
    T* shard = mine.data() + stage_.param_offset(i);
    const T* whole = full.data() + offset;
    std::size_t copied = 0;  // a copy of a tied weight: from the original's place
    if (const CrossTie* t = ties_.copy_at(i)) {
      std::copy(full.data() + t->full_offset, full.data() + t->full_offset + t->mapped, shard);
      std::fill(shard + t->mapped, shard + t->size, T(0));  // a padded vocabulary's rows
      copied = t->size;
    }
    if (const TensorShard<T>* sharded = tensor_shard(stage_.layer(i)))
      extract_shard(*sharded, mesh_.tp_rank(), whole, shard + copied);
    else
      std::copy(whole, whole + stage_.layer(i).num_params() - copied, shard + copied);
    offset += full_sizes_[first + i];
  }
  return mine;
}

template <class T>
std::vector<T> StageLayout<T>::stage_state(Vector<T> state) {
  std::vector<T> mine = copy_to_host<T>(state);
  if (shards_) {  // every rank's shard
    comm::Communicator& dp = mesh_.dp();
    std::vector<T> all(mine.size() * static_cast<std::size_t>(dp.size()));
    dp.allgather(mine.data(), all.data(), mine.size(), comm::data_type_of<T>());
    return shards_->to_flat(all);
  }
  return mine;
}

template <class T>
void StageLayout<T>::set_stage_state(Vector<T> state, const std::vector<T>& stage_values) const {
  if (shards_) {
    copy_from_host<T>(shards_->to_shard(stage_values, mesh_.dp_rank()), state);
    return;
  }
  copy_from_host<T>(stage_values, state);
}

template <class T>
std::size_t StageLayout<T>::full_num_params() const {
  std::size_t n = 0;
  for (std::size_t s : full_sizes_) n += s;
  return n;
}

template <class T>
std::map<std::string, std::vector<double>> StageLayout<T>::gather_buffers(
    const std::vector<BufferInfo>& model_buffers) {
  // Every buffer's values on the ranks whose stage holds it (identical on
  // the replicas of a stage), -inf elsewhere: a max over the world fills in
  // every rank's copy.
  std::size_t total = 0;
  for (const auto& b : model_buffers) total += b.size;
  std::vector<double> flat(total, -std::numeric_limits<double>::infinity());
  const auto mine = stage_.read_buffers();
  std::size_t at = 0;
  for (const auto& b : model_buffers) {
    if (const auto it = mine.find(b.name); it != mine.end()) {
      STRATA_REQUIRE(it->second.size() == b.size, config, "buffer '", b.name, "' has ",
                     it->second.size(), " values on this stage, the model's ", b.size);
      std::copy(it->second.begin(), it->second.end(), flat.begin() + static_cast<std::ptrdiff_t>(at));
    }
    at += b.size;
  }
  if (total > 0)
    mesh_.world().allreduce(flat.data(), flat.data(), total, comm::DataType::f64, comm::ReduceOp::max);
  std::map<std::string, std::vector<double>> all;
  at = 0;
  for (const auto& b : model_buffers) {
    for (std::size_t k = 0; k < b.size; ++k)
      STRATA_REQUIRE(flat[at + k] != -std::numeric_limits<double>::infinity(), runtime,
                     "model parallel: no stage holds buffer '", b.name, "'");
    all[b.name].assign(flat.begin() + static_cast<std::ptrdiff_t>(at),
                       flat.begin() + static_cast<std::ptrdiff_t>(at + b.size));
    at += b.size;
  }
  return all;
}

template <class T>
void StageLayout<T>::scatter_buffers(const std::map<std::string, std::vector<double>>& values) {
  std::map<std::string, std::vector<double>> mine;
  for (const auto& entry : stage_.read_buffers()) {
    const auto it = values.find(entry.first);
    STRATA_REQUIRE(it != values.end(), config, "no values for buffer '", entry.first, "'");
    mine[entry.first] = it->second;
  }
  stage_.write_buffers(mine);
}

template <class T>
std::vector<std::pair<std::size_t, std::size_t>> StageLayout<T>::written(std::size_t lo,
                                                                          std::size_t hi) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  const bool tp_root = mesh_.tp_rank() == 0;
  const std::size_t first = bounds_[static_cast<std::size_t>(mesh_.pp_rank())];
  std::size_t full_offset = 0;
  for (std::size_t i = 0; i < first; ++i) full_offset += full_sizes_[i];
  std::vector<std::size_t> index;
  for (std::size_t l = 0; l < stage_.num_layers(); ++l) {
    const std::size_t off = stage_.param_offset(l), count = stage_.layer(l).num_params();
    const std::size_t a = std::max(lo, off), b = std::min(hi, off + count);
    if (a < b) {
      // A copy of a tied weight leads the layer's values: saved by the original's stage.
      const std::size_t copied = ties_.copy_at(l) ? ties_.copy_at(l)->size : 0;
      index.assign(count, kReplica);
      if (const TensorShard<T>* sharded = tensor_shard(stage_.layer(l))) {
        const std::vector<std::size_t> mine = checkpoint_index(*sharded, mesh_.tp_rank());
        std::copy(mine.begin(), mine.end(), index.begin() + static_cast<std::ptrdiff_t>(copied));
      } else if (tp_root) {  // whole and replicated over the tensor group
        for (std::size_t k = copied; k < count; ++k) index[k] = k - copied;
      }
      for (std::size_t k = a; k < b; ++k)
        if (index[k - off] != kReplica) out.emplace_back(k, full_offset + index[k - off]);
    }
    full_offset += full_sizes_[first + l];
  }
  return out;
}

template class StageLayout<float>;
template class StageLayout<double>;

}  // namespace strata
