// Everything that runs on MPI ranks, run by ctest under mpirun at 1, 2 and 4
// ranks: the MPI communicator (every collective against the naive reference,
// the same checks as thread ranks; split; send/recv; the checking mode's
// mismatch error), the hierarchical communicator (thread ranks inside each
// process), and data parallelism against single-rank training.
#include "backends/comm/hierarchical.hpp"
#include "backends/comm/mpi.hpp"
#include "backends/comm/self.hpp"
#include "backends/device.hpp"
#include "backends/device_check.hpp"
#include "backends/ranks.hpp"
#include "backends/world.hpp"
#include "comm_checks.hpp"
#include "dp_harness.hpp"
#include "repro_harness.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <Kokkos_Core.hpp>

namespace strata {
namespace {

using comm::DataType;
using comm::ReduceOp;

TEST(Mpi, EveryCollectiveMatchesTheReference) {
  comm::MpiComm c(MPI_COMM_WORLD, false);
  EXPECT_EQ(test::check_all_collectives(c), "");
}

TEST(Mpi, SixteenBitReductionsSumInFloatAndRoundOnce) {
  comm::MpiComm c(MPI_COMM_WORLD, false);
  EXPECT_EQ(test::check_16bit<bf16>(c), "");
  EXPECT_EQ(test::check_16bit<fp16>(c), "");
}

TEST(Mpi, SendRecvRing) {
  comm::MpiComm c(MPI_COMM_WORLD, false);
  EXPECT_EQ(test::check_ring(c), "");
}

TEST(Mpi, SplitIntoRowsAndColumnsOfA2x2Mesh) {
  comm::MpiComm c(MPI_COMM_WORLD, false);
  if (c.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  EXPECT_EQ(test::check_mesh_split(c), "");
}

TEST(Mpi, CheckingModeNamesAMismatch) {
  comm::CommOptions o;
  o.check = true;
  o.timeout_s = 20;
  comm::MpiComm c(MPI_COMM_WORLD, false, o);
  if (c.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> v(11);
  try {
    c.allreduce(v.data(), v.data(), c.rank() == 0 ? 10 : 11, DataType::f32, ReduceOp::sum);
    FAIL() << "expected a mismatch error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("collective mismatch"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.message();
  }
  // The communicator stays usable for matching calls.
  c.allreduce(v.data(), v.data(), 11, DataType::f32, ReduceOp::sum);
}

TEST(Hierarchical, EveryCollectiveWithTwoThreadRanksPerProcess) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  std::vector<std::string> errors(2);
  comm::run_thread_ranks(2, [&](comm::Communicator& local) {
    comm::HierarchicalComm h(local, local.rank() == 0 ? &world : nullptr);
    EXPECT_EQ(h.size(), 2 * world.size());
    EXPECT_EQ(h.rank(), 2 * world.rank() + local.rank());
    errors[local.rank()] = test::check_all_collectives(h);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// allocate_shared: allreduce of a buffer in the node's shared-memory window
// (reduced in place across processes) equals MPI's allreduce of a private
// copy, for every type and operation, counts not divisible by the ranks and
// buffers at an offset inside the window.
// Ranks per node as MPI sees them (MPI_COMM_TYPE_SHARED).
struct NodeLayout {
  int nodes = 1, min_per_node = 1, max_per_node = 1, local_rank = 0;
};

NodeLayout node_layout() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  NodeLayout l;
  int size = 0, leader = 0;
  MPI_Comm_rank(node, &l.local_rank);
  MPI_Comm_size(node, &size);
  leader = l.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&leader, &l.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&size, &l.min_per_node, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&size, &l.max_per_node, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Comm_free(&node);
  return l;
}

// The node-local rank Strata reads from the launcher's environment (Open MPI,
// Slurm, ...: it picks each process's GPU) is the rank within MPI's node.
TEST(Mpi, NodeLocalRankFromTheLauncherIsTheRankWithinTheNode) {
  const NodeLayout layout = node_layout();
  const int from_env = device::local_rank_from_environment();
  if (from_env < 0) GTEST_SKIP() << "the launcher sets no node-local rank variable";
  EXPECT_EQ(from_env, layout.local_rank) << "on " << layout.nodes << " nodes";
}

// The thread ranks' spin rule counts every process's threads on the node:
// node_threads sums what the processes of this node run (MPI's node
// communicator as the oracle).
TEST(Mpi, NodeThreadsSumsTheProcessesOfThisNode) {
  comm::MpiComm c(MPI_COMM_WORLD, false);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int here = 0, mine = c.rank() + 1, sum = 0;
  MPI_Comm_size(node, &here);
  MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, node);
  MPI_Comm_free(&node);
  EXPECT_EQ(node_threads(c, mine), sum) << here << " process(es) on this node";
}

TEST(Mpi, SharedMemoryAllreduceMatchesMpi) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  const std::size_t capacity = 1 << 16;
  void* shared = world.allocate_shared(capacity * sizeof(double));
  // The oracle for the layout: MPI's own shared-memory groups. Windows need
  // at least two ranks on every node and the same number on each; across
  // simulated or real nodes (scripts/cluster-sim.sh) the rest falls back to
  // plain MPI.
  const NodeLayout layout = node_layout();
  if (layout.min_per_node < 2 || layout.min_per_node != layout.max_per_node) {
    EXPECT_EQ(shared, nullptr) << layout.nodes << " nodes, " << layout.min_per_node << "-"
                               << layout.max_per_node << " ranks per node";
    return;
  }
  ASSERT_NE(shared, nullptr) << layout.nodes << " nodes of " << layout.min_per_node << " ranks";
  auto* base = static_cast<double*>(shared);
  for (std::size_t count : {std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(40001)}) {
    for (comm::ReduceOp op : {comm::ReduceOp::sum, comm::ReduceOp::average, comm::ReduceOp::max,
                              comm::ReduceOp::min}) {
      const std::size_t offset = count % 5;  // not at the start of the window
      double* buf = base + offset;
      std::vector<double> mine(count);
      for (std::size_t i = 0; i < count; ++i)
        mine[i] = std::sin(double(i + 1) * (world.rank() + 1)) * 1000.0;
      std::copy(mine.begin(), mine.end(), buf);
      world.allreduce(buf, buf, count, comm::DataType::f64, op);
      std::vector<double> expect(count);
      MPI_Allreduce(mine.data(), expect.data(), static_cast<int>(count), MPI_DOUBLE,
                    op == comm::ReduceOp::max ? MPI_MAX : op == comm::ReduceOp::min ? MPI_MIN : MPI_SUM,
                    MPI_COMM_WORLD);
      if (op == comm::ReduceOp::average)
        for (double& v : expect) v /= world.size();
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_NEAR(buf[i], expect[i], 1e-12 * (1 + std::fabs(expect[i])))
            << "count " << count << " op " << comm::to_string(op) << " element " << i;
      // Every rank holds the same bits.
      std::vector<double> first(buf, buf + count);
      MPI_Bcast(first.data(), static_cast<int>(count), MPI_DOUBLE, 0, MPI_COMM_WORLD);
      ASSERT_TRUE(std::equal(first.begin(), first.end(), buf)) << "count " << count;
    }
  }
  // Integers too.
  auto* ints = static_cast<std::int64_t*>(shared);
  for (int i = 0; i < 100; ++i) ints[i] = world.rank() * 100 + i;
  world.allreduce(ints, ints, 100, comm::DataType::i64, comm::ReduceOp::sum);
  const std::int64_t n = world.size();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(ints[i], 100 * n * (n - 1) / 2 + n * i);
}

// Model parallelism over MPI processes: the whole world as a pipeline, as a
// tensor-parallel group, and (4 ranks) as dp2 x pp2 (with and without
// ZeRO-1) and pp2 x tp2 meshes.
ModelParallelOptions mesh_options(int dp, int pp, int tp, std::size_t micro = 1) {
  ModelParallelOptions o;
  o.mesh = {dp, pp, tp};
  o.micro_batches = micro;
  return o;
}

TEST(DataParallelMpi, MatchesSingleRankTraining) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig c;
  c.batch = 11;  // uneven shards
  Context ctx;
  EXPECT_EQ(test::compare(test::train_dp(ctx, world, c), test::train_single(c), 1e-5), "");
}

TEST(DataParallelMpi, ResidualModelFileMatchesSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig c;
  c.model = test::residual_model(true);
  Context ctx;
  EXPECT_EQ(test::compare(test::train_dp(ctx, world, c), test::train_single(c), 1e-5), "");
  auto o = mesh_options(1, world.size(), 1, 3);
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, o), test::train_single(c), 1e-5), "")
      << "pipeline over every rank";
}

