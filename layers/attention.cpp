#include "layers/attention.hpp"

#include "backends/error.hpp"
#include "backends/host_clones.hpp"
#include "backends/launch.hpp"
#include "backends/vmath.hpp"
#include "layers/block.hpp"
#include "layers/linear.hpp"
#include "layers/registry.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

namespace attn {

// At most this many blocks of (sample, head) items on the tiles, each
// with its own (T, T) workspace (as Conv2d's samples: more than threads, for
// balance, and a function of the batch alone).
constexpr std::size_t kMaxBlocks = 32;

// Sums and maxima over a row in kLanes interleaved partial results, combined
// in a fixed order: the same bits on every backend and build (no compiler
// reassociation is needed), while the loops that compute the values (the
// exponentials, the products) have no dependence between iterations and
// vectorize.
constexpr int kLanes = 8;

// Row i of a causal score matrix, in place: p_j = exp(s_j - max) / sum for
// j <= i, 0 for i < j < n (n: the row's length, or where its readers stop).
template <class T>
KOKKOS_INLINE_FUNCTION void causal_softmax_row(T* s, int i, int n) {
  T mx = s[0];
  {
    T m[kLanes];
    for (int l = 0; l < kLanes; ++l) m[l] = s[0];
    int j = 0;
    for (; j + kLanes <= i + 1; j += kLanes)
      for (int l = 0; l < kLanes; ++l) m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
    for (int l = 0; l < kLanes; ++l) mx = m[l] > mx ? m[l] : mx;
    for (; j <= i; ++j) mx = s[j] > mx ? s[j] : mx;
  }
  for (int j = 0; j <= i; ++j) s[j] = vmath::exp(s[j] - mx);
  T part[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= i + 1; j += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += s[j + l];
  T sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += part[l];
  for (; j <= i; ++j) sum += s[j];
  const T inv = T(1) / sum;
  for (int k = 0; k <= i; ++k) s[k] *= inv;
  for (int k = i + 1; k < n; ++k) s[k] = T(0);
}

// dS from row i of P and of dP (in place in d): d_j = p_j (d_j - sum_k p_k d_k)
// for j <= i, 0 for i < j < n.
template <class T>
KOKKOS_INLINE_FUNCTION void softmax_grad_row(const T* p, T* d, int i, int n) {
  T part[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= i + 1; j += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += p[j + l] * d[j + l];
  T dot = 0;
  for (int l = 0; l < kLanes; ++l) dot += part[l];
  for (; j <= i; ++j) dot += p[j] * d[j];
  for (int k = 0; k <= i; ++k) d[k] = p[k] * (d[k] - dot);
  for (int k = i + 1; k < n; ++k) d[k] = T(0);
}

// The shapes of one call: B samples, H heads of hs values, T positions;
// input rows of 3 W values per position (W = H hs), output rows of W.
struct Dims {
  int batch, heads, hs, t, w;
  KOKKOS_INLINE_FUNCTION std::size_t plane() const { return std::size_t(t) * t; }
};

// ---------------------------------------------------------------- portable

template <class T>
void forward_portable(Context& ctx, const Dims d, ConstMatrix<T> x, Matrix<T> y, T* probs,
                      T scale) {
  const std::size_t rows = std::size_t(d.batch) * d.heads * d.t;
  for_range(ctx, "strata::CausalAttention::scores", rows, KOKKOS_LAMBDA(const std::size_t r) {
        const int i = static_cast<int>(r % d.t);
        const std::size_t bh = r / d.t;
        const int h = static_cast<int>(bh % d.heads), b = static_cast<int>(bh / d.heads);
        const T* xb = &x(b, 0);
        const T* q = xb + std::size_t(i) * 3 * d.w + h * d.hs;
        T* s = probs + r * d.t;
        for (int j = 0; j <= i; ++j) {
          const T* k = xb + std::size_t(j) * 3 * d.w + d.w + h * d.hs;
          T acc = 0;
          for (int e = 0; e < d.hs; ++e) acc = kmath::fma(q[e], k[e], acc);
          s[j] = scale * acc;
        }
        causal_softmax_row(s, i, d.t);
      },
      std::size_t(d.t) * d.hs);
  const std::size_t outs = std::size_t(d.batch) * d.t * d.w;
  for_range(ctx, "strata::CausalAttention::values", outs, KOKKOS_LAMBDA(const std::size_t o) {
        const int c = static_cast<int>(o % d.w);
        const std::size_t bi = o / d.w;
        const int i = static_cast<int>(bi % d.t), b = static_cast<int>(bi / d.t);
        const int h = c / d.hs;
        const T* p = probs + ((std::size_t(b) * d.heads + h) * d.t + i) * d.t;
        const T* v = &x(b, 0) + 2 * d.w + c;
        T acc = 0;  // to the tile's end: P is 0 beyond the diagonal
        for (int j = 0; j < tile_end(i, d.t); ++j) acc = kmath::fma(p[j], v[std::size_t(j) * 3 * d.w], acc);
        y(b, std::size_t(i) * d.w + c) = acc;
      },
      d.t);
}

template <class T>
void backward_portable(Context& ctx, const Dims d, ConstMatrix<T> x, ConstMatrix<T> dy,
                       Matrix<T> dx, T* probs, T scale) {
  const std::size_t outs = std::size_t(d.batch) * d.t * d.w;
  // dv(j) = sum over i >= j of P(i, j) dy(i): reads P before it becomes dS.
  for_range(ctx, "strata::CausalAttention::dv", outs, KOKKOS_LAMBDA(const std::size_t o) {
        const int c = static_cast<int>(o % d.w);
        const std::size_t bj = o / d.w;
        const int j = static_cast<int>(bj % d.t), b = static_cast<int>(bj / d.t);
        const T* p = probs + (std::size_t(b) * d.heads + c / d.hs) * d.plane() + j;
        const T* g = &dy(b, 0) + c;
        T acc = 0;
        for (int i = j; i < d.t; ++i) acc = kmath::fma(p[std::size_t(i) * d.t], g[std::size_t(i) * d.w], acc);
        dx(b, std::size_t(j) * 3 * d.w + 2 * d.w + c) = acc;
      },
      d.t);
  // dS in place of P, one query row per item (the dot products dP(i, j) are
  // computed twice: once for the row sum, once for dS; no (T, T) workspace);
  // the row sum in softmax_grad_row's lanes and order.
  const std::size_t rows = std::size_t(d.batch) * d.heads * d.t;
  for_range(ctx, "strata::CausalAttention::dscores", rows, KOKKOS_LAMBDA(const std::size_t r) {
        const int i = static_cast<int>(r % d.t);
        const std::size_t bh = r / d.t;
        const int h = static_cast<int>(bh % d.heads), b = static_cast<int>(bh / d.heads);
        const T* g = &dy(b, 0) + std::size_t(i) * d.w + h * d.hs;
        const T* xb = &x(b, 0) + 2 * d.w + h * d.hs;
        T* p = probs + r * d.t;
        auto dp = [&](const int j) {
          const T* v = xb + std::size_t(j) * 3 * d.w;
          T acc = 0;
          for (int e = 0; e < d.hs; ++e) acc = kmath::fma(g[e], v[e], acc);
          return acc;
        };
        T part[kLanes] = {};
        const int lanes_end = (i + 1) / kLanes * kLanes;
        for (int j = 0; j < lanes_end; ++j) part[j % kLanes] += p[j] * dp(j);
        T dot = 0;
        for (int l = 0; l < kLanes; ++l) dot += part[l];
        for (int j = lanes_end; j <= i; ++j) dot += p[j] * dp(j);
        for (int j = 0; j <= i; ++j) p[j] = p[j] * (dp(j) - dot);
      },
      2 * std::size_t(d.t) * d.hs);
  // dq(t) = scale sum over j <= t of dS(t, j) k(j); dk(t) = scale sum over i >= t of dS(i, t) q(i).
  for_range(ctx, "strata::CausalAttention::dqk", outs, KOKKOS_LAMBDA(const std::size_t o) {
        const int c = static_cast<int>(o % d.w);
        const std::size_t bt = o / d.w;
        const int t = static_cast<int>(bt % d.t), b = static_cast<int>(bt / d.t);
        const T* ds = probs + (std::size_t(b) * d.heads + c / d.hs) * d.plane();
        const T* xb = &x(b, 0) + c;
        T aq = 0, ak = 0;  // aq to t's tile's end: dS is 0 beyond the diagonal
        for (int j = 0; j < tile_end(t, d.t); ++j)
          aq = kmath::fma(ds[std::size_t(t) * d.t + j], xb[std::size_t(j) * 3 * d.w + d.w], aq);
        for (int i = t; i < d.t; ++i) ak = kmath::fma(ds[std::size_t(i) * d.t + t], xb[std::size_t(i) * 3 * d.w], ak);
        T* out = &dx(b, 0) + std::size_t(t) * 3 * d.w + c;
        out[0] = scale * aq;
        out[d.w] = scale * ak;
      },
      2 * std::size_t(d.t));
}

// ---------------------------------------------------------------- tiles
// One (sample, head) at a time per block, on the calling host thread.

// The rows r0..r1 of a tile of P (rows of t values): the forward's softmax,
// the backward's dS in place of dP in ds. Host functions, also compiled as
// an x86-64-v3 clone (backends/host_clones.hpp): the same bits from each,
// the exponentials and products in AVX2 lanes where the CPU has them.
#define STRATA_ATTENTION_TILE_ROWS(T)                                                       \
  STRATA_HOST_CLONES_FLAT void softmax_tile(T* p, int t, int r0, int r1) {                  \
    for (int i = r0; i < r1; ++i) causal_softmax_row(p + std::size_t(i) * t, i, r1);        \
  }                                                                                         \
  STRATA_HOST_CLONES_FLAT void softmax_grad_tile(const T* p, T* ds, int t, int r0, int r1) { \
    for (int i = r0; i < r1; ++i)                                                           \
      softmax_grad_row(p + std::size_t(i) * t, ds + std::size_t(i) * t, i, r1);             \
  }
STRATA_ATTENTION_TILE_ROWS(float)
STRATA_ATTENTION_TILE_ROWS(double)
#undef STRATA_ATTENTION_TILE_ROWS

template <class T>
void forward_tiles(Context& ctx, const Dims d, std::size_t blocks, ConstMatrix<T> x, Matrix<T> y,
                   T* probs, T scale) {
  const std::size_t items = std::size_t(d.batch) * d.heads;
  const std::size_t per = (items + blocks - 1) / blocks;
  const Blas& blas = ctx.blas;
  const int ld = 3 * d.w;
  for_host_items(ctx, "strata::CausalAttention::forward_tiles", blocks, [=, &blas](std::size_t blk) {
        for (std::size_t it = blk * per; it < std::min(items, (blk + 1) * per); ++it) {
          const int b = static_cast<int>(it / d.heads), h = static_cast<int>(it % d.heads);
          const T* q = &x(b, 0) + h * d.hs;
          T* p = probs + it * d.plane();
          T* out = &y(b, 0) + h * d.hs;
          for_causal_tiles(d.t, [&](const int r0, const int r1) {
            const int m = r1 - r0;
            T* pr = p + std::size_t(r0) * d.t;
            // S(r0:r1, 0:r1) = scale Q(r0:r1) K(0:r1)^T; the softmax zeros
            // each row from the diagonal to the tile's end (r1): the GEMMs of
            // forward and backward read no further.
            blas.gemm_in_kernel(Op::N, Op::T, m, r1, d.hs, scale, q + std::size_t(r0) * ld, ld,
                                q + d.w, ld, T(0), pr, d.t);
            softmax_tile(p, d.t, r0, r1);
            // Y(r0:r1) = P(r0:r1, 0:r1) V(0:r1).
            blas.gemm_in_kernel(Op::N, Op::N, m, d.hs, r1, T(1), pr, d.t, q + 2 * d.w, ld, T(0),
                                out + std::size_t(r0) * d.w, d.w);
          });
        }
      },
      per * d.plane() * d.hs * 2);
}

template <class T>
void backward_tiles(Context& ctx, const Dims d, std::size_t blocks, ConstMatrix<T> x,
                    ConstMatrix<T> dy, Matrix<T> dx, const T* probs, T* work, T scale) {
  const std::size_t items = std::size_t(d.batch) * d.heads;
  const std::size_t per = (items + blocks - 1) / blocks;
  const Blas& blas = ctx.blas;
  const int ld = 3 * d.w;
  for_host_items(ctx, "strata::CausalAttention::backward_tiles", blocks, [=, &blas](std::size_t blk) {
        T* ds = work + blk * d.plane();
        for (std::size_t it = blk * per; it < std::min(items, (blk + 1) * per); ++it) {
          const int b = static_cast<int>(it / d.heads), h = static_cast<int>(it % d.heads);
          const T* q = &x(b, 0) + h * d.hs;
          const T* g = &dy(b, 0) + h * d.hs;
          T* dq = &dx(b, 0) + h * d.hs;
          const T* p = probs + it * d.plane();
          // dV(c0:c1) = P(c0:T, c0:c1)^T dY(c0:T) (P is 0 above the diagonal).
          for_causal_tiles(d.t, [&](const int c0, const int c1) {
            const std::size_t c = std::size_t(c0);
            blas.gemm_in_kernel(Op::T, Op::N, c1 - c0, d.hs, d.t - c0, T(1), p + c * d.t + c, d.t,
                                g + c * d.w, d.w, T(0), dq + 2 * d.w + c * ld, ld);
          });
          // Per tile of rows: dP(r0:r1, 0:r1) = dY(r0:r1) V(0:r1)^T, dS in
          // its place (zero from the diagonal to r1), dQ(r0:r1) = scale dS(r0:r1, 0:r1) K(0:r1).
          for_causal_tiles(d.t, [&](const int r0, const int r1) {
            const std::size_t r = std::size_t(r0);
            blas.gemm_in_kernel(Op::N, Op::T, r1 - r0, r1, d.hs, T(1), g + r * d.w, d.w,
                                q + 2 * d.w, ld, T(0), ds + r * d.t, d.t);
            softmax_grad_tile(p, ds, d.t, r0, r1);
            blas.gemm_in_kernel(Op::N, Op::N, r1 - r0, d.hs, r1, scale, ds + r * d.t, d.t, q + d.w,
                                ld, T(0), dq + r * ld, ld);
          });
          // dK(c0:c1) = scale dS(c0:T, c0:c1)^T Q(c0:T).
          for_causal_tiles(d.t, [&](const int c0, const int c1) {
            const std::size_t c = std::size_t(c0);
            blas.gemm_in_kernel(Op::T, Op::N, c1 - c0, d.hs, d.t - c0, scale, ds + c * d.t + c, d.t,
                                q + c * ld, ld, T(0), dq + d.w + c * ld, ld);
          });
        }
      },
      per * d.plane() * d.hs * 4);
}

}  // namespace attn

using attn::Dims;

template <class T>
CausalAttention<T>::CausalAttention(std::size_t heads, std::size_t head_size)
    : heads_(heads), head_size_(head_size) {
  STRATA_REQUIRE(heads > 0 && head_size > 0, config, "CausalAttention(", heads, ", ", head_size,
                 "): the head count and size must be positive");
}

template <class T>
std::string CausalAttention<T>::name() const {
  return "CausalAttention(heads=" + std::to_string(heads_) + ", head_size=" +
         std::to_string(head_size_) + ")";
}

template <class T>
Shape CausalAttention<T>::output_shape(const Shape& in) const {
  const std::size_t w = heads_ * head_size_;
  STRATA_REQUIRE(in.rank() == 2 && in.back() == 3 * w, config, name(), " takes shape {T, ", 3 * w,
                 "} (queries, keys and values of ", heads_, " heads of ", head_size_,
                 "), but gets shape ", in.str());
  STRATA_REQUIRE(in[0] <= (std::size_t(1) << 15), config, name(), ": ", in[0],
                 " positions; at most 32768 (the (T, T) attention matrix is kept per head)");
  return Shape{in[0], w};
}

template <class T>
void CausalAttention<T>::add_costs(std::vector<LayerCost>& out) const {
  // Nominal (unmasked) products: the portable kernels compute the lower
  // triangle, the causal tiles 62.5% of the square at T = 128.
  const double t = static_cast<double>(positions());
  out.push_back(this->cost(4.0 * static_cast<double>(heads_ * head_size_) * t * t));
  out.back().small_gemms = 2.0 * static_cast<double>(heads_);
}

template <class T>
bool CausalAttention<T>::runs_tiles(const Context& ctx) const {
  return !portable_ && ctx.blas.gemm_in_kernels();
}

template <class T>
std::size_t CausalAttention<T>::blocks(std::size_t batch) const {
  return std::max<std::size_t>(1, std::min(batch * heads_, attn::kMaxBlocks));
}

template <class T>
std::size_t CausalAttention<T>::saved_size(std::size_t batch) const {
  return batch * heads_ * positions() * positions();
}

template <class T>
std::size_t CausalAttention<T>::workspace_bytes(std::size_t max_batch) const {
  // Any host build may run the tiles (under --reproducible without a
  // sequential vendor BLAS).
  return host_kernels ? blocks(max_batch) * positions() * positions() * sizeof(T) : 0;
}

template <class T>
void CausalAttention<T>::reserve(std::size_t batch, std::size_t) {
  const std::size_t n = workspace_bytes(batch) / sizeof(T);
  if (work_.extent(0) < n) work_ = VectorBuffer<T>("strata::CausalAttention::work", n);
}

template <class T>
void CausalAttention<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  const Dims d{static_cast<int>(x.extent(0)), static_cast<int>(heads_),
               static_cast<int>(head_size_), static_cast<int>(positions()),
               static_cast<int>(heads_ * head_size_)};
  if (d.batch == 0) return;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_size_)));
  T* probs = saved.scratch.data();
  if (runs_tiles(ctx))
    attn::forward_tiles(ctx, d, blocks(x.extent(0)), x, y, probs, scale);
  else
    attn::forward_portable(ctx, d, x, y, probs, scale);
}

