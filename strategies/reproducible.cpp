#include "strategies/reproducible.hpp"

#include "backends/error.hpp"
#include "backends/floating_point.hpp"
#include "data/loader.hpp"

namespace strata {

void validate_reproducible(std::size_t chunk, std::size_t batch, int ranks, std::size_t micro) {
  STRATA_REQUIRE(chunk > 0, config, "--chunk must be positive");
  STRATA_REQUIRE(micro > 0, config, "--reproducible: no micro-batches");
  std::string shards;
  bool whole = true;
  for (int r = 0; r < ranks; ++r) {
    const std::size_t n = data::BatchLoader<float>::shard(batch, r, ranks).second;
    whole = whole && n % (chunk * micro) == 0 && n > 0;
    if (r < 8) shards += (r > 0 ? ", " : "") + std::to_string(n);
  }
  if (ranks > 8) shards += ", ...";
  const std::size_t unit = chunk * micro * static_cast<std::size_t>(ranks);
  STRATA_REQUIRE(whole, config, "--reproducible: a global batch of ", batch, " samples splits over ",
                 ranks, " data-parallel rank(s) into shards of ", shards, " samples",
                 micro > 1 ? " of " + std::to_string(micro) + " micro-batches each" : std::string(),
                 ", which are not whole chunks of ", chunk,
                 " samples (--chunk): give a batch that is a multiple of ", unit, " (",
                 ranks, " x ", micro > 1 ? std::to_string(micro) + " x " : std::string(), chunk,
                 "), or a chunk that divides every ", micro > 1 ? "micro-batch" : "shard");
}

void enable_reproducible(Context& ctx) {
  // The same bits from builds for any target CPU need every multiply and
  // add rounded as written.
  static const bool checked = (fp::require_no_contraction("--reproducible"), true);
  (void)checked;
  ctx.reproducible = true;
  ctx.blas.set_reproducible(true);
}

std::string describe_reproducible(std::size_t chunk, std::size_t tp_chunk) {
  if (chunk == 0) return "";
  return ", reproducible (chunks of " + std::to_string(chunk) + " samples" +
         (tp_chunk > 0 ? ", tensor chunks of " + std::to_string(tp_chunk) + " features)" : ")");
}

}  // namespace strata