// The GPT (dropout, head tied to the embedding) over MPI processes: data
// parallel, and a pipeline over every rank (the tied weight's copy on the
// last stage kept in sync through MPI).
TEST(DataParallelMpi, GptMatchesSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  const test::DpConfig c = test::gpt_config(true);
  Context ctx;
  const auto single = test::train_single(c);
  EXPECT_EQ(test::compare(test::train_dp(ctx, world, c), single, 1e-5), "");
  auto o = mesh_options(1, world.size(), 1, 3);
  const auto piped = test::train_model_parallel(ctx, world, c, o);
  EXPECT_EQ(test::compare(piped, single, 1e-5), "") << "pipeline over every rank";
  EXPECT_EQ(piped.tie_drift, 0.0);
  // Tensor parallelism over every rank (heads, MLP, vocabulary and the
  // parallel cross-entropy; 4 heads and a vocabulary of 12 divide 1, 2, 4).
  const test::DpConfig t = test::gpt_config(true, 4, 12);
  const auto split = test::train_model_parallel(ctx, world, t, mesh_options(1, 1, world.size(), 1));
  EXPECT_EQ(test::compare(split, test::train_single(t), 1e-5), "") << "tensor parallel over every rank";
}

TEST(DataParallelMpi, SyncBatchNormMatchesSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig c;
  c.features = 72;
  c.model = test::batchnorm_cnn_model(true);
  c.batch = 11;  // uneven shards
  c.steps = 12;
  Context ctx;
  EXPECT_EQ(test::compare(test::train_dp(ctx, world, c), test::train_single(c), 1e-5), "");
}

