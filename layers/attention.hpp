// Causal multi-head self-attention.
//
// The model-file type "attention" (heads = H, optional head_size, default
// width / H) builds a block of three layers, each a separate layer so that
// tensor parallelism and the per-layer breakdown see them:
//
//   qkv   Linear(width, 3 H hs)      one GEMM for the queries, keys and values
//   core  CausalAttention(H, hs)     softmax(q k^T / sqrt(hs) + causal mask) v
//   proj  Linear(H hs, width)        the output projection
//
// as PyTorch's nanoGPT CausalSelfAttention (c_attn, c_proj); parameter names
// are qkv.weight, qkv.bias, proj.weight, proj.bias under the block's name.
//
// CausalAttention: input per sample {T, 3 W} (W = H hs), each position's row
// holding [q | k | v], each of those H heads of hs values (PyTorch's
// q, k, v = c_attn(x).split(W, dim=2), then view(B, T, H, hs)); output
// {T, W}, head h in columns [h hs, (h + 1) hs). For each sample and head:
//
//   S = q k^T / sqrt(hs)           (T, T); entries above the diagonal masked
//   P = softmax over each row of S, the max subtracted first (stable)
//   y = P v
//
// backward: dv = P^T dy, dP = dy v^T, dS = P * (dP - rowsum(P * dP)),
//           dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs).
//
// P is kept for backward (saved_size: H T^2 values per sample). Two ways to
// compute, the same functions of the inputs (each sum in a fixed order, so
// neither depends on the thread count):
//   - tiles: per (sample, head) on one host thread, its GEMMs in causal
//     tiles (attn::kCausalTile) on the calling thread (Blas::gemm_in_kernel:
//     the sequential vendor BLAS, as Conv2d's samples, or under
//     --reproducible the reproducible GEMM): the host default;
//   - portable kernels (any backend): one item per (sample, head, query row)
//     for the scores and softmax, one per output value for the products.
// The portable kernels compute every product as the reproducible GEMM's
// fused multiply-add chain over the tiles' ranges (a row's chain over keys
// runs to its tile's end through the mask's zeros, which add nothing), and
// the softmax gradient's row sums in the tiles' lanes: under --reproducible
// the two ways give the same bits, so a host run and a GPU run agree. With
// the vendor BLAS they differ by rounding.
#pragma once

#include "layers/capabilities.hpp"

namespace strata {

namespace attn {
// The tiles' causal tiling: query rows (and key columns) in tiles of
// this many positions; a tile of rows meets only the keys up to its last
// row, so the GEMMs skip the tiles above the diagonal (the mask's zeros)
// and compute 62.5% of the (T, T) products at T = 128. Each output is the
// same dot product over the same nonzero terms as without tiles.
inline constexpr int kCausalTile = 32;
// f(r0, r1) for each tile [r0, r1) of t positions, in order.
template <class F>
void for_causal_tiles(int t, const F& f) {
  for (int r0 = 0; r0 < t; r0 += kCausalTile) f(r0, r0 + kCausalTile < t ? r0 + kCausalTile : t);
}
// The end of position i's tile of t positions.
KOKKOS_INLINE_FUNCTION int tile_end(int i, int t) {
  const int e = (i / kCausalTile + 1) * kCausalTile;
  return e < t ? e : t;
}
}  // namespace attn

template <class T>
class CausalAttention final : public Layer<T>, public TensorShardable, public Decodable<T> {
 public:
  CausalAttention(std::size_t heads, std::size_t head_size);

  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  // q k^T and P v (unmasked), two GEMMs per head and sample too small to batch.
  void add_costs(std::vector<LayerCost>& out) const override;
  void reserve(std::size_t batch, std::size_t in) override;
  std::size_t workspace_bytes(std::size_t max_batch) const override;
  std::size_t saved_size(std::size_t batch) const override;
  void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) override;
  void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) override;
  bool backward_reads_output() const override { return false; }
  // Tensor parallelism: a shard of whole heads is an attention of its own.
  TensorSplit tensor_split() const override { return TensorSplit::heads; }
  // Decoding: the keys and values of every earlier position (the KV cache)
  // and one row of scores per head: (2 W + H) max_positions values.
  std::size_t decode_size(std::size_t max_positions) const override;
  void decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
              std::size_t max_positions, Saved<T>& state) override;

  std::size_t heads() const { return heads_; }
  std::size_t head_size() const { return head_size_; }
  // Whether this context computes per (sample, head) in tiles (else the
  // portable kernels); set_portable(true) forces the kernels (tests compare
  // both).
  bool runs_tiles(const Context& ctx) const;
  void set_portable(bool on) { portable_ = on; }

 private:
  std::size_t positions() const { return this->in_shape_[0]; }
  std::size_t blocks(std::size_t batch) const;

  std::size_t heads_, head_size_;
  bool portable_ = false;
  VectorBuffer<T> work_;  // tiles: one (T, T) matrix per block (dP in backward)
};

// The "attention" block of a model file (layers/registry.hpp).
template <class T>
LayerPtr<T> make_attention(LayerArgs& args, const Shape& in, LayerBuild& build);

}  // namespace strata
