#include "apps/train/train_config.hpp"

#include "apps/common/cli.hpp"

#include "backends/error.hpp"
#include "backends/runtime.hpp"
#include "layers/mlp.hpp"

#include <CLI/CLI.hpp>

#include <iostream>

namespace strata::app {

std::optional<TrainConfig> parse_train_args(const std::vector<std::string>& args) {
  TrainConfig c;
  CLI::App app{
      "strata-train: train a multi-layer perceptron with Strata.\n"
      "Kokkos options (--kokkos-num-threads=N, --kokkos-help, ...) pass through to Kokkos.\n"
      "Exit codes: 0 done, 2 bad options or configuration, 3 bad input data,\n"
      "4 numerical or runtime failure.",
      "strata-train"};
  app.get_formatter()->column_width(34);
  std::string layers = "784,256,128,10", activation = "relu", loss = "cross-entropy";
  std::string optimizer = "sgd", init = "kaiming-uniform", normalize = "auto";
  double lr = 0;
  bool no_shuffle = false, no_eval = false, no_overlap = false, version = false;

  app.add_option("--dataset", c.dataset,
                 "fashion-mnist | synthetic | csv:PATH (CSV: numeric features, last column the "
                 "label, or the targets for --loss mse)")
      ->capture_default_str();
  app.add_option("--data-dir", c.data_dir,
                 "Fashion-MNIST directory (default: $STRATA_FASHION_MNIST_DIR or Debian's "
                 "dataset-fashion-mnist directory)");
  app.add_option("--samples", c.samples, "number of synthetic samples")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--test-fraction", c.test_fraction,
                 "fraction of synthetic or CSV samples held out for testing")
      ->capture_default_str()
      ->check(number_in(0.0, 0.9));
  app.add_option("--layers", layers, "layer widths, input first, e.g. 784,256,128,10")
      ->capture_default_str();
  app.add_option("--activation", activation, "relu | gelu | tanh | sigmoid")->capture_default_str();
  app.add_option("--dropout", c.dropout, "dropout probability after each hidden activation")
      ->capture_default_str()
      ->check(number_in(0.0, 0.99));
  app.add_option("--loss", loss, "cross-entropy | mse")->capture_default_str();
  auto* epochs = app.add_option("--epochs", c.epochs, "passes over the training data")
                     ->capture_default_str()
                     ->check(whole_number(1));
  auto* steps = app.add_option("--steps", c.steps, "stop after this many training steps")
                    ->check(whole_number(1));
  epochs->excludes(steps);
  app.add_option("--batch-size", c.batch_size, "global batch size")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--optimizer", optimizer, "sgd | adam | adamw")->capture_default_str();
  auto* lr_option = app.add_option("--lr", lr, "learning rate (default 0.01 for sgd, 0.001 for adam/adamw)");
  app.add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum (SGD)");
  app.add_option("--weight-decay", c.optimizer.weight_decay, "weight decay")
      ->capture_default_str();
  app.add_option("--init", init,
                 "kaiming-uniform | kaiming-normal | xavier-uniform | xavier-normal | "
                 "torch-default")
      ->capture_default_str();
  app.add_option("--normalize", normalize,
                 "auto | none | global | per-feature (auto: global for images, per-feature for "
                 "CSV, none for synthetic)")
      ->capture_default_str();
  app.add_flag("--no-shuffle", no_shuffle, "keep the data order");
  app.add_flag("--no-eval", no_eval, "skip the evaluation on the test set");
  app.add_option("--seed", c.seed, "random seed (initialisation, shuffling, dropout, data)")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--metrics", c.metrics, "write JSON lines (training log, evaluation, summary)");
  app.add_option("--log-every", c.log_every, "a training log line every N steps (0: none)")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--warmup-steps", c.warmup_steps, "steps excluded from samples_per_sec")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--gemm", c.gemm, "auto | vendor | portable")->capture_default_str();
  app.add_option("--strategy", c.strategy,
                 "auto | local | dp (auto: dp when there is more than one rank)")
      ->capture_default_str();
  app.add_option("--ranks", c.ranks,
                 "thread ranks per process (under mpirun/srun: per MPI process)")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  app.add_option("--threads", c.threads,
                 "Kokkos threads per rank (default: the cores of this node / ranks on it)")
      ->check(whole_number(1, 4096));
  app.add_option("--bucket-mb", c.bucket_mb,
                 "data parallel: gradient bucket size in MiB (0: one bucket)")
      ->capture_default_str()
      ->check(number_in(0.0, 1e6));
  // A plain bool flag: CLI11 converts a value given to it (--no-overlap=x)
  // with a ParseError; a callback flag's std::stoll threw std::invalid_argument.
  app.add_flag("--no-overlap", no_overlap,
               "data parallel: communicate after backward instead of during it");
  app.add_option("--accumulate", c.accumulate,
                 "micro-batches of --batch-size per optimizer step (gradient accumulation)")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  app.add_flag("--verbose-ranks", c.verbose_ranks, "every rank prints, not only rank 0");
  app.add_option("--checkpoint-dir", c.checkpoint_dir,
                 "write checkpoints here (atomically; a 'latest' file names the newest)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "steps between checkpoints (default: every epoch end; always at the end)")
      ->check(whole_number());
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "checkpoints kept")
      ->capture_default_str()
      ->check(whole_number(1, 1000000));
  app.add_flag("--resume", c.resume, "continue from the latest checkpoint in --checkpoint-dir");
  app.add_option("--resume-from", c.resume_from, "continue from this checkpoint file");
  app.add_flag("--quiet,-q", c.quiet, "print only errors and the final result");
  app.add_flag("--version", version, "print the build configuration and exit");

  if (!parse_cli(app, args)) return std::nullopt;
  if (version) {
    std::cout << build_info();
    return std::nullopt;
  }

  c.layers = parse_widths(layers);
  c.activation = parse_activation(activation);
  c.loss = parse_loss(loss);
  c.optimizer.kind = parse_optimizer(optimizer);
  c.optimizer.lr = lr_option->count() > 0 ? lr : (c.optimizer.kind == OptimizerKind::sgd ? 0.01 : 0.001);
  c.init = parse_init(init);
  if (normalize == "auto") c.normalize = Normalize::automatic;
  else if (normalize == "none") c.normalize = Normalize::none;
  else if (normalize == "global") c.normalize = Normalize::global;
  else if (normalize == "per-feature") c.normalize = Normalize::per_feature;
  else STRATA_THROW(config, "--normalize: unknown value '", normalize,
                    "' (expected auto, none, global or per-feature)");
  c.shuffle = !no_shuffle;
  c.overlap = !no_overlap;
  c.evaluate = !no_eval;
  STRATA_REQUIRE(c.dataset == "fashion-mnist" || c.dataset == "synthetic" ||
                     c.dataset.rfind("csv:", 0) == 0,
                 config, "--dataset: unknown data set '", c.dataset,
                 "' (expected fashion-mnist, synthetic or csv:PATH)");
  STRATA_REQUIRE(c.dataset != "csv:", config, "--dataset csv:PATH needs a path");
  STRATA_REQUIRE(!c.resume || !c.checkpoint_dir.empty(), config,
                 "--resume needs --checkpoint-dir (or use --resume-from FILE)");
  STRATA_REQUIRE(!(c.resume && !c.resume_from.empty()), config,
                 "--resume and --resume-from contradict each other; give one");
  STRATA_REQUIRE(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(), config,
                 "--checkpoint-every needs --checkpoint-dir");
  STRATA_REQUIRE(c.strategy == "auto" || c.strategy == "local" || c.strategy == "dp", config,
                 "--strategy: unknown strategy '", c.strategy, "' (expected auto, local or dp)");
  STRATA_REQUIRE(c.gemm == "auto" || c.gemm == "vendor" || c.gemm == "portable", config,
                 "--gemm: unknown value '", c.gemm, "' (expected auto, vendor or portable)");
  STRATA_REQUIRE(c.data_dir.empty() || c.dataset == "fashion-mnist", config,
                 "--data-dir applies to --dataset fashion-mnist only");
  STRATA_REQUIRE(c.loss != LossKind::mse || c.dataset != "fashion-mnist", config,
                 "--loss mse needs regression targets, but fashion-mnist has class labels "
                 "(use --loss cross-entropy)");
  // Validates the optimizer settings now rather than after loading data.
  validate(c.optimizer);
  return c;
}

}  // namespace strata::app