TEST(DataParallelMpi, HierarchicalTwoThreadRanksPerProcessMatchesSingleRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig c;
  const auto single = test::train_single(c);
  run_ranks(2, 1, [&](Context& ctx, comm::Communicator& local) {
    comm::HierarchicalComm h(local, local.rank() == 0 ? &world : nullptr);
    EXPECT_EQ(test::compare(test::train_dp(ctx, h, c), single, 1e-5), "") << "rank " << h.rank();
  });
}

TEST(ModelParallelMpi, PipelineOverEveryRankMatchesSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig c;
  Context ctx;
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    auto o = mesh_options(1, world.size(), 1, 4);
    o.schedule = s;
    EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, o), test::train_single(c), 1e-5), "")
        << to_string(s);
  }
}

TEST(ModelParallelMpi, TensorParallelOverEveryRankMatchesSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig c;
  Context ctx;
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, mesh_options(1, 1, world.size())),
                          test::train_single(c), 1e-5),
            "");
}

TEST(ModelParallelMpi, MeshesOfFourRanksMatchSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  test::DpConfig c;
  c.widths = {12, 16, 8, 8, 3};
  Context ctx;
  const auto single = test::train_single(c);
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, mesh_options(2, 2, 1, 3)), single, 1e-5), "");
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, mesh_options(1, 2, 2, 2)), single, 1e-5), "");
  auto o = mesh_options(2, 2, 1, 3);
  o.zero = 1;
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, o), single, 1e-5), "");
  // ZeRO-2 and 3 in units of layers (64 bytes: one per layer with
  // parameters), over processes; and ZeRO-3 over all four as data parallel.
  o.bucket_bytes = 64;
  for (int zero : {2, 3}) {
    o.zero = zero;
    EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, o), single, 1e-5), "")
        << "dp2 x pp2 ZeRO-" << zero;
  }
  auto d = mesh_options(4, 1, 1);
  d.zero = 3;
  d.bucket_bytes = 64;
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, d), single, 1e-5), "") << "dp4 ZeRO-3";
}

// --reproducible over MPI processes (ctest runs this at 1, 2, 3 and 4
// processes): the same bits as one rank trained in this process (a
// communicator of one), by memcmp of the losses, the parameters and the
// checkpoint's payload; data parallel over every process, and over two
// thread ranks per process (hierarchical: shared memory inside a process,
// MPI between processes).
EngineOptions reproducible_options(std::size_t chunk) {
  EngineOptions o;
  o.reproducible_chunk = chunk;
  return o;
}

test::Bits one_rank_reference(const test::DpConfig& c, const EngineOptions& o,
                              comm::Communicator& world) {
  test::Bits ref;
  comm::SelfComm self;
  Context ctx;
  const std::string dir = test::repro_dir(world, "self");  // every process takes part
  if (world.rank() == 0) {
    ref = test::train_engine(ctx, self, c, o, dir);
    std::filesystem::remove_all(dir);
  }
  world.barrier();
  return ref;
}

// c trained with o over every process (rank 0's view; the checkpoint
// folder removed afterwards).
test::Bits train_on_world(const test::DpConfig& c, const EngineOptions& o,
                          comm::Communicator& world, const std::string& tag) {
  Context ctx;
  const std::string dir = test::repro_dir(world, tag);
  const test::Bits got = test::train_engine(ctx, world, c, o, dir);
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  return got;
}

test::DpConfig reproducible_mlp() {
  test::DpConfig c;
  c.dropout = 0.2;
  c.batch = 48;  // whole chunks of 2 on 1, 2, 3, 4 processes, with 1 or 2 thread ranks each
  c.samples = 96;
  return c;
}

