// Communicators on thread ranks (1, 2, 3, 4) and Self: every collective
// against the naive reference, split, send/recv, asynchronous order, and the
// promised errors for mismatched collectives, failing and missing ranks.
#include "backends/comm/progress.hpp"
#include "backends/comm/registry.hpp"
#include "backends/comm/self.hpp"
#include "backends/device.hpp"
#include "backends/ranks.hpp"
#include "backends/comm/threads.hpp"
#include "backends/world.hpp"
#include "comm_checks.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <mutex>
#include <stdexcept>

namespace strata {
namespace {

using comm::Communicator;
using comm::DataType;
using comm::ReduceOp;

// Runs body on n thread ranks and returns the per-rank failure texts ("" = ok).
std::vector<std::string> on_ranks(int n, const std::function<std::string(Communicator&)>& body,
                                  comm::CommOptions options = {}) {
  std::vector<std::string> result(n);
  comm::run_thread_ranks(
      n, [&](Communicator& c) { result[c.rank()] = body(c); }, options);
  return result;
}

class ThreadRanks : public ::testing::TestWithParam<int> {};

TEST_P(ThreadRanks, EveryCollectiveMatchesTheReference) {
  for (const auto& err : on_ranks(GetParam(), test::check_all_collectives)) EXPECT_EQ(err, "");
}

TEST_P(ThreadRanks, SixteenBitReductionsSumInFloatAndRoundOnce) {
  for (const auto& err : on_ranks(GetParam(), test::check_16bit<bf16>)) EXPECT_EQ(err, "");
  for (const auto& err : on_ranks(GetParam(), test::check_16bit<fp16>)) EXPECT_EQ(err, "");
}

TEST_P(ThreadRanks, SendRecvRing) {
  for (const auto& err : on_ranks(GetParam(), test::check_ring)) EXPECT_EQ(err, "");
}

TEST_P(ThreadRanks, AllreduceIsBitwiseIdenticalOnEveryRankAndInRankOrder) {
  // Random floats: the sum depends on the order; thread ranks add in rank order.
  const int n = GetParam();
  const std::size_t count = 100003;
  std::vector<std::vector<float>> results(n);
  comm::run_thread_ranks(n, [&](Communicator& c) {
    auto v = test::randn<float>(count, 100 + c.rank());
    c.allreduce(v.data(), v.data(), count, DataType::f32, ReduceOp::sum);
    results[c.rank()] = v;
  });
  std::vector<float> want(count, 0.0f);
  for (int r = 0; r < n; ++r) {
    auto v = test::randn<float>(count, 100 + r);
    for (std::size_t i = 0; i < count; ++i) want[i] = r == 0 ? v[i] : want[i] + v[i];
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], want) << "rank " << r;
}

TEST_P(ThreadRanks, ViewWrappersWithKokkosInEveryRank) {
  STRATA_SKIP_WITHOUT_THREAD_RANKS();
  const int n = GetParam();
  run_ranks(n, 1, [&](Context&, Communicator& c) {
    VectorBuffer<double> v("v", 5);
    Kokkos::deep_copy(v, 1.0 + c.rank());
    c.allreduce(v, ReduceOp::sum);
    for (double x : test::to_host(v)) EXPECT_EQ(x, n * (n + 1) / 2.0);
    VectorBuffer<std::int64_t> all("all", 3 * n), mine("mine", 3);
    Kokkos::deep_copy(mine, c.rank());
    c.allgather(mine, all);
    auto h = test::to_host(all);
    for (int r = 0; r < n; ++r) EXPECT_EQ(h[3 * r], r);
    if (n > 1) EXPECT_THROW(c.allgather(mine, mine), Error);  // receive buffer too small
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadRanks, ::testing::Values(1, 2, 3, 4));

TEST(ThreadRanks4, SplitIntoRowsAndColumnsOfA2x2Mesh) {
  for (const auto& err : on_ranks(4, test::check_mesh_split)) EXPECT_EQ(err, "");
}

comm::CommOptions short_timeout() {
  comm::CommOptions o;
  o.timeout_s = 0.5;
  return o;
}

TEST(ThreadRanksErrors, MismatchedCollectivesFailOnEveryRankNamingTheMismatch) {
  std::vector<std::string> seen(2);
  EXPECT_THROW(comm::run_thread_ranks(
                   2,
                   [&](Communicator& c) {
                     std::vector<float> v(11);
                     try {
                       if (c.rank() == 0) c.allreduce(v.data(), v.data(), 10, DataType::f32, ReduceOp::sum);
                       else c.broadcast(v.data(), 11, DataType::f32, 0);
                     } catch (const Error& e) {
                       seen[c.rank()] = e.message();
                       throw;
                     }
                   },
                   short_timeout()),
               Error);
  for (const auto& m : seen) {
    EXPECT_NE(m.find("collective mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("allreduce #0 (10 x float32, sum)"), std::string::npos) << m;
    EXPECT_NE(m.find("broadcast #0 (11 x float32, root 0)"), std::string::npos) << m;
  }
}

TEST(ThreadRanksErrors, AFailingRankMakesTheOthersFailNamingIt) {
  std::vector<std::string> seen(3);
  try {
    comm::run_thread_ranks(3, [&](Communicator& c) {
      if (c.rank() == 1) throw std::runtime_error("injected failure");
      double x = 0;
      try {
        c.allreduce(&x, &x, 1, DataType::f64, ReduceOp::sum);
      } catch (const Error& e) {
        seen[c.rank()] = e.message();
        throw;
      }
    });  // default (generous) timeout: the failure must not wait for it
    FAIL() << "expected the injected failure";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "injected failure");  // the root cause, not a follow-up
  }
  for (int r : {0, 2}) {
    EXPECT_NE(seen[r].find("rank 1 failed: injected failure"), std::string::npos) << seen[r];
  }
}

TEST(ThreadRanksErrors, AMissingRankTimesOutNamingIt) {
  std::string seen;
  EXPECT_THROW(comm::run_thread_ranks(
                   3,
                   [&](Communicator& c) {
                     if (c.rank() == 2) return;  // never arrives
                     double x = 0;
                     if (c.rank() == 0) {
                       try {
                         c.allreduce(&x, &x, 1, DataType::f64, ReduceOp::sum);
                       } catch (const Error& e) {
                         seen = e.message();
                         throw;
                       }
                     } else {
                       c.allreduce(&x, &x, 1, DataType::f64, ReduceOp::sum);
                     }
                   },
                   short_timeout()),
               Error);
  EXPECT_NE(seen.find("allreduce #0"), std::string::npos) << seen;
  EXPECT_NE(seen.find("rank(s) 2 did not arrive"), std::string::npos) << seen;
}

TEST(ThreadRanksErrors, RecvWithoutSendTimesOut) {
  EXPECT_THROW(comm::run_thread_ranks(
                   2,
                   [&](Communicator& c) {
                     if (c.rank() == 0) {
                       double x;
                       c.recv(&x, 1, DataType::f64, 1, 3);
                     }
                   },
                   short_timeout()),
               Error);
}

TEST(ThreadRanksErrors, WrongMessageSizeIsAnError) {
  EXPECT_THROW(comm::run_thread_ranks(2,
                                      [&](Communicator& c) {
                                        std::vector<double> v(4);
                                        if (c.rank() == 1) c.send(v.data(), 4, DataType::f64, 0, 0);
                                        else c.recv(v.data(), 3, DataType::f64, 1, 0);
                                      },
                                      short_timeout()),
               Error);
}

TEST(ThreadRanksErrors, BadPeerAndRootAreConfigErrors) {
  comm::run_thread_ranks(2, [&](Communicator& c) {
    double x = 0;
    EXPECT_THROW(c.send(&x, 1, DataType::f64, 5, 0), Error);
    EXPECT_THROW(c.broadcast(&x, 1, DataType::f64, -1), Error);
  });
}

TEST(Self, CollectivesAreCopies) {
  comm::SelfComm c;
  EXPECT_EQ(test::check_all_collectives(c), "");
  auto sub = c.split(3, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  double x = 0;
  EXPECT_THROW(c.send(&x, 1, DataType::f64, 0, 0), Error);
}

TEST(CommOptions, EnvironmentIsValidated) {
  setenv("STRATA_COMM_TIMEOUT", "abc", 1);
  EXPECT_THROW(comm::CommOptions::from_environment(), Error);
  setenv("STRATA_COMM_TIMEOUT", "2.5", 1);
  EXPECT_EQ(comm::CommOptions::from_environment().timeout_s, 2.5);
  unsetenv("STRATA_COMM_TIMEOUT");
}

// What a failed collective's report says of the run: the step in flight and
// the newest checkpoint known complete on this rank (another rank's write is
// complete only once a later step's collectives ran).
TEST(Progress, NamesTheStepAndTheNewestCompleteCheckpoint) {
  namespace progress = comm::progress;
  progress::reset();
  EXPECT_EQ(progress::describe(), "");
  progress::set_step(0);
  EXPECT_EQ(progress::describe(), "at step 1; no checkpoint was completed by this run");
  progress::set_step(4);
  progress::checkpoint_saved("ck", 4, false);  // rank 0 writes it; this rank does not know yet
  EXPECT_EQ(progress::describe(), "at step 5; no checkpoint was completed by this run");
  progress::step_done();  // step 5's collectives waited for rank 0
  progress::set_step(5);
  EXPECT_EQ(progress::describe(), "at step 6; resume from ck (its latest: step 4 or newer)");
  progress::checkpoint_saved("ck", 8, true);  // written by this rank
  progress::set_step(8);
  EXPECT_EQ(progress::describe(), "at step 9; resume from ck (its latest: step 8 or newer)");
  progress::reset();
}

// The spin-then-yield rule sees every process's thread ranks on the node:
// node_threads sums what each rank of the world runs on this host, and a
// group told that more threads are busy than the node has cores spins 16
// times, not 4000, before yielding.
TEST(ThreadsComm, WaitsSpinOnlyWhileTheNodesBusyThreadsFitItsCores) {
  comm::run_thread_ranks(3, [](comm::Communicator& c) {
    EXPECT_EQ(node_threads(c, c.rank() + 1), 6);  // 1 + 2 + 3, one host
  });
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(comm::spin_limit(cores), 4000);
  EXPECT_EQ(comm::spin_limit(cores + 1), 16);
  comm::CommOptions options;
  options.node_threads = cores + 1;  // another process's ranks on this node
  comm::run_thread_ranks(2, [](comm::Communicator& c) {
    EXPECT_EQ(dynamic_cast<comm::ThreadsComm&>(c).spins(), 16);
  }, options);
  options.node_threads = 0;  // this group alone: 2 ranks
  comm::run_thread_ranks(2, [&](comm::Communicator& c) {
    EXPECT_EQ(dynamic_cast<comm::ThreadsComm&>(c).spins(), comm::spin_limit(2));
  }, options);
}

// The communicator a run gets, for platforms this machine may not be: the
// rule of registry.hpp by hand.
TEST(Registry, AutoChoosesByRanksProcessesAndMemory) {
  comm::Platform host{false, "OpenMP", true, true, ""};
  comm::Platform gpu{true, "Cuda", true, true, "nccl"};
  comm::Platform gpu_without_nccl{true, "Cuda", true, true, ""};
  EXPECT_EQ(comm::resolve_communicator("auto", 1, 1, host), "self");
  EXPECT_EQ(comm::resolve_communicator("auto", 4, 1, host), "threads");
  EXPECT_EQ(comm::resolve_communicator("auto", 1, 4, host), "mpi");
  EXPECT_EQ(comm::resolve_communicator("auto", 2, 4, host), "hierarchical");
  EXPECT_EQ(comm::resolve_communicator("auto", 1, 4, gpu), "nccl");
  EXPECT_EQ(comm::resolve_communicator("auto", 1, 1, gpu), "self");
  EXPECT_EQ(comm::resolve_communicator("auto", 2, 4, gpu), "hierarchical");
  EXPECT_EQ(comm::resolve_communicator("auto", 1, 4, gpu_without_nccl), "mpi");
  EXPECT_EQ(comm::resolve_communicator("nccl", 1, 1, gpu), "nccl");
}

TEST(Registry, NcclRefusalsNameTheReason) {
  comm::Platform host_with_nccl{false, "OpenMP", true, true, "nccl"};
  comm::Platform gpu_without_nccl{true, "Cuda", true, true, ""};
  comm::Platform gpu{true, "Cuda", true, true, "nccl"};
  auto error = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::config);
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(error([&] { comm::resolve_communicator("nccl", 1, 2, host_with_nccl); })
                .find("NCCL moves GPU memory, and this build's kernels run on OpenMP"),
            std::string::npos);
  EXPECT_NE(error([&] { comm::resolve_communicator("nccl", 1, 2, gpu_without_nccl); })
                .find("built without NCCL"),
            std::string::npos);
  EXPECT_NE(error([&] { comm::resolve_communicator("nccl", 2, 2, gpu); })
                .find("--comm nccl runs one rank per process and GPU, not 2 thread rank(s)"),
            std::string::npos);
}

TEST(Device, ChoiceFollowsTheOptionOrTheLocalRank) {
  EXPECT_EQ(device::choose(-1, -1, 4), 0);  // unknown local rank
  EXPECT_EQ(device::choose(-1, 5, 4), 1);   // local rank 5 of a node with 4 GPUs
  EXPECT_EQ(device::choose(-1, 3, 1), 0);   // one GPU bound per task
  EXPECT_EQ(device::choose(2, 0, 4), 2);
  EXPECT_THROW(device::choose(4, 0, 4), Error);
  EXPECT_THROW(device::choose(0, 0, 0), Error);
  EXPECT_EQ(device::kokkos_option(3), "--kokkos-device-id=3");
}

TEST(Device, LocalRankComesFromTheLauncher) {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                        "SLURM_LOCALID", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars)
    if (const char* s = std::getenv(v)) saved.emplace_back(v, s);
  for (const char* v : vars) unsetenv(v);
  EXPECT_EQ(device::local_rank_from_environment(), -1);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(device::local_rank_from_environment(), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);  // Open MPI's comes first
  EXPECT_EQ(device::local_rank_from_environment(), 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // not a number: the next one
  EXPECT_EQ(device::local_rank_from_environment(), 3);
  for (const char* v : vars) unsetenv(v);
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}

}  // namespace
}  // namespace strata
