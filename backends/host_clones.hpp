// STRATA_HOST_CLONES: a host function compiled for several x86-64 levels,
// the best one the running CPU supports chosen when the program loads (GCC's
// target_clones, an ifunc), with every call inside it inlined (flatten). A
// build for the baseline x86-64 (Debian's packages, spack's generic targets)
// then still runs its hottest host loops in AVX2 or AVX-512 lanes; a build
// for a newer -march gets the same code anyway.
//
// Only for loops whose values do not depend on the lane width: elementwise
// arithmetic and sums in fixed lanes (vmath's functions, the kLanes sums of
// layers/attention.cpp). The floating-point contract (no contraction, IEEE
// arithmetic: cmake/StrataFloatingPoint.cmake) holds in every clone, so
// every clone computes the same bits.
//
// Empty where the compiler or target has no such clones (Clang's differ in
// syntax, nvcc and hipcc compile device code, ThreadSanitizer's runtime
// does not intercept ifunc resolvers): there the function is compiled once,
// for the build's target.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(__CUDACC__) && !defined(__HIPCC__) && !defined(__SANITIZE_THREAD__)
#define STRATA_HOST_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define STRATA_HOST_CLONES
#endif
