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
#include "apps/common/app_main.hpp"
#include "backends/random.hpp"
#include "backends/runtime.hpp"
#include "layers/mlp.hpp"
#include "layers/loss.hpp"
#include "layers/optimizer.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  using namespace strata;
  return app::guarded("strata-example-simple-model", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    CLI::App cli{"The PyTorch tutorial's SimpleModel (Linear 10->5, ReLU, Linear 5->2, MSE, "
                 "SGD lr 0.01, batch 32) trained on one random batch.",
                 "strata-example-simple-model"};
    std::size_t steps = 100, target_width = 2;
    std::uint64_t seed = 0;
    cli.add_option("--steps", steps, "training steps")->capture_default_str();
    cli.add_option("--target-width", target_width,
                   "width of the random targets (the tutorial used 5, which does not match the "
                   "model's 2 outputs)")
        ->capture_default_str();
    cli.add_option("--seed", seed, "random seed")->capture_default_str();
    std::vector<std::string> rev(args.program.rbegin(), args.program.rend());
    try {
      cli.parse(rev);
    } catch (const CLI::CallForHelp&) {
      std::cout << cli.help();
      return app::exit_ok;
    } catch (const CLI::ParseError& e) {
      STRATA_THROW(config, e.what());
    }
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    Runtime runtime(kargc, args.kokkos.data());
    {
      Context ctx;
      const std::size_t batch = 32;
      Sequential<float> model = make_mlp<float>({{10, 5, 2}, ActivationKind::relu});
      model.build(batch);
      model.init(Init::torch_default, seed);
      MeanSquaredError<float> criterion;
      Optimizer<float> optimizer({OptimizerKind::sgd, 0.01}, model.num_params());

      // inputs = torch.randn(32, 10); targets = torch.randn(32, target_width)
      MatrixBuffer<float> inputs("inputs", batch, 10), targets("targets", batch, target_width);
      auto hi = Kokkos::create_mirror_view(inputs);
      auto ht = Kokkos::create_mirror_view(targets);
      for (std::size_t i = 0; i < hi.size(); ++i)
        hi.data()[i] = static_cast<float>(random::normal(seed, random::stream_synthetic, i));
      for (std::size_t i = 0; i < ht.size(); ++i)
        ht.data()[i] = static_cast<float>(random::normal(seed, random::stream_synthetic + 1, i));
      Kokkos::deep_copy(inputs, hi);
      Kokkos::deep_copy(targets, ht);
      Targets<float> t{Labels(), targets};

      for (std::size_t step = 1; step <= steps; ++step) {
        model.zero_grad(ctx);                                  // optimizer.zero_grad()
        auto outputs = model.forward(ctx, inputs);             // outputs = model(inputs)
        const double loss =                                    // loss = criterion(outputs, targets)
            criterion.forward_backward(ctx, outputs, t, model.output_grad(), 1.0f / batch) / batch;
        model.backward(ctx);                                   // loss.backward()
        optimizer.step(ctx, model.params(), model.grads());    // optimizer.step()
        if (step == 1 || step % 10 == 0) std::printf("step %zu loss %.6f\n", step, loss);
      }
    }
    return app::exit_ok;
  });
}
