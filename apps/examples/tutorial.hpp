// Pieces shared by the tutorial examples: the SimpleModel, its random batch,
// and the command line every example takes.
#pragma once

#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/random.hpp"
#include "layers/mlp.hpp"

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>

namespace strata::examples {

struct TutorialOptions {
  std::size_t steps = 100;
  std::size_t target_width = 2;
  std::uint64_t seed = 0;
  int ranks = 2;  // parallel examples only
  bool ranks_given = false;  // --ranks on the command line
};

// Parses the example's options; nullopt after --help. Throws config errors.
inline std::optional<TutorialOptions> parse_tutorial(const std::string& name,
                                                     const std::string& description,
                                                     const std::vector<std::string>& args,
                                                     bool parallel) {
  TutorialOptions o;
  CLI::App cli{description, name};
  cli.add_option("--steps", o.steps, "training steps")->capture_default_str();
  cli.add_option("--target-width", o.target_width,
                 "width of the random targets (the tutorial used 5, which does not match the "
                 "model's 2 outputs)")
      ->capture_default_str();
  cli.add_option("--seed", o.seed, "random seed")->capture_default_str();
  CLI::Option* ranks = nullptr;
  if (parallel)
    ranks = cli.add_option("--ranks", o.ranks,
                           "thread ranks (without mpirun; under mpirun each process is one rank)")
                ->capture_default_str()
                ->check(CLI::Range(1, 64));
  if (!app::parse_cli(cli, args)) return std::nullopt;
  o.ranks_given = ranks != nullptr && ranks->count() > 0;
  return o;
}

// SimpleModel: Linear(10, 5) - ReLU - Linear(5, 2), PyTorch's initialisation.
inline Sequential<float> simple_model(std::size_t batch, std::uint64_t seed) {
  Sequential<float> model = make_mlp<float>({{10, 5, 2}, ActivationKind::relu});
  model.build(batch);
  model.init(Init::torch_default, seed);
  return model;
}

// inputs = torch.randn(rows, 10); targets = torch.randn(rows, width), rows
// [first, first + count) of the tutorial's batch (so ranks can take shards).
inline std::pair<MatrixBuffer<float>, MatrixBuffer<float>> random_batch(
    std::uint64_t seed, std::size_t first, std::size_t count, std::size_t target_width) {
  MatrixBuffer<float> inputs("inputs", count, 10), targets("targets", count, target_width);
  auto hi = Kokkos::create_mirror_view(inputs);
  auto ht = Kokkos::create_mirror_view(targets);
  for (std::size_t i = 0; i < hi.size(); ++i)
    hi.data()[i] = static_cast<float>(random::normal(seed, random::stream_synthetic, first * 10 + i));
  for (std::size_t i = 0; i < ht.size(); ++i)
    ht.data()[i] = static_cast<float>(
        random::normal(seed, random::stream_synthetic + 1, first * target_width + i));
  Kokkos::deep_copy(inputs, hi);
  Kokkos::deep_copy(targets, ht);
  return {inputs, targets};
}

}  // namespace strata::examples
