// STRATA_HOST_CLONES: a host function compiled twice, for the build's target
// and for x86-64-v3 (AVX2, FMA), the second chosen when the program loads on
// a CPU that has it (GCC's target_clones, an ifunc); the inline functions it
// calls are compiled into each clone (STRATA_HOST_CLONES_FLAT: every call
// inside it inlined). A build for the baseline x86-64 (Debian's packages,
// spack's generic targets) then still runs its host loops 8 floats wide. A
// build whose target has AVX2 already (-march=x86-64-v3, v4, native) makes
// no clones: its own code is as wide or wider.
//
// No x86-64-v4 (AVX-512) clone: GCC 12.2 compiles some constant copies
// wrongly for AVX-512 targets (docs/design-notes.md, "The floating-point
// contract": a v4 clone of its reproducer gets the broadcast), which the
// configure-time work-around guards only for builds whose own flags target
// AVX-512; and GCC's vectoriser prefers 256-bit vectors on those targets
// anyway.
//
// The floating-point contract (no contraction, IEEE arithmetic, no
// -ffast-math: cmake/StrataFloatingPoint.cmake) holds in every clone, and
// GCC vectorises no floating-point sum it would have to reorder, so both
// clones compute the same values (sums that vectorise are written in fixed
// lanes: vmath's callers, the kLanes sums of layers/attention.cpp); only a
// NaN's sign may differ, which IEEE leaves open
// (tests/layers/test_layers.cpp, FloatLayerGivesTheBitsOfThisBuildsTarget).
//
// Empty (the function compiled once, for the build's target) for other
// compilers and targets: Clang's clones take other syntax, nvcc and hipcc
// compile device code, and ThreadSanitizer builds are left as they were
// (an ifunc resolver runs before the sanitizer's runtime starts; not tried).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(__AVX2__) && !defined(__CUDACC__) && !defined(__HIPCC__) &&                   \
    !defined(__SANITIZE_THREAD__)
#define STRATA_HOST_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define STRATA_HOST_CLONES_FLAT \
  __attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#else
#define STRATA_HOST_CLONES
#define STRATA_HOST_CLONES_FLAT
#endif

#include <type_traits>

namespace strata {
// The integer v itself, hidden from the optimiser (an empty asm statement
// that may have changed it, in a register), in host code: a 0 or 1 built
// from a comparison, such as a ReLU's derivative, then stays a value that
// is converted and multiplied. Without it GCC 12 turns `dy * (v > 0)` in a
// scalar loop into a jump over the multiplication, taken at random
// (layers/batchnorm.cpp: a fused ReLU's channel sums ran 3 times as long),
// even through a float barrier (its path splitting copies the loop's last
// term). Elsewhere (other compilers, device code) v as is.
template <class I>
inline I opaque(I v) {
  static_assert(std::is_integral_v<I>, "opaque: integers (a register of any target)");
#if defined(__GNUC__) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
  asm("" : "+r"(v));
#endif
  return v;
}
}  // namespace strata
