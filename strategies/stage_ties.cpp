#include "strategies/stage_ties.hpp"

#include "backends/launch.hpp"
#include "backends/trace.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

template <class T>
std::vector<CrossTie> find_cross_ties(const TensorParallelLayers<T>& all,
                                      const std::vector<std::size_t>& bounds,
                                      const std::vector<std::size_t>& full_sizes, int tp_rank) {
  auto stage_of = [&](std::size_t layer) {
    int s = 0;
    while (bounds[static_cast<std::size_t>(s) + 1] <= layer) ++s;
    return s;
  };
  auto name_of = [&](std::size_t k) { return all.names[k].empty() ? std::to_string(k) : all.names[k]; };
  std::vector<CrossTie> ties;
  for (std::size_t j = 0; j < all.layers.size(); ++j) {
    const std::string to = tied_to(*all.layers[j]);
    if (to.empty()) continue;
    std::size_t i = 0, full = 0;
    while (i < j && name_of(i) != to) full += full_sizes[i++];
    if (i == j || stage_of(i) == stage_of(j)) continue;
    // Where this rank's part of the weight begins in the single-rank layout
    // (a vocabulary shard of an embedding is one block of rows).
    for (const auto& info : all.layers[i]->param_table())
      if (info.name == "weight") {
        std::size_t whole = info.offset, mapped = info.shape.numel();
        if (const TensorShard<T>* s = tensor_shard(*all.layers[i])) {
          std::vector<std::size_t> index(s->shard_size());
          std::vector<std::uint8_t> replica(s->shard_size());
          s->shard_map(tp_rank, index.data(), replica.data());
          whole = index[info.offset];
          mapped = static_cast<std::size_t>(
              std::find(replica.begin() + static_cast<std::ptrdiff_t>(info.offset),
                        replica.begin() + static_cast<std::ptrdiff_t>(info.offset + mapped), kPadding) -
              (replica.begin() + static_cast<std::ptrdiff_t>(info.offset)));
        }
        ties.push_back({i, j, info.shape.numel(), info.offset, full + whole, stage_of(i), stage_of(j), mapped});
      }
  }
  return ties;
}

template <class T>
StageTies<T>::StageTies(Context& ctx, Mesh& mesh, Sequential<T>& stage,
                        std::vector<std::size_t> bounds, std::vector<CrossTie> ties)
    : ctx_(ctx), mesh_(mesh), stage_(stage), bounds_(std::move(bounds)), ties_(std::move(ties)) {
  // Buckets of a tied layer's gradient (and of the layers before it) wait
  // for the sum of both stages' gradients.
  const std::size_t p = static_cast<std::size_t>(mesh_.pp_rank());
  for (const CrossTie& t : ties_) {
    const std::size_t both[2] = {t.source, t.copy};
    for (const std::size_t layer : both)
      if (layer >= bounds_[p] && layer < bounds_[p + 1]) {
        held_ = holds_ ? std::max(held_, layer - bounds_[p]) : layer - bounds_[p];
        holds_ = true;
      }
  }
}

template <class T>
const CrossTie* StageTies<T>::copy_at(std::size_t l) const {
  for (const CrossTie& t : ties_)
    if (t.copy == bounds_[static_cast<std::size_t>(mesh_.pp_rank())] + l) return &t;
  return nullptr;
}

template <class T>
std::size_t StageTies<T>::offset(const CrossTie& t) const {
  const int p = mesh_.pp_rank();
  const std::size_t first = bounds_[static_cast<std::size_t>(p)];
  return p == t.source_stage ? stage_.param_offset(t.source - first) + t.weight_offset
                             : stage_.param_offset(t.copy - first);  // the copy's weight comes first
}

namespace {
// Tags of the tie exchanges (above every micro-batch tag).
constexpr int kTieTag = 1 << 28;
}  // namespace

template <class T>
std::vector<std::size_t> StageTies<T>::layers() const {
  const std::size_t p = static_cast<std::size_t>(mesh_.pp_rank());
  std::vector<std::size_t> out;
  for (const CrossTie& t : ties_)
    for (const std::size_t layer : {t.source, t.copy})
      if (layer >= bounds_[p] && layer < bounds_[p + 1]) out.push_back(layer - bounds_[p]);
  return out;
}