// The MLP with Dropout, and the CNN with SyncBatchNorm (its statistics'
// exact sums go over MPI too).
TEST(ReproducibleMpi, DataParallelIsBitwiseOneRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  test::DpConfig cnn = reproducible_mlp();
  cnn.features = 72;
  cnn.model = test::batchnorm_cnn_model(true);
  for (const test::DpConfig& c : {reproducible_mlp(), cnn}) {
    const EngineOptions o = reproducible_options(2);
    const test::Bits ref = one_rank_reference(c, o, world);
    const test::Bits got = train_on_world(c, o, world, "dp");
    if (world.rank() == 0)
      EXPECT_EQ(test::compare_bits(got, ref), "")
          << world.size() << " processes, " << (c.model.empty() ? "MLP" : "SyncBatchNorm CNN");
  }
}

TEST(ReproducibleMpi, HierarchicalTwoThreadRanksPerProcessIsBitwiseOneRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  comm::MpiComm world(MPI_COMM_WORLD, false);
  const test::DpConfig c = reproducible_mlp();
  const EngineOptions o = reproducible_options(2);
  const test::Bits ref = one_rank_reference(c, o, world);
  const std::string dir = test::repro_dir(world, "hier");
  run_ranks(2, 1, [&](Context& ctx, comm::Communicator& local) {
    comm::HierarchicalComm h(local, local.rank() == 0 ? &world : nullptr);
    const test::Bits got = test::train_engine(ctx, h, c, o, dir);
    if (h.rank() == 0) EXPECT_EQ(test::compare_bits(got, ref), "") << h.size() << " ranks";
  });
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

// Tensor parallelism over processes (an even number of them: tp 2 x dp
// size / 2; the tensor chunk's pairs and the vocabulary-parallel softmax's
// go over MPI), the GPT with a vocabulary tp divides.
TEST(ReproducibleMpi, TensorParallelIsBitwiseOneRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  if (world.size() % 2 != 0) GTEST_SKIP() << "tensor parallelism over 2 needs an even count";
  test::DpConfig c = test::gpt_config(true, 2, 12);
  c.batch = 12;
  c.samples = 48;
  EngineOptions o = reproducible_options(1);
  o.reproducible_tp_chunk = 2;
  const test::Bits ref = one_rank_reference(c, o, world);
  o.model_parallel = true;
  o.mesh.mesh = {world.size() / 2, 1, 2};
  const test::Bits got = train_on_world(c, o, world, "tp");
  if (world.rank() == 0)
    EXPECT_EQ(test::compare_bits(got, ref), "") << "tp 2 x dp " << world.size() / 2;
  // Sequence parallelism: the reduce-scatters of exact pairs and the
  // LayerNorm gradients summed as exact pairs over processes.
  o.mesh.sequence_parallel = true;
  const test::Bits sp = train_on_world(c, o, world, "sp");
  if (world.rank() == 0)
    EXPECT_EQ(test::compare_bits(sp, ref), "") << "tp 2 x dp " << world.size() / 2 << ", sequence parallel";
}

// Sequence parallelism over processes against one rank: the GPT (with
// Dropout) at tp 2, as a dp x tp 2 mesh over every process (1e-5 relative,
// as ModelParallel's thread-rank tests).
TEST(ModelParallelMpi, SequenceParallelMatchesSingleRank) {
  comm::MpiComm world(MPI_COMM_WORLD, false);
  if (world.size() % 2 != 0) GTEST_SKIP() << "tensor parallelism over 2 needs an even count";
  const test::DpConfig c = test::gpt_config(true, 4, 12);
  Context ctx;
  auto o = mesh_options(world.size() / 2, 1, 2);
  o.sequence_parallel = true;
  EXPECT_EQ(test::compare(test::train_model_parallel(ctx, world, c, o), test::train_single(c), 1e-5), "")
      << "dp " << world.size() / 2 << " x tp 2, sequence parallel";
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::comm::mpi::initialize(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // one report, from rank 0; failures elsewhere still fail the run
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  // Two thread ranks per process need two Kokkos threads.
  std::string threads = strata::kokkos_threads_option(2);
  std::vector<char*> args(argv, argv + argc);
  args.push_back(threads.data());
  int kargc = static_cast<int>(args.size());
  args.push_back(nullptr);
  setenv("OMP_PROC_BIND", "false", 0);
  Kokkos::initialize(kargc, args.data());
  // STRATA_DEVICE_CHECK=1: Kokkos memory counts as device memory (backends/device_check.hpp).
  if (strata::device::check::requested()) strata::device::check::start();
  int failed = RUN_ALL_TESTS();
  Kokkos::finalize();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  strata::comm::mpi::finalize();
  return any;
}
