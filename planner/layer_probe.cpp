#include "planner/layer_probe.hpp"

#include "layers/embedding.hpp"
#include "strategies/vocab_parallel.hpp"

#include <algorithm>

namespace strata::planner {

void fill_seeded(float* p, std::size_t n, unsigned salt) {
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned h = static_cast<unsigned>(i) * 2654435761u + salt * 40503u;
    p[i] = static_cast<float>((h >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
}

namespace {
// The rows of an embedding's table (its shard's, which every id below it
// is valid for), or 0 for a layer that takes values.
std::size_t token_rows(const Layer<float>& l) {
  if (dynamic_cast<const Embedding<float>*>(&l) || dynamic_cast<const VocabParallelEmbedding<float>*>(&l)) {
    const auto specs = l.params();
    return specs.empty() ? 0 : specs.front().shape[0];
  }
  return 0;
}

void fill_buffer(MatrixBuffer<float>& m, unsigned salt, std::size_t ids) {
  auto host = Kokkos::create_mirror_view(m);
  float* p = host.data();
  if (ids > 0) {
    for (std::size_t i = 0; i < host.size(); ++i)
      p[i] = static_cast<float>((i * 2654435761u + salt) % ids);
  } else {
    fill_seeded(p, host.size(), salt);
  }
  Kokkos::deep_copy(m, host);
}
}  // namespace

LayerProbe::LayerProbe(const Layer<float>& l, std::size_t batch, unsigned salt) {
  const std::size_t in = l.input_shape().numel(), out = l.output_shape(l.input_shape()).numel();
  x = MatrixBuffer<float>("x", batch, in);
  y = MatrixBuffer<float>("y", batch, out);
  dy = MatrixBuffer<float>("dy", batch, out);
  dx = MatrixBuffer<float>("dx", batch, in);
  scratch = VectorBuffer<float>("scratch", std::max<std::size_t>(1, l.saved_size(batch)));
  fill_buffer(x, 3 + salt, token_rows(l));
  fill_buffer(dy, 5 + salt, 0);
  saved.x = x;
  saved.y = y;
  saved.scratch = scratch;
}

}  // namespace strata::planner
