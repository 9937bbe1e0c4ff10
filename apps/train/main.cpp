// strata-train: trains a multi-layer perceptron on Fashion-MNIST, a CSV file
// or synthetic data, and reports the loss, the test accuracy and the speed.
#include "apps/common/app_main.hpp"
#include "apps/common/progress.hpp"
#include "apps/train/train_config.hpp"
#include "backends/runtime.hpp"
#include "data/loader.hpp"
#include "layers/mlp.hpp"
#include "strategies/local.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>

namespace strata::app {
namespace {

using Clock = std::chrono::steady_clock;
using T = float;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Appends JSON lines to the --metrics file; a no-op without one.
class Metrics {
 public:
  explicit Metrics(const std::string& path) : path_(path) {
    if (path.empty()) return;
    out_.open(path, std::ios::trunc);
    STRATA_REQUIRE(out_.good(), config, "--metrics: cannot open '", path, "' for writing");
  }
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << "\n";
    out_.flush();
    STRATA_REQUIRE(out_.good(), runtime, "--metrics: write to '", path_, "' failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

data::Split load_data(const TrainConfig& c) {
  const std::size_t in = c.layers.front(), out = c.layers.back();
  const auto task = c.loss == LossKind::cross_entropy ? data::CsvTask::classification
                                                       : data::CsvTask::regression;
  data::Split s;
  Normalize norm = c.normalize;
  if (c.dataset == "fashion-mnist") {
    s = data::load_fashion_mnist(c.data_dir.empty() ? data::default_fashion_mnist_dir()
                                                    : c.data_dir);
    if (norm == Normalize::automatic) norm = Normalize::global;
  } else if (c.dataset == "synthetic") {
    STRATA_REQUIRE(c.samples >= 2 || c.test_fraction == 0, config,
                   "--samples must be at least 2 to hold out a test set");
    s = data::split_tail(
        data::make_synthetic(c.samples, in, task, out, c.seed), c.evaluate ? c.test_fraction : 0.0);
    if (norm == Normalize::automatic) norm = Normalize::none;
  } else {
    const std::string path = c.dataset.substr(4);
    s = data::split_tail(data::read_csv(path, task, 0, out), c.evaluate ? c.test_fraction : 0.0);
    if (norm == Normalize::automatic) norm = Normalize::per_feature;
  }
  if (norm != Normalize::none) {
    const auto n = data::Normalizer::fit(s.train, norm == Normalize::per_feature);
    n.apply(s.train);
    if (s.test.size() > 0) n.apply(s.test);
  }
  // The model must fit the data.
  STRATA_REQUIRE(s.train.features == in, config, "--layers starts with width ", in, " but ",
                 s.train.name, " has ", s.train.features, " features per sample");
  if (task == data::CsvTask::classification) {
    STRATA_REQUIRE(s.train.classes <= out, config, "--layers ends with width ", out, " but ",
                   s.train.name, " has ", s.train.classes,
                   " classes (the output layer needs one output per class)");
  } else {
    STRATA_REQUIRE(s.train.target_width == out, config, "--layers ends with width ", out,
                   " but ", s.train.name, " has targets of width ", s.train.target_width);
  }
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int train(const TrainConfig& c) {
  const auto wall0 = Clock::now();
  Progress progress(!c.quiet);
  data::Split d = load_data(c);
  const std::size_t batch = std::min(c.batch_size, d.train.size());

  GemmBackend gemm = c.gemm == "portable" ? GemmBackend::portable
                     : c.gemm == "vendor" || Blas::vendor_available() ? GemmBackend::vendor
                                                                      : GemmBackend::portable;
  Context ctx(gemm);
  MlpSpec spec{c.layers, c.activation, c.dropout, c.seed};
  Sequential<T> model = make_mlp<T>(spec);
  model.build(batch);
  model.init(c.init, c.seed);
  auto loss = make_loss<T>(c.loss);
  Optimizer<T> optimizer(c.optimizer, model.num_params());
  Local<T> strategy(ctx, model, *loss, optimizer);
  data::BatchLoader<T> loader(d.train, batch, c.shuffle, c.seed);
  Metrics metrics(c.metrics);

  const std::size_t per_epoch = loader.batches_per_epoch();
  const std::size_t total = c.steps > 0 ? c.steps : c.epochs * per_epoch;
  const std::size_t epochs = (total + per_epoch - 1) / per_epoch;
  progress.line(build_summary() + ", " + std::to_string(ExecSpace().concurrency()) + " threads");
  progress.line("model: " + std::to_string(model.num_params()) + " parameters, " +
                std::to_string(d.train.size()) + " training samples (" + d.train.name +
                "), batch " + std::to_string(batch) + ", " + std::to_string(total) +
                " steps in " + std::to_string(epochs) + " epoch(s)");

  std::size_t step = 0, timed_samples = 0;
  double timed_s = 0, last_loss = 0;
  Evaluation eval;
  const auto train0 = Clock::now();
  for (std::size_t epoch = 0; epoch < epochs && step < total; ++epoch) {
    loader.seek(epoch, 0);
    data::Batch<T> b;
    while (step < total && loader.next(b)) {
      const auto t0 = Clock::now();
      last_loss = strategy.step(b);
      ++step;
      if (!std::isfinite(last_loss))
        STRATA_THROW(runtime, "training diverged: the loss is ", last_loss, " at step ", step,
                     " (epoch ", epoch + 1, "); try a smaller --lr");
      if (step > c.warmup_steps) {
        timed_s += seconds_since(t0);
        timed_samples += b.size();
      }
      const bool log = c.log_every > 0 && (step % c.log_every == 0 || step == total);
      const double rate = timed_s > 0 ? timed_samples / timed_s : 0;
      if (log) {
        metrics.write({{"step", step}, {"epoch", epoch + 1}, {"loss", last_loss}});
        if (!progress.tty())
          progress.line("epoch " + std::to_string(epoch + 1) + " step " + std::to_string(step) +
                        "/" + std::to_string(total) + " loss " + fmt("%.6f", last_loss) +
                        (rate > 0 ? " " + fmt("%.0f", rate) + " samples/s" : ""));
      }
      if (progress.tty() && (step % 10 == 0 || step == total)) {
        const double elapsed = seconds_since(train0);
        progress.status("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) +
                        "  step " + std::to_string(step) + "/" + std::to_string(total) +
                        "  loss " + fmt("%.4f", last_loss) + "  " + fmt("%.0f", rate) +
                        " samples/s  ETA " +
                        format_duration(elapsed / step * (total - step)));
      }
    }
    if (c.evaluate && d.test.size() > 0) {
      eval = evaluate(ctx, model, *loss, d.test, batch);
      nlohmann::json j{{"step", step}, {"epoch", epoch + 1}};
      std::string text = "epoch " + std::to_string(epoch + 1) + ": ";
      if (d.test.is_classification()) {
        j["test_accuracy"] = eval.accuracy;
        j["test_loss"] = eval.loss;
        text += "test accuracy " + fmt("%.4f", eval.accuracy) + ", test loss " + fmt("%.4f", eval.loss);
      } else {
        j["test_loss"] = eval.loss;
        text += "test loss " + fmt("%.6f", eval.loss);
      }
      metrics.write(j);
      progress.line(text);
    }
  }
  const double rate = timed_s > 0 ? timed_samples / timed_s : 0;
  const double wall = seconds_since(wall0);
  metrics.write({{"steps", step},
                 {"final_loss", last_loss},
                 {"samples_per_sec", rate},
                 {"wall_s", wall}});
  std::string result = "done: " + std::to_string(step) + " steps, final loss " +
                       fmt("%.6f", last_loss);
  if (c.evaluate && d.test.size() > 0)
    result += d.test.is_classification() ? ", test accuracy " + fmt("%.4f", eval.accuracy)
                                         : ", test loss " + fmt("%.6f", eval.loss);
  result += ", " + fmt("%.0f", rate) + " samples/s, " + fmt("%.1f", wall) + " s";
  std::cout << result << std::endl;
  return exit_ok;
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  return guarded("strata-train", [&] {
    auto args = split_kokkos_args(argc, argv);
    auto config = parse_train_args(args.program);
    if (!config) return exit_ok;
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    strata::Runtime runtime(kargc, args.kokkos.data());
    return train(*config);
  });
}
