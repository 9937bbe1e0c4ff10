#include "data/augment.hpp"

#include "backends/error.hpp"
#include "backends/random.hpp"

namespace strata::data {

void Augment::check(const Dataset& d) const {
  if (!active()) return;
  STRATA_REQUIRE(d.shape.size() == 3, config, "--random-crop and --random-flip augment images of "
                 "shape {channels, height, width}, but ", d.name, " has samples of shape ",
                 shape_str(d), " (a CSV takes a shape with --input-shape C,H,W, synthetic data the model file's input shape)");
  STRATA_REQUIRE(crop_pad < d.shape[1] && crop_pad < d.shape[2], config, "--random-crop ",
                 crop_pad, " must be smaller than the images (", shape_str(d), ")");
}

template <class T>
void Augment::apply(const float* src, T* dst, const std::vector<std::size_t>& shape,
                    std::uint64_t seed, std::size_t epoch, std::size_t sample) const {
  using I = std::int64_t;
  const I C = static_cast<I>(shape[0]), H = static_cast<I>(shape[1]), W = static_cast<I>(shape[2]);
  // Three draws per sample: row offset, column offset, flip.
  const std::uint64_t stream = random::stream_augment + epoch, at = 3 * static_cast<std::uint64_t>(sample);
  const I span = 2 * static_cast<I>(crop_pad) + 1;
  const I dy = crop_pad > 0 ? static_cast<I>(random::below(seed, stream, at, static_cast<std::uint64_t>(span))) - static_cast<I>(crop_pad) : 0;
  const I dx = crop_pad > 0 ? static_cast<I>(random::below(seed, stream, at + 1, static_cast<std::uint64_t>(span))) - static_cast<I>(crop_pad) : 0;
  const bool mirror = flip && random::below(seed, stream, at + 2, 2) == 1;
  // Output pixel (i, j) reads input (i + dy, j' + dx), j' = j or W - 1 - j.
  for (I c = 0; c < C; ++c)
    for (I i = 0; i < H; ++i) {
      T* out = dst + (c * H + i) * W;
      const I si = i + dy;
      if (si < 0 || si >= H) {
        for (I j = 0; j < W; ++j) out[j] = static_cast<T>(fill);
        continue;
      }
      const float* in = src + (c * H + si) * W;
      for (I j = 0; j < W; ++j) {
        const I sj = (mirror ? W - 1 - j : j) + dx;
        out[j] = sj >= 0 && sj < W ? static_cast<T>(in[sj]) : static_cast<T>(fill);
      }
    }
}

template void Augment::apply<float>(const float*, float*, const std::vector<std::size_t>&,
                                    std::uint64_t, std::size_t, std::size_t) const;
template void Augment::apply<double>(const float*, double*, const std::vector<std::size_t>&,
                                     std::uint64_t, std::size_t, std::size_t) const;

}  // namespace strata::data