template <class T>
void CausalAttention<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  if (dx.data() == nullptr) return;  // no parameters: nothing else to do
  const Dims d{static_cast<int>(dy.extent(0)), static_cast<int>(heads_),
               static_cast<int>(head_size_), static_cast<int>(positions()),
               static_cast<int>(heads_ * head_size_)};
  if (d.batch == 0) return;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_size_)));
  T* probs = saved.scratch.data();
  if (runs_tiles(ctx)) {
    STRATA_REQUIRE(work_.extent(0) >= blocks(dy.extent(0)) * d.plane(), runtime, name(),
                   ": backward before reserve() for this batch");
    attn::backward_tiles(ctx, d, blocks(dy.extent(0)), saved.x, dy, dx, probs, work_.data(), scale);
  } else {
    attn::backward_portable(ctx, d, saved.x, dy, dx, probs, scale);
  }
}

template <class T>
std::size_t CausalAttention<T>::decode_size(std::size_t max_positions) const {
  return (2 * heads_ * head_size_ + heads_) * max_positions;
}

namespace attn {
// One position of decoding: its key and value into the cache, then per head
// the causal softmax over positions 0..p and the weighted sum of the values.
template <class T>
void decode_one(Context& ctx, const Dims d, ConstMatrix<T> x, Matrix<T> y, T* cache,
                std::size_t max_positions, std::size_t position, T scale) {
  T* keys = cache;
  T* values = cache + max_positions * d.w;
  T* scores = values + max_positions * d.w;
  const std::size_t at = position * d.w;
  for_range(ctx, "strata::CausalAttention::decode_kv", d.w, KOKKOS_LAMBDA(const std::size_t c) {
        keys[at + c] = x(0, d.w + c);
        values[at + c] = x(0, 2 * d.w + c);
      });
  const int p = static_cast<int>(position);
  for_range(ctx, "strata::CausalAttention::decode", d.heads, KOKKOS_LAMBDA(const int h) {
        T* s = scores + std::size_t(h) * max_positions;
        for (int j = 0; j <= p; ++j) {
          const T* k = keys + std::size_t(j) * d.w + h * d.hs;
          T acc = 0;
          for (int e = 0; e < d.hs; ++e) acc += x(0, h * d.hs + e) * k[e];
          s[j] = acc * scale;
        }
        causal_softmax_row(s, p, p + 1);
        for (int e = 0; e < d.hs; ++e) {
          T acc = 0;
          for (int j = 0; j <= p; ++j) acc += s[j] * values[std::size_t(j) * d.w + h * d.hs + e];
          y(0, h * d.hs + e) = acc;
        }
      },
      (position + 1) * d.hs * 2);
}
}  // namespace attn

