// libFuzzer target: strata-train's option parser (app::parse_train_args) on
// an argument vector built from the input, in one of two ways (the first
// byte's low bit picks): raw, the rest of the input split at NUL or newline
// bytes; or structured, each argument an option name of strata-train, a value
// from a list of awkward values ("nan", "-1", "1e309", ...), or a short raw
// string, as the input's bytes choose. At most 64 arguments.
//
// Oracle: the parser returns (a configuration, or nothing after --help or
// --version), or throws strata::Error of kind config; a returned
// configuration satisfies the checks that the parser promises.
#include "fuzz_common.hpp"

#include "apps/train/train_config.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <vector>

using namespace strata;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::cout.rdbuf(nullptr);  // --help and --version text is not of interest
  return 0;
}

namespace {

const char* const kOptions[] = {
    "--dataset", "--data-dir", "--samples", "--test-fraction", "--layers", "--activation",
    "--dropout", "--loss", "--epochs", "--steps", "--batch-size", "--optimizer", "--lr",
    "--momentum", "--nesterov", "--weight-decay", "--init", "--normalize", "--no-shuffle",
    "--no-eval", "--seed", "--metrics", "--log-every", "--warmup-steps", "--gemm", "--strategy",
    "--ranks", "--threads", "--bucket-mb", "--no-overlap", "--accumulate", "--verbose-ranks",
    "--checkpoint-dir", "--checkpoint-every", "--keep-checkpoints", "--resume", "--resume-from",
    "--quiet", "-q", "--version", "--help"};
const char* const kValues[] = {
    "nan", "inf", "-inf", "-1", "0", "1", "2", "0.5", "0.99", "1e309", "1e-320", "-0",
    "18446744073709551615", "18446744073709551616", "4294967297", "1024", "1025", "",
    " 1", "1 ", "0x10", "1e3", "+1", "synthetic", "fashion-mnist", "csv:", "csv:d.csv",
    "adam", "sgd", "mse", "relu", "dp", "local", "auto", "10,2", "784,256,10", "10,,2",
    "10,0", "3,-2", ",", "per-feature", "portable", "torch-default"};

std::vector<std::string> raw_args(FuzzedDataProvider& in) {
  std::vector<std::string> args(1);
  const std::string rest = in.ConsumeRemainingBytesAsString();
  for (char c : rest) {
    if (c == '\0' || c == '\n') {
      if (args.size() == 64) break;
      args.emplace_back();
    } else {
      args.back().push_back(c);
    }
  }
  if (rest.empty()) args.clear();
  return args;
}

std::vector<std::string> structured_args(FuzzedDataProvider& in) {
  std::vector<std::string> args;
  while (in.remaining_bytes() > 0 && args.size() < 64) {
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 0:
      case 1: args.emplace_back(in.PickValueInArray(kOptions)); break;
      case 2: args.emplace_back(in.PickValueInArray(kValues)); break;
      default: args.push_back(in.ConsumeRandomLengthString(16)); break;
    }
    // Sometimes option=value in one argument.
    if (args.size() >= 2 && args[args.size() - 2].rfind("--", 0) == 0 && in.ConsumeBool() &&
        in.ConsumeBool()) {
      const std::string value = args.back();
      args.pop_back();
      args.back() += "=" + value;
    }
  }
  return args;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  FuzzedDataProvider in(data + 1, size - 1);
  const std::vector<std::string> args = (data[0] & 1) ? structured_args(in) : raw_args(in);
  static const bool verbose = std::getenv("STRATA_FUZZ_VERBOSE") != nullptr;
  if (verbose) {  // to see what a crashing input passes
    std::fprintf(stderr, "strata-train");
    for (const auto& a : args) std::fprintf(stderr, " '%s'", a.c_str());
    std::fprintf(stderr, "\n");
  }

  fuzz::expect_only({ErrorKind::config}, [&] {
    const auto c = app::parse_train_args(args);
    if (!c) return;
    STRATA_FUZZ_CHECK(c->layers.size() >= 2);
    for (std::size_t w : c->layers) STRATA_FUZZ_CHECK(w > 0);
    STRATA_FUZZ_CHECK(c->batch_size > 0);
    STRATA_FUZZ_CHECK(c->epochs > 0);
    STRATA_FUZZ_CHECK(c->ranks >= 1 && c->ranks <= 1024);
    STRATA_FUZZ_CHECK(c->threads >= 0);
    STRATA_FUZZ_CHECK(c->accumulate >= 1);
    STRATA_FUZZ_CHECK(c->keep_checkpoints >= 1);
    STRATA_FUZZ_CHECK(c->dropout >= 0 && c->dropout < 1);
    STRATA_FUZZ_CHECK(c->test_fraction >= 0 && c->test_fraction < 1);
    STRATA_FUZZ_CHECK(c->bucket_mb >= 0 && std::isfinite(c->bucket_mb));
    STRATA_FUZZ_CHECK(std::isfinite(c->optimizer.lr) && c->optimizer.lr >= 0);
    STRATA_FUZZ_CHECK(!(c->resume && !c->resume_from.empty()));
    STRATA_FUZZ_CHECK(!c->resume || !c->checkpoint_dir.empty());
    STRATA_FUZZ_CHECK(c->checkpoint_every == 0 || !c->checkpoint_dir.empty());
    STRATA_FUZZ_CHECK(c->strategy == StrategyKind::automatic || c->strategy == StrategyKind::local ||
                      c->strategy == StrategyKind::dp);
    STRATA_FUZZ_CHECK(c->dataset == "fashion-mnist" || c->dataset == "synthetic" ||
                      (c->dataset.rfind("csv:", 0) == 0 && c->dataset.size() > 4));
  });
  return 0;
}
