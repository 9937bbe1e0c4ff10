#include "backends/random.hpp"

#include <cmath>

namespace strata::random {

double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  // 1 - u keeps the argument of log in (0, 1].
  const double u1 = 1.0 - uniform_double(seed, stream, 2 * index);
  const double u2 = uniform_double(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace strata::random
