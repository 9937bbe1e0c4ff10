#include "layers/layer.hpp"

#include "backends/error.hpp"
#include "backends/random.hpp"

#include <cmath>

#include <algorithm>

namespace strata {

Init parse_init(const std::string& name) {
  for (Init i : {Init::kaiming_uniform, Init::kaiming_normal, Init::xavier_uniform,
                 Init::xavier_normal, Init::torch_default})
    if (name == to_string(i)) return i;
  STRATA_THROW(config, "unknown initialisation '", name,
               "' (expected kaiming-uniform, kaiming-normal, xavier-uniform, xavier-normal "
               "or torch-default)");
}

const char* to_string(Init init) {
  switch (init) {
    case Init::kaiming_uniform: return "kaiming-uniform";
    case Init::kaiming_normal: return "kaiming-normal";
    case Init::xavier_uniform: return "xavier-uniform";
    case Init::xavier_normal: return "xavier-normal";
    case Init::torch_default: return "torch-default";
  }
  return "?";
}

namespace detail {
template <class T>
void init_dense(HostVector<T> params, Init scheme, std::uint64_t seed, std::uint64_t layer_index,
                std::size_t weights, double fan_in, double fan_out, std::size_t biases) {
  const std::uint64_t stream = random::stream_init + layer_index;
  auto uniform = [&](std::size_t i, double bound) {
    return static_cast<T>((2.0 * random::uniform_double(seed, stream, i) - 1.0) * bound);
  };
  auto normal = [&](std::size_t i, double sd) {
    return static_cast<T>(random::normal(seed, stream, i) * sd);
  };
  for (std::size_t i = 0; i < weights; ++i) {
    switch (scheme) {
      case Init::kaiming_uniform: params(i) = uniform(i, std::sqrt(6.0 / fan_in)); break;
      case Init::kaiming_normal: params(i) = normal(i, std::sqrt(2.0 / fan_in)); break;
      case Init::xavier_uniform:
        params(i) = uniform(i, std::sqrt(6.0 / (fan_in + fan_out)));
        break;
      case Init::xavier_normal: params(i) = normal(i, std::sqrt(2.0 / (fan_in + fan_out))); break;
      case Init::torch_default: params(i) = uniform(i, 1.0 / std::sqrt(fan_in)); break;
    }
  }
  for (std::size_t i = 0; i < biases; ++i)
    params(weights + i) =
        scheme == Init::torch_default ? uniform(weights + i, 1.0 / std::sqrt(fan_in)) : T(0);
}

template <class T>
void init_normal(HostVector<T> params, std::size_t count, double sd, std::uint64_t seed,
                 std::uint64_t layer_index) {
  const std::uint64_t stream = random::stream_init + layer_index;
  for (std::size_t i = 0; i < count; ++i)
    params(i) = static_cast<T>(random::normal(seed, stream, i) * sd);
}

template void init_normal<float>(HostVector<float>, std::size_t, double, std::uint64_t,
                                 std::uint64_t);
template void init_normal<double>(HostVector<double>, std::size_t, double, std::uint64_t,
                                  std::uint64_t);
template void init_dense<float>(HostVector<float>, Init, std::uint64_t, std::uint64_t, std::size_t,
                                double, double, std::size_t);
template void init_dense<double>(HostVector<double>, Init, std::uint64_t, std::uint64_t,
                                 std::size_t, double, double, std::size_t);
}  // namespace detail

}  // namespace strata
