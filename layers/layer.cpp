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
void init_params(HostVector<T> params, const std::vector<ParamSpec>& specs, Init scheme,
                 std::uint64_t seed, std::uint64_t layer_index) {
  const std::uint64_t stream = random::stream_init + layer_index;
  auto uniform = [&](std::size_t i, double bound) {
    return static_cast<T>((2.0 * random::uniform_double(seed, stream, i) - 1.0) * bound);
  };
  auto normal = [&](std::size_t i, double sd) {
    return static_cast<T>(random::normal(seed, stream, i) * sd);
  };
  std::size_t offset = 0;
  for (const ParamSpec& p : specs) {
    const std::size_t n = p.shape.numel();
    STRATA_REQUIRE(offset + n <= params.extent(0), runtime, "init: ", params.extent(0),
                   " values for parameter '", p.name, "' at ", offset, " of shape ", p.shape.str());
    const double fan_in = p.init.fan_in, fan_out = p.init.fan_out;
    for (std::size_t i = offset; i < offset + n; ++i) {
      switch (p.init.kind) {
        case ParamInit::Kind::scheme:
          switch (scheme) {
            case Init::kaiming_uniform: params(i) = uniform(i, std::sqrt(6.0 / fan_in)); break;
            case Init::kaiming_normal: params(i) = normal(i, std::sqrt(2.0 / fan_in)); break;
            case Init::xavier_uniform:
              params(i) = uniform(i, std::sqrt(6.0 / (fan_in + fan_out)));
              break;
            case Init::xavier_normal:
              params(i) = normal(i, std::sqrt(2.0 / (fan_in + fan_out)));
              break;
            case Init::torch_default: params(i) = uniform(i, 1.0 / std::sqrt(fan_in)); break;
          }
          break;
        case ParamInit::Kind::bias:
          params(i) = scheme == Init::torch_default ? uniform(i, 1.0 / std::sqrt(fan_in)) : T(0);
          break;
        case ParamInit::Kind::normal: params(i) = normal(i, p.init.value); break;
        case ParamInit::Kind::constant: params(i) = static_cast<T>(p.init.value); break;
      }
    }
    offset += n;
  }
}

template void init_params<float>(HostVector<float>, const std::vector<ParamSpec>&, Init,
                                 std::uint64_t, std::uint64_t);
template void init_params<double>(HostVector<double>, const std::vector<ParamSpec>&, Init,
                                  std::uint64_t, std::uint64_t);
}  // namespace detail

template <class T>
std::size_t Layer<T>::num_params() const {
  std::size_t n = 0;
  for (const ParamSpec& p : params()) n += p.shape.numel();
  return n;
}

template <class T>
std::vector<ParamInfo> Layer<T>::param_table() const {
  std::vector<ParamInfo> table;
  std::size_t offset = 0;
  for (ParamSpec& p : params()) {
    const std::size_t n = p.shape.numel();
    table.push_back({std::move(p.name), std::move(p.shape), offset, p.group});
    offset += n;
  }
  return table;
}

template <class T>
void Layer<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                    std::uint64_t layer_index) const {
  detail::init_params(params, this->params(), scheme, seed, layer_index);
}

template <class T>
double Layer<T>::flops() const {
  std::vector<LayerCost> costs;
  add_costs(costs);
  double f = 0;
  for (const LayerCost& c : costs) f += c.flops;
  return f;
}

template <class T>
std::vector<ParamSlice<T>> Layer<T>::slices(Vector<T> params, Vector<T> grads) const {
  std::vector<ParamSlice<T>> out;
  for (ParamInfo& p : param_table()) {
    const std::size_t end = p.offset + p.shape.numel();
    STRATA_REQUIRE(end <= params.extent(0) && end <= grads.extent(0), runtime, name(), ": a slice of ",
                   params.extent(0), " parameters and ", grads.extent(0), " gradients for '", p.name,
                   "' at ", p.offset, " of shape ", p.shape.str());
    const auto range = Kokkos::make_pair(p.offset, end);
    out.push_back({Kokkos::subview(params, range), Kokkos::subview(grads, range), std::move(p.shape)});
  }
  return out;
}

template <class T>
LayerCost Layer<T>::cost(double flops) const {
  LayerCost c;
  c.flops = flops;
  c.values = static_cast<double>(in_shape_.numel()) + output_values();
  return c;
}

template class Layer<float>;
template class Layer<double>;

}  // namespace strata
