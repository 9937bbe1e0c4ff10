// The denominator of a softmax, sum over j of exp(z(i, j) - mx), that the
// cross-entropy losses share (layers/loss.hpp, and the vocabulary-parallel
// loss, strategies/vocab_parallel.hpp, which adds it over the ranks holding
// parts of a row). Under --reproducible every term is added exactly
// (backends/exact_sum.hpp), so the sum is the same bits however the row's
// classes are split; else the terms in order. The terms are at most 1 (mx is
// the row's largest value), so the grid's absolute 2^-54 is far below a
// float's precision of a sum of at least 1.
#pragma once

#include "backends/exact_sum.hpp"
#include "backends/vmath.hpp"

namespace strata {

// Adds the terms of classes [first, last) of row i to the pair (hi, lo).
template <class M, class T>
KOKKOS_INLINE_FUNCTION void add_exp_terms_exact(const M& z, int i, int first, int last, T mx,
                                                double& hi, double& lo) {
  for (int j = first; j < last; ++j) {
    double h, l;
    exact_split(static_cast<double>(vmath::exp(z(i, j) - mx)), h, l);
    hi += h;
    lo += l;
  }
}

// The sum over the `width` classes of row i.
template <class M, class T>
KOKKOS_INLINE_FUNCTION T exp_sum(const M& z, int i, int width, T mx, bool exact) {
  if (exact) {
    double hi = 0, lo = 0;
    add_exp_terms_exact(z, i, 0, width, mx, hi, lo);
    return static_cast<T>(exact_value(hi, lo));
  }
  T s = 0;
  for (int j = 0; j < width; ++j) s += vmath::exp(z(i, j) - mx);
  return s;
}

}  // namespace strata
