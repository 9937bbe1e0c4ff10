// What a layer computes per sample, as the planner's cost model
// (planner/cost_model.hpp) reads it: its forward FLOP, the values it reads
// and writes, the GEMM it runs, and what a tensor-parallel shard sums over
// its group. Each layer describes itself (Layer::add_costs), so the planner
// needs no list of layer types; a Block lists its inner layers one by one
// (their GEMMs are as small as they are).
#pragma once

#include <cstddef>

namespace strata {

// A GEMM as a layout runs it: (rows x k) times (k x n), rows per sample.
struct GemmShape {
  std::size_t rows = 0, n = 0, k = 0;
  bool operator<(const GemmShape& o) const {
    return rows != o.rows ? rows < o.rows : n != o.n ? n < o.n : k < o.k;
  }
};

// A layer over the last axis (a Linear, whole or a shard): k input and n
// output features per row, the other axes rows.
inline GemmShape features_last_gemm(std::size_t in_values, std::size_t k, std::size_t n) {
  return GemmShape{k > 0 ? in_values / k : 0, n, k};
}

struct LayerCost {
  double flops = 0;    // forward FLOP per sample (a multiply-add counts 2)
  double values = 0;   // input + output values per sample
  GemmShape gemm;      // the GEMM over a micro-batch's rows (k == 0: none)
  double small_gemms = 0;  // GEMMs per sample too small to batch (attention: 2 per head)
  double tp_forward = 0;   // values per sample summed over the tensor group in forward
  double tp_backward = 0;  // and in backward (a column-parallel shard's input gradient)
  bool in_block = false;   // one of a Block's inner layers
};

}  // namespace strata
