// Counter-based random numbers: the value for (seed, stream, index) is a pure
// function of its arguments, computed with integer arithmetic only, so every
// backend, thread count and launch order gives the same numbers, and no
// generator state has to be stored or checkpointed beyond the counters.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace strata::random {

// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64 random bits for element `index` of stream `stream` under `seed`.
KOKKOS_INLINE_FUNCTION std::uint64_t bits(std::uint64_t seed, std::uint64_t stream,
                                          std::uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream)) + index);
}

// Uniform in [0, 1) with 24 random bits (exact in float).
KOKKOS_INLINE_FUNCTION float uniform_float(std::uint64_t seed, std::uint64_t stream,
                                           std::uint64_t index) {
  return static_cast<float>(bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

// Uniform in [0, 1) with 53 random bits (exact in double).
KOKKOS_INLINE_FUNCTION double uniform_double(std::uint64_t seed, std::uint64_t stream,
                                             std::uint64_t index) {
  return static_cast<double>(bits(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

// Host-side helpers (initialisation, synthetic data, shuffling).

// Standard normal by Box-Muller from two uniforms of the same stream.
double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);

// Uniform integer in [0, n) without modulo bias worth noticing (n << 2^64).
inline std::uint64_t below(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                           std::uint64_t n) {
  // Multiply-shift (Lemire) on the high 32 bits is enough for n < 2^32.
  const std::uint64_t r = bits(seed, stream, index) >> 32;
  return (r * n) >> 32;
}

// Streams used by the library, so that different consumers of one seed never
// see correlated numbers.
enum Stream : std::uint64_t {
  stream_init = 1,       // parameter initialisation (+ layer index)
  stream_shuffle = 1000, // data-loader shuffles (+ epoch)
  stream_dropout = 2000, // dropout masks (+ layer index), index offset by call
  stream_synthetic = 3000,
  stream_augment = std::uint64_t(1) << 32,  // image augmentation (+ epoch)
};

}  // namespace strata::random
