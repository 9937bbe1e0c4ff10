// The tutorial's nn.DataParallel and DistributedDataParallel snippets in one
// Strata program (see the side-by-side table in docs/parallelism.md, "From PyTorch").
//
//   model = nn.DataParallel(SimpleModel())      run_ranks(N, ...) + DataParallel over
//                                                thread ranks (one process)
//   mp.spawn(train, nprocs=world_size)          mpirun -np N strata-example-data-parallel
//   dist.init_process_group("gloo", ...)        world_communicator() (MPI under mpirun)
//   ddp_model = DDP(model)                      DataParallel<float> ddp(ctx, comm, model, ...)
//   loss.backward(); optimizer.step()           ddp.step(shard, global_batch)
//
// Without mpirun the ranks are threads (--ranks); under mpirun each process
// is one rank (as with DDP) and --ranks is refused. The gradients are
// averaged over all ranks; every rank takes its shard of the tutorial's
// batch of 32.
#include "apps/examples/tutorial.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "data/loader.hpp"
#include "strategies/data_parallel.hpp"

#include <cstdio>

namespace strata::examples {

// def train(rank, world_size): the body every rank runs.
void train(Context& ctx, comm::Communicator& comm, const TutorialOptions& o) {
  const std::size_t batch = 32;
  const auto [first, rows] = data::BatchLoader<float>::shard(batch, comm.rank(), comm.size());
  Sequential<float> model = simple_model(std::max<std::size_t>(rows, 1), o.seed);
  MeanSquaredError<float> criterion;
  Optimizer<float> optimizer({OptimizerKind::sgd, 0.01}, model.num_params());
  DataParallel<float> ddp(ctx, comm, model, criterion, optimizer);  // DDP(model)
  auto [inputs, targets] = random_batch(o.seed, first, rows, o.target_width);
  data::Batch<float> shard{inputs, Targets<float>{Labels(), targets}};
  for (std::size_t step = 1; step <= o.steps; ++step) {
    const double loss = ddp.step(shard, batch);  // forward, backward, allreduce, step
    if (comm.rank() == 0 && (step == 1 || step % 10 == 0))
      std::printf("step %zu loss %.6f (%d ranks, %s)\n", step, loss, comm.size(),
                  comm.name().c_str());
  }
}

}  // namespace strata::examples

int main(int argc, char** argv) {
  using namespace strata;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<comm::Communicator> world;
  const int code = app::guarded("strata-example-data-parallel", [&] {
    auto args = app::split_kokkos_args(argc, argv);
    auto o = examples::parse_tutorial(
        "strata-example-data-parallel",
        "The tutorial's SimpleModel trained data-parallel: thread ranks (nn.DataParallel), or "
        "MPI processes under mpirun (DistributedDataParallel with mp.spawn).",
        args.program, true);
    if (!o) return app::exit_ok;
    const bool under_mpi = launched_by_mpi();
    STRATA_REQUIRE(!under_mpi || !o->ranks_given || o->ranks == 1, config, "--ranks ", o->ranks,
                   ": under mpirun each process is one rank (use mpirun -np N)");
    const int ranks = under_mpi ? 1 : o->ranks;
    std::string threads = kokkos_threads_option(ranks);
    args.kokkos.insert(args.kokkos.end() - 1, threads.data());
    int kargc = static_cast<int>(args.kokkos.size()) - 1;
    runtime = std::make_unique<Runtime>(kargc, args.kokkos.data());
    world = world_communicator();  // dist.init_process_group
    if (world->size() > 1) {       // one rank per process
      Context ctx;
      examples::train(ctx, *world, *o);
    } else {                       // mp.spawn / nn.DataParallel: thread ranks
      run_ranks(ranks, 1, [&](Context& ctx, comm::Communicator& c) { examples::train(ctx, c, *o); });
    }
    world.reset();
    return app::exit_ok;
  });
  if (code != app::exit_ok && world && world->size() > 1) Runtime::abort(code);
  return code;
}
