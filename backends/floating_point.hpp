// The floating-point contract of Strata's code (docs/design-notes.md,
// "The floating-point contract"):
//   - IEEE arithmetic in every kernel: no flag of the -ffast-math family,
//     which lets a compiler reorder sums (the exact sums of --reproducible
//     fall apart) and drop NaN tests (mixed precision's overflow detection);
//   - no contraction: a * b + c is rounded twice, unless the source writes
//     fma(a, b, c), whatever -march the build targets; the project's CMake
//     sets -ffp-contract=off (nvcc: --fmad=false), and this header's check
//     functions say whether the compiled code keeps it.
#pragma once

// The -ffast-math family, refused (CMake refuses it at configure time too;
// this catches flags that reach one target or one file only).
#if defined(__FAST_MATH__) || defined(__ASSOCIATIVE_MATH__) || defined(__RECIPROCAL_MATH__) || \
    (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "Strata needs IEEE arithmetic: remove -Ofast, -ffast-math, -fassociative-math, -freciprocal-math and -ffinite-math-only from this compilation's flags (docs/design-notes.md, section The floating-point contract)"
#endif

#include <string>

namespace strata::fp {

// Inputs whose a * b + c is 0 when rounded twice and 2^-24 when fused:
// (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24, whose 2^-24 a float product drops
// (a tie, rounded to even), and c = -(1 + 2^-11).
inline constexpr float probe_a = 1.0f + 1.0f / 4096.0f;
inline constexpr float probe_c = -(1.0f + 1.0f / 2048.0f);

// a * b + c as Strata's host code computes it (compiled in the library,
// with its flags); a, b, c at run time, so nothing is folded.
float host_multiply_add(float a, float b, float c);
// The same in a kernel on the default execution space (a GPU's when the
// build has one).
float kernel_multiply_add(float a, float b, float c);

// "" when neither contracts; else what does (for an error message).
std::string contraction_report();

// Throws config when the compiled code contracts a * b + c (a build whose
// flags overrode the project's): --reproducible and the bitwise promises
// cannot hold then.
void require_no_contraction(const char* what);

}  // namespace strata::fp
