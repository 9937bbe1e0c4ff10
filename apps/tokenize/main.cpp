// strata-tokenize: learns a byte-pair encoding from text and applies it
// (data/bpe.hpp), for strata-train --tokenizer and strata-generate --tokenizer.
//
//   strata-tokenize train --input /usr/share/games/fortunes --vocab 512 --output fortunes.bpe
//   strata-tokenize encode --bpe fortunes.bpe --input some.txt     (ids, one line)
//   echo "256 101 32" | strata-tokenize decode --bpe fortunes.bpe
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/clock.hpp"
#include "data/bpe.hpp"
#include "data/text.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace strata::app {
namespace {

void report(std::size_t k, std::size_t total) {
  if (k % 64 == 0 || k == total) std::fprintf(stderr, "\rstrata-tokenize: %zu / %zu merges", k, total);
}

int run(const std::vector<std::string>& args) {
  CLI::App app{"strata-tokenize: learn a byte-pair encoding (BPE) from text, and encode or decode "
               "with it.\nExit codes: 0 done, 2 bad options, 3 bad input data.",
               "strata-tokenize"};
  app.require_subcommand(1);
  std::string input, output, bpe_file;
  std::size_t vocab = 512;
  auto* train = app.add_subcommand("train", "learn merges from a text file or directory");
  train->add_option("--input", input, "text file or directory (as strata-train --dataset text:PATH)")
      ->required();
  train->add_option("--vocab", vocab, "vocabulary size: 256 byte ids plus the merges")
      ->capture_default_str()
      ->check(whole_number(256, std::uint64_t(1) << 24));
  train->add_option("--output", output, "the BPE file to write")->required();
  auto* enc = app.add_subcommand("encode", "print the token ids of a text (one line)");
  enc->add_option("--bpe", bpe_file, "a BPE file strata-tokenize train wrote")->required();
  enc->add_option("--input", input, "text file or directory")->required();
  auto* dec = app.add_subcommand("decode", "print the text of token ids read from stdin");
  dec->add_option("--bpe", bpe_file, "a BPE file strata-tokenize train wrote")->required();
  if (!parse_cli(app, args)) return exit_ok;

  if (train->parsed()) {
    const std::string text = data::read_text(input);
    const auto t0 = Clock::now();
    const data::Bpe bpe = data::train_bpe(text, vocab, &report);
    data::write_bpe(bpe, output);
    const auto ids = data::encode(bpe, text);
    std::fprintf(stderr,
                 "\nstrata-tokenize: %s: %zu bytes -> %zu tokens (%.2f bytes per token), vocabulary "
                 "%zu, %.1f s; wrote %s\n",
                 input.c_str(), text.size(), ids.size(),
                 static_cast<double>(text.size()) / static_cast<double>(std::max<std::size_t>(1, ids.size())),
                 bpe.vocab(),
                 seconds_since(t0),
                 output.c_str());
    return exit_ok;
  }
  const data::Bpe bpe = data::read_bpe(bpe_file);
  if (enc->parsed()) {
    const auto ids = data::encode(bpe, data::read_text(input));
    std::string line;
    for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::cout << line << "\n";
    return exit_ok;
  }
  std::vector<std::int32_t> ids;
  std::string word;
  std::size_t n = 0;
  while (std::cin >> word) {
    ++n;
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    STRATA_REQUIRE(used == word.size(), data, "stdin: token ", n, " ('", word.substr(0, 20),
                   "') is not an integer id");
    STRATA_REQUIRE(v >= 0 && static_cast<std::size_t>(v) < bpe.vocab(), data, "stdin: token ", n,
                   " has id ", v, ", outside the vocabulary [0, ", bpe.vocab(), ") of ", bpe_file);
    ids.push_back(static_cast<std::int32_t>(v));
  }
  std::cout << data::decode(bpe, ids);
  return exit_ok;
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  return guarded("strata-tokenize", [&] {
    std::vector<std::string> args(argv + 1, argv + argc);
    return run(args);
  });
}
