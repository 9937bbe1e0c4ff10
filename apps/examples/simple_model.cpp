// The PyTorch tutorial's SimpleModel, in Strata:
//
//   class SimpleModel(nn.Module):            Sequential<float> model(10);
//       fc1 = nn.Linear(10, 5)               model.add(Linear(10, 5))
//       relu = nn.ReLU()                     model.add(ReLU)
//       fc2 = nn.Linear(5, 2)                model.add(Linear(5, 2))
//   criterion = nn.MSELoss()                 MeanSquaredError<float> loss
//   optimizer = optim.SGD(lr=0.01)           Optimizer<float>({sgd, lr 0.01})
//   inputs = torch.randn(32, 10)             synthetic (32, 10)
//   targets = torch.randn(32, 5)             synthetic (32, --target-width)
//
// The tutorial's targets are (32, 5) for a model whose output is (32, 2);
// PyTorch broadcasts or fails late. Strata refuses the mismatch up front:
// run with --target-width 5 to see the error (exit code 2). The default,
// --target-width 2, trains.
#include "apps/examples/tutorial.hpp"
#include "backends/runtime.hpp"
#include "layers/loss.hpp"
#include "layers/optimizer.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  using namespace strata;
  return app::guarded("strata-example-simple-model", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    auto o = examples::parse_tutorial(
        "strata-example-simple-model",
        "The PyTorch tutorial's SimpleModel (Linear 10->5, ReLU, Linear 5->2, MSE, SGD lr 0.01, "
        "batch 32) trained on one random batch.",
        args.program, false);
    if (!o) return app::exit_ok;
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    Runtime runtime(kargc, args.kokkos.data());
    {
      Context ctx;
      const std::size_t batch = 32;
      Sequential<float> model = examples::simple_model(batch, o->seed);  // model = SimpleModel()
      MeanSquaredError<float> criterion;                                 // nn.MSELoss()
      Optimizer<float> optimizer({OptimizerKind::sgd, 0.01}, model.num_params());
      auto [inputs, targets] = examples::random_batch(o->seed, 0, batch, o->target_width);
      Targets<float> t{Labels(), targets};
      for (std::size_t step = 1; step <= o->steps; ++step) {
        model.zero_grad(ctx);                                 // optimizer.zero_grad()
        auto outputs = model.forward(ctx, inputs);            // outputs = model(inputs)
        const double loss =                                   // loss = criterion(outputs, targets)
            criterion.forward_backward(ctx, outputs, t, model.output_grad(), 1.0f / batch).value() / batch;
        model.backward(ctx);                                  // loss.backward()
        optimizer.step(ctx, model.params(), model.grads());   // optimizer.step()
        if (step == 1 || step % 10 == 0) std::printf("step %zu loss %.6f\n", step, loss);
      }
    }
    return app::exit_ok;
  });
}