template <class T>
void StageTies<T>::share_weights() {
  const int p = mesh_.pp_rank();
  for (std::size_t k = 0; k < ties_.size(); ++k) {
    const CrossTie& t = ties_[k];
    if (p != t.source_stage && p != t.copy_stage) continue;
    Vector<T> w = stage_.params(offset(t), offset(t) + t.size);  // flat or in a pinned unit
    ctx_.exec.fence();
    if (p == t.source_stage) mesh_.pp().send(w, t.copy_stage, kTieTag + static_cast<int>(k));
    else mesh_.pp().recv(w, t.source_stage, kTieTag + static_cast<int>(k));
  }
  mesh_.pp().flush();
}

template <class T>
void StageTies<T>::sum_gradients() {
  const int p = mesh_.pp_rank();
  for (std::size_t k = 0; k < ties_.size(); ++k) {
    const CrossTie& t = ties_[k];
    if (p != t.source_stage && p != t.copy_stage) continue;
    STRATA_SPAN("comm", "tied weight gradients");
    const int peer = p == t.source_stage ? t.copy_stage : t.source_stage;
    if (stage_.numerics().exact()) {
      // The exact twins: each stage's exact sum, added exactly (the same on both).
      double* e = stage_.exact_grads().data() + 2 * offset(t);
      const std::size_t n = 2 * t.size;
      if (exact_.extent(0) < n) exact_ = Kokkos::View<double*, MemSpace>("strata::pipeline::tie_exact", n);
      double* other = exact_.data();
      ctx_.exec.fence();
      mesh_.pp().send(e, n, comm::DataType::f64, peer, kTieTag + static_cast<int>(k));
      mesh_.pp().recv(other, n, comm::DataType::f64, peer, kTieTag + static_cast<int>(k));
      add_into(ctx_, "strata::pipeline::sum_tied_exact", e, other, n);
      continue;
    }
    Vector<T> g = stage_.grads(offset(t), offset(t) + t.size);  // flat or in a gradient unit
    if (buffer_.extent(0) < t.size) buffer_ = VectorBuffer<T>("strata::pipeline::tie", t.size);
    Vector<T> other(buffer_.data(), t.size);
    ctx_.exec.fence();
    // Both send, then both receive (sends are buffered) and add: the same
    // two terms on both stages, so the sums are bitwise equal.
    mesh_.pp().send(g, peer, kTieTag + static_cast<int>(k));
    mesh_.pp().recv(other, peer, kTieTag + static_cast<int>(k));
    add_into(ctx_, "strata::pipeline::sum_tied", g.data(), other.data(), t.size);
  }
  mesh_.pp().flush();
}

template <class T>
double StageTies<T>::copy_deviation() {
  double worst = 0;
  const int p = mesh_.pp_rank();
  for (std::size_t k = 0; k < ties_.size(); ++k) {
    const CrossTie& t = ties_[k];
    if (p != t.source_stage && p != t.copy_stage) continue;
    std::vector<T> mine(t.size), theirs(t.size);
    Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(mine.data(), t.size),
                      stage_.params(offset(t), offset(t) + t.size));
    const int peer = p == t.source_stage ? t.copy_stage : t.source_stage;
    mesh_.pp().send(mine.data(), t.size, comm::data_type_of<T>(), peer, kTieTag + 100 + static_cast<int>(k));
    mesh_.pp().recv(theirs.data(), t.size, comm::data_type_of<T>(), peer, kTieTag + 100 + static_cast<int>(k));
    for (std::size_t i = 0; i < t.size; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(mine[i]) - static_cast<double>(theirs[i])));
  }
  mesh_.pp().flush();
  return mesh_.world().allreduce_value(worst, comm::ReduceOp::max);
}


template std::vector<CrossTie> find_cross_ties<float>(const TensorParallelLayers<float>&,
                                                      const std::vector<std::size_t>&,
                                                      const std::vector<std::size_t>&, int);
template std::vector<CrossTie> find_cross_ties<double>(const TensorParallelLayers<double>&,
                                                       const std::vector<std::size_t>&,
                                                       const std::vector<std::size_t>&, int);
template class StageTies<float>;
template class StageTies<double>;

}  // namespace strata
