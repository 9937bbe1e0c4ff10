// Trains a small MLP for a few steps with Strata's installed public API and
// checks that the loss is finite and goes down. Exit code 0 when it does,
// 1 otherwise (with a message saying what went wrong).
#include <strata/backends/error.hpp>
#include <strata/backends/runtime.hpp>
#include <strata/data/dataset.hpp>
#include <strata/data/loader.hpp>
#include <strata/layers/loss.hpp>
#include <strata/layers/mlp.hpp>
#include <strata/layers/optimizer.hpp>
#include <strata/strata_config.hpp>
#include <strata/strategies/local.hpp>

#include <cmath>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  using namespace strata;
  try {
    Runtime runtime(argc, argv);
    bool ok = false;
    {
      Context ctx;
      const std::size_t batch = 64, steps = 20;
      // 8 features, 3 classes, seeded: the same data on every machine.
      data::Dataset train = data::make_synthetic(batch, 8, data::CsvTask::classification, 3, 7);
      Sequential<float> model = make_mlp<float>({{8, 32, 3}, ActivationKind::relu});
      model.build(batch);
      model.init(Init::kaiming_uniform, 1);
      SoftmaxCrossEntropy<float> loss;
      Optimizer<float> optimizer({OptimizerKind::adam, 0.01}, model.num_params());
      Local<float> local(ctx, model, loss, optimizer);

      data::BatchLoader<float> loader(train, batch, false, 7);
      data::Batch<float> b;
      if (!loader.next(b)) {
        std::fprintf(stderr, "strata-downstream: the loader gave no batch\n");
        return 1;
      }
      double first = 0, last = 0;
      for (std::size_t step = 1; step <= steps; ++step) {
        last = local.step(b);  // the same batch every step: the loss must fall
        if (step == 1) first = last;
        if (!std::isfinite(last)) {
          std::fprintf(stderr, "strata-downstream: loss is %f at step %zu\n", last, step);
          return 1;
        }
      }
      std::printf("Strata %s: loss %.6f after 1 step, %.6f after %zu steps\n", STRATA_VERSION,
                  first, last, steps);
      ok = last < first;
      if (!ok) std::fprintf(stderr, "strata-downstream: the loss did not decrease\n");
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-downstream: %s\n", e.what());
    return 1;
  }
}