template <class T>
void CausalAttention<T>::decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
                                std::size_t max_positions, Saved<T>& state) {
  const std::size_t w = heads_ * head_size_;
  STRATA_REQUIRE(position < max_positions && state.scratch.extent(0) >= decode_size(max_positions),
                 config, name(), ": position ", position,
                 " is beyond the ", max_positions, " positions the decoder was made for");
  const Dims d{1, static_cast<int>(heads_), static_cast<int>(head_size_), 0, static_cast<int>(w)};
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_size_)));
  attn::decode_one(ctx, d, x, y, state.scratch.data(), max_positions, position, scale);
}

template <class T>
LayerPtr<T> make_attention(LayerArgs& args, const Shape& in, LayerBuild&) {
  STRATA_REQUIRE(in.rank() == 2, config, args.where(),
                 ": attention takes shape {T, width}, but gets shape ", in.str());
  const std::size_t width = in.back(), heads = args.positive("heads");
  STRATA_REQUIRE(args.has("head_size") || width % heads == 0, config, args.at("heads"), ": ",
                 heads, " heads do not divide the width ", width,
                 " (give head_size, or a head count that divides it)");
  const std::size_t hs = args.positive("head_size", width / heads);
  const bool bias = args.flag("bias", true);
  const double sd = args.number("std", 0.0);
  const double proj_sd = args.number("proj_std", sd);
  STRATA_REQUIRE(sd >= 0 && proj_sd >= 0, config, args.where(),
                 ": std and proj_std must be >= 0 (0: the model's initialisation)");
  std::vector<LayerPtr<T>> inner;
  inner.push_back(std::make_unique<Linear<T>>(width, 3 * heads * hs, bias, sd));
  inner.push_back(std::make_unique<CausalAttention<T>>(heads, hs));
  inner.push_back(std::make_unique<Linear<T>>(heads * hs, width, bias, proj_sd));
  return std::make_unique<Block<T>>(std::move(inner), false,
                                    std::vector<std::string>{"qkv", "core", "proj"});
}

template class CausalAttention<float>;
template class CausalAttention<double>;
template LayerPtr<float> make_attention<float>(LayerArgs&, const Shape&, LayerBuild&);
template LayerPtr<double> make_attention<double>(LayerArgs&, const Shape&, LayerBuild&);

}  // namespace strata
