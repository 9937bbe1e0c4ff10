// strata-generate: text from a trained language model, one token per step
// with a KV cache (layers/decoder.hpp).
//
//   strata-train --model models/gpt-mini.toml --dataset fortunes ... --checkpoint-dir ck
//   strata-generate --model models/gpt-mini.toml --checkpoint ck/ckpt-000800.strata \
//       --prompt "The " --tokens 300 --temperature 0.8 --top-k 40 --seed 1
//
// Tokens are bytes, or the ids of --tokenizer (the model's vocabulary must be
// that many: 256 for bytes); the prompt is
// fed one token at a time, then each new token is drawn from the softmax of
// the last logits / temperature, restricted to the top-k (0: all; temperature
// 0: the most likely token), with counter-based random numbers of --seed (the
// same text for the same seed on every machine). When the sequence reaches
// the model's input length T, the decoder starts again from the last T/2
// tokens (one re-encoding every T/2 tokens instead of a full forward per token).
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "apps/common/saved_model.hpp"
#include "backends/random.hpp"
#include "backends/runtime.hpp"
#include "data/bpe.hpp"
#include "layers/decoder.hpp"
#include "layers/embedding.hpp"
#include "layers/registry.hpp"
#include "strategies/checkpoint_state.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace strata::app {
namespace {

struct GenerateConfig {
  std::string model_file, checkpoint, prompt = "\n", tokenizer;
  std::size_t tokens = 200, top_k = 0, seq_len = 0;
  double temperature = 0.8;
  std::uint64_t seed = 1;
  int threads = 0;
};

bool parse(const std::vector<std::string>& args, GenerateConfig& c) {
  CLI::App app{"strata-generate: sample text from a language model trained by strata-train.\n"
               "Exit codes: 0 done, 2 bad options or configuration, 3 bad input data.",
               "strata-generate"};
  app.add_option("--model", c.model_file, "the model file it was trained with")->required();
  app.add_option("--checkpoint", c.checkpoint, "a checkpoint strata-train wrote: a file, a sharded one's manifest, a "
                 "--checkpoint-dir or its 'latest' (the newest)")
      ->required();
  app.add_option("--prompt", c.prompt, "text to continue (bytes; default: a newline)");
  app.add_option("--tokens", c.tokens, "tokens to generate")->capture_default_str()->check(whole_number(1));
  app.add_option("--temperature", c.temperature,
                 "divides the logits before sampling (0: always the most likely token)")
      ->capture_default_str()
      ->check(number_in(0.0, 100.0));
  app.add_option("--top-k", c.top_k, "sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "random numbers of the sampling")->capture_default_str();
  app.add_option("--seq-len", c.seq_len, "the --seq-len the model was trained with (default: its input)")
      ->check(whole_number(1));
  app.add_option("--tokenizer", c.tokenizer,
                 "the BPE file the model was trained with (strata-train --tokenizer; default: bytes)");
  app.add_option("--threads", c.threads, "host threads")->check(whole_number(1));
  return parse_cli(app, args);
}

// The next token from `logits` (host copy of the last position's row).
int sample(std::vector<double> logits, const GenerateConfig& c, std::uint64_t step) {
  const std::size_t v = logits.size();
  std::vector<std::size_t> idx(v);
  std::iota(idx.begin(), idx.end(), std::size_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
  if (c.temperature == 0) return static_cast<int>(idx[0]);
  const std::size_t k = c.top_k == 0 ? v : std::min(c.top_k, v);
  std::vector<double> p(k);
  double sum = 0;
  for (std::size_t i = 0; i < k; ++i) sum += p[i] = std::exp((logits[idx[i]] - logits[idx[0]]) / c.temperature);
  double u = random::uniform_double(c.seed, random::stream_synthetic + 7, step) * sum;
  for (std::size_t i = 0; i < k; ++i) {
    if (u < p[i]) return static_cast<int>(idx[i]);
    u -= p[i];
  }
  return static_cast<int>(idx[k - 1]);
}

int generate(const GenerateConfig& c) {
  ModelSpec spec = read_model_file(c.model_file);
  if (c.seq_len > 0) {
    STRATA_REQUIRE(spec.input.rank() == 1, config, "--seq-len: ", c.model_file, " takes inputs of shape ",
                   spec.input.str(), ", not token ids");
    spec.input = Shape{c.seq_len};
  }
  Sequential<float> model = build_model<float>(spec, 1);
  const std::size_t embeds = model.num_layers() ? embedding_vocabulary(model.layer(0)) : 0;
  STRATA_REQUIRE(embeds > 0, config, c.model_file,
                 " does not start with an embedding: strata-generate needs a language model");
  data::Bpe bpe;  // no merges: bytes
  if (!c.tokenizer.empty()) bpe = data::read_bpe(c.tokenizer);
  STRATA_REQUIRE(embeds == bpe.vocab(), config, c.model_file, " embeds ",
                 embeds, " token ids, but ",
                 c.tokenizer.empty() ? std::string("byte-level text has 256 (give the --tokenizer it was trained with)")
                                     : "the tokenizer " + c.tokenizer + " has " + std::to_string(bpe.vocab()));
  const std::size_t vocab = model.shape(model.num_layers()).numel() / model.shape(0)[0];
  model.build(1);
  model.set_training(false);
  const auto [snapshot, position] =
      read_checkpoint(checkpoint_file(c.checkpoint), "{}",
                      ModelTable{model.parameters(), model.buffers(), false});
  Kokkos::deep_copy(model.params(),
                    Kokkos::View<const float*, Kokkos::HostSpace, Unmanaged>(snapshot.params.data(),
                                                                              snapshot.params.size()));
  model.write_buffers(snapshot.buffers);
  std::fprintf(stderr, "strata-generate: %s, %zu parameters, trained %zu steps; %zu tokens\n",
               c.model_file.c_str(), model.num_params(), position.step, c.tokens);

  Context ctx;
  const std::size_t T = model.shape(0)[0];
  Decoder<float> dec(model, T);
  STRATA_REQUIRE(!c.prompt.empty(), config, "--prompt is empty; give at least one character");
  std::vector<int> text;
  for (const std::int32_t id : data::encode(bpe, c.prompt)) text.push_back(id);
  std::cout << c.prompt << std::flush;
  // Feeds tokens [from, end) of the text; returns the logits after the last.
  std::vector<double> logits(vocab);
  auto feed = [&](std::size_t from) {
    ConstMatrix<float> out;
    for (std::size_t i = from; i < text.size(); ++i) out = dec.step(ctx, text[i]);
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
    for (std::size_t j = 0; j < vocab; ++j) logits[j] = host(0, j);
  };
  dec.reset(ctx);
  const std::size_t start = text.size() > T ? text.size() - T / 2 : 0;  // a long prompt: its tail
  feed(start);
  for (std::size_t g = 0; g < c.tokens; ++g) {
    const int next = sample(logits, c, g);
    text.push_back(next);
    std::cout << data::decode(bpe, {next}) << std::flush;
    if (dec.position() == T) {  // the window is full: again from its last T/2 tokens
      dec.reset(ctx);
      feed(text.size() - T / 2);
    } else {
      auto out = dec.step(ctx, next);
      auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
      for (std::size_t j = 0; j < vocab; ++j) logits[j] = host(0, j);
    }
  }
  std::cout << std::endl;
  return exit_ok;
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  return program_main<GenerateConfig>(
      "strata-generate", argc, argv, [](const std::vector<std::string>& a, GenerateConfig& c) { return parse(a, c); },
      [](const GenerateConfig& c) { return c.threads; }, [](const GenerateConfig& c) { return generate(c); });
}
