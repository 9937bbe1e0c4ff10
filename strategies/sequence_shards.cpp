#include "strategies/sequence_shards.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/capabilities.hpp"

#include <algorithm>

namespace strata {

// ------------------------------------------------------------ the shards
SequenceShards::SequenceShards(comm::Communicator& tp) : tp_(tp) {}

Shape SequenceShards::shard(const Shape& whole, const std::string& layer) const {
  STRATA_REQUIRE(whole.rank() >= 2, config, "sequence parallelism: ", layer, " sees shape ",
                 whole.str(), ", not positions of a sequence ({T, C}); run without "
                 "--sequence-parallel");
  STRATA_REQUIRE(whole[0] % ranks() == 0, config, "sequence parallelism: --tp ", ranks(),
                 " does not divide the ", whole[0], " positions of ", layer, " (shape ",
                 whole.str(), ")");
  std::vector<std::size_t> d;
  for (std::size_t k = 0; k < whole.rank(); ++k) d.push_back(whole[k]);
  d[0] /= ranks();
  return Shape(d);
}

Shape SequenceShards::whole(const Shape& shard) const {
  std::vector<std::size_t> d;
  for (std::size_t k = 0; k < shard.rank(); ++k) d.push_back(shard[k]);
  d[0] *= ranks();
  return Shape(d);
}

void SequenceShards::reserve(std::size_t bytes) {
  bytes = (bytes + sizeof(double) - 1) / sizeof(double) * sizeof(double);
  if (bytes <= bytes_) return;
  bytes_ = bytes;
  scratch_ = Kokkos::View<double*, MemSpace>("strata::SequenceShards::scratch",
                                             regions * bytes_ / sizeof(double));
}

template <class E>
E* SequenceShards::region(std::size_t k, std::size_t count) const {
  STRATA_REQUIRE(k < regions && count * sizeof(E) <= bytes_, runtime,
                 "sequence parallelism: scratch region ", k, " of ", bytes_, " bytes for ",
                 count * sizeof(E), " (reserve() was not told)");
  return reinterpret_cast<E*>(scratch_.data() + k * (bytes_ / sizeof(double)));
}

namespace {
// blocks [rank][row][w] <-> rows [row][rank w]: one position run per rank.
template <class E>
void runs_to_rows(const Context& ctx, const E* blocks, E* rows_out, std::size_t rows,
                  std::size_t w, std::size_t ranks) {
  for_range(ctx, "strata::SequenceShards::gather", rows * ranks, KOKKOS_LAMBDA(const std::size_t k) {
        const std::size_t r = k % ranks, i = k / ranks;
        const E* src = blocks + (r * rows + i) * w;
        E* dst = rows_out + i * ranks * w + r * w;
        for (std::size_t j = 0; j < w; ++j) dst[j] = src[j];
      },
      w);
}
template <class E>
void rows_to_runs(const Context& ctx, const E* rows_in, E* blocks, std::size_t rows,
                  std::size_t w, std::size_t ranks) {
  for_range(ctx, "strata::SequenceShards::scatter", rows * ranks, KOKKOS_LAMBDA(const std::size_t k) {
        const std::size_t r = k % ranks, i = k / ranks;
        const E* src = rows_in + i * ranks * w + r * w;
        E* dst = blocks + (r * rows + i) * w;
        for (std::size_t j = 0; j < w; ++j) dst[j] = src[j];
      },
      w);
}
}  // namespace

template <class E>
void SequenceShards::gather(Context& ctx, const E* shard, E* whole, std::size_t rows, std::size_t w) {
  const std::size_t n = rows * w;
  E* blocks = region<E>(0, n * ranks());
  ctx.exec.fence();
  tp_.allgather(shard, blocks, n, comm::data_type_of<E>());
  runs_to_rows<E>(ctx, blocks, whole, rows, w, ranks());
}

template <class E>
void SequenceShards::reduce_scatter(Context& ctx, const E* whole, E* shard, std::size_t rows,
                                    std::size_t w) {
  const std::size_t n = rows * w;
  E* blocks = region<E>(0, n * ranks());
  rows_to_runs<E>(ctx, whole, blocks, rows, w, ranks());
  ctx.exec.fence();
  tp_.reduce_scatter(blocks, shard, n, comm::data_type_of<E>(), comm::ReduceOp::sum);
}

template <class E>
void SequenceShards::slice(Context& ctx, const E* whole, E* shard, std::size_t rows,
                           std::size_t w) const {
  const std::size_t stride = ranks() * w, first = rank() * w;
  for_range(ctx, "strata::SequenceShards::slice", rows, KOKKOS_LAMBDA(const std::size_t i) {
        const E* src = whole + i * stride + first;
        for (std::size_t j = 0; j < w; ++j) shard[i * w + j] = src[j];
      },
      w);
}

template <class T>
std::size_t sequence_scratch_bytes(const Layer<T>& layer, std::size_t max_batch, bool exact) {
  std::size_t most = 0;
  for_each_layer(layer, [&](const Layer<T>& l) {
    if (const auto* u = dynamic_cast<const SequenceScratchUser*>(&l))
      most = std::max(most, u->sequence_scratch(max_batch, exact));
  });
  return SequenceShards::regions * most;
}

// --------------------------------------------------------- summed gradients
template <class T>
void SequenceSummedGrads<T>::bind(Vector<T> grads) {
  grads_ = grads;
  if (owner_.extent(0) != grads.extent(0))
    owner_ = VectorBuffer<T>("strata::SequenceSummed::local_grads", grads.extent(0));
  local_ = Vector<T>(owner_.data(), grads.extent(0));
}

template <class T>
void SequenceSummedGrads<T>::begin(Context& ctx) {
  outer_ = ctx.exact;
  if (outer_ == nullptr) {
    Kokkos::deep_copy(ctx.exec, local_, T(0));
    return;
  }
  // The layer adds its exact pairs into a twin of local() of its own.
  const std::size_t n = local_.extent(0);
  if (exact_.extent(0) != 2 * n)
    exact_ = Kokkos::View<double*, MemSpace>("strata::SequenceSummed::exact", 2 * n);
  Kokkos::deep_copy(ctx.exec, exact_, 0.0);
  exact_view_ = {local_.data(), exact_.data(), n, outer_->chunk};
  ctx.exact = &exact_view_;
}

template <class T>
void SequenceSummedGrads<T>::end(Context& ctx, comm::Communicator& tp) {
  ctx.exec.fence();
  if (outer_ == nullptr) {
    tp.allreduce(local_);
    add_into(ctx, "strata::SequenceSummed::add", grads_.data(), local_.data(), local_.extent(0));
    return;
  }
  ctx.exact = outer_;
  tp.allreduce(exact_);  // exact pairs: any order adds them exactly
  add_into(ctx, "strata::SequenceSummed::add_exact", exact_twin(ctx, grads_.data(), grads_.extent(0)),
           exact_.data(), exact_.extent(0));
}

#define STRATA_SEQUENCE_SHARDS(T)                                                              \
  template T* SequenceShards::region<T>(std::size_t, std::size_t) const;                       \
  template void SequenceShards::gather<T>(Context&, const T*, T*, std::size_t, std::size_t);   \
  template void SequenceShards::reduce_scatter<T>(Context&, const T*, T*, std::size_t,         \
                                                  std::size_t);                                \
  template void SequenceShards::slice<T>(Context&, const T*, T*, std::size_t, std::size_t) const; \
  template std::size_t sequence_scratch_bytes<T>(const Layer<T>&, std::size_t, bool);        \
  template class SequenceSummedGrads<T>;
STRATA_SEQUENCE_SHARDS(float)
STRATA_SEQUENCE_SHARDS(double)
#undef STRATA_SEQUENCE_SHARDS

}  // namespace strata
