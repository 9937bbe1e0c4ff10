// Four lanes of doubles, added lane by lane: the four accumulators of a
// host sum (backends/segment_sums.hpp: terms i, i + 1, i + 2, i + 3 of a run
// into accumulators 0, 1, 2, 3) as one vector, for terms that can compute
// four at once (a Term's `four`). GCC's and Clang's vector extension on host
// compilers (one AVX2 instruction per operation in an x86-64-v3 clone, two
// SSE2 ones in a baseline build); elsewhere (nvcc, hipcc: code they never
// run on the device) four scalars. Each lane is IEEE arithmetic of its own,
// in the order the scalar accumulators take their terms: the same bits.
//
//   Lanes4 a{}, t;                    // zeros
//   load_wide(t, p);                  // t[l] = double(p[l])
//   a += t * t;                       // lane l: a[l] += t[l] * t[l]
//   double first = a[0];
#pragma once

#include <cstddef>

namespace strata {

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(__HIPCC__)
using Lanes4 = double __attribute__((vector_size(32)));
using Lanes4f = float __attribute__((vector_size(16)));
// (Four doubles go out by reference: a 32-byte vector passed by value in a
// baseline build draws GCC's ABI note, -Wpsabi.)
inline Lanes4f load4(const float* p) {
  Lanes4f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void widen(Lanes4& out, Lanes4f v) { out = __builtin_convertvector(v, Lanes4); }
inline void load_wide(Lanes4& out, const float* p) { widen(out, load4(p)); }
inline void load_wide(Lanes4& out, const double* p) { __builtin_memcpy(&out, p, sizeof out); }
#else
// Four scalars with the operations the sums use.
template <class T>
struct Lanes4Of {
  T v[4];
  T& operator[](std::size_t l) { return v[l]; }
  T operator[](std::size_t l) const { return v[l]; }
};
#define STRATA_LANES4_OP(op)                                                       \
  template <class T>                                                               \
  inline Lanes4Of<T> operator op(Lanes4Of<T> a, Lanes4Of<T> b) {                   \
    for (std::size_t l = 0; l < 4; ++l) a.v[l] = a.v[l] op b.v[l];                 \
    return a;                                                                      \
  }                                                                                \
  template <class T>                                                               \
  inline Lanes4Of<T> operator op(Lanes4Of<T> a, T b) {                             \
    for (std::size_t l = 0; l < 4; ++l) a.v[l] = a.v[l] op b;                      \
    return a;                                                                      \
  }                                                                                \
  template <class T>                                                               \
  inline Lanes4Of<T>& operator op##=(Lanes4Of<T>& a, Lanes4Of<T> b) {              \
    return a = a op b;                                                             \
  }
STRATA_LANES4_OP(+)
STRATA_LANES4_OP(-)
STRATA_LANES4_OP(*)
#undef STRATA_LANES4_OP
using Lanes4 = Lanes4Of<double>;
using Lanes4f = Lanes4Of<float>;
inline Lanes4f load4(const float* p) { return Lanes4f{{p[0], p[1], p[2], p[3]}}; }
inline void widen(Lanes4& out, Lanes4f v) { out = Lanes4{{v[0], v[1], v[2], v[3]}}; }
inline void load_wide(Lanes4& out, const float* p) { widen(out, load4(p)); }
inline void load_wide(Lanes4& out, const double* p) { out = Lanes4{{p[0], p[1], p[2], p[3]}}; }
#endif

}  // namespace strata
