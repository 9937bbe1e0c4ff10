// The MPI communicator, run by ctest under mpirun at 1, 2 and 4 ranks: every
// collective against the naive reference (the same checks as thread ranks),
// split, send/recv, and the checking mode's mismatch error.
#include "backends/comm/mpi.hpp"
#include "comm_checks.hpp"

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

namespace strata {
namespace {

using comm::DataType;
using comm::ReduceOp;

TEST(Mpi, EveryCollectiveMatchesTheReference) {
  comm::MpiComm c(MPI_COMM_WORLD, false);
  EXPECT_EQ(test::check_all_collectives(c), "");
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
  Kokkos::initialize(argc, argv);
  int failed = RUN_ALL_TESTS();
  Kokkos::finalize();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  strata::comm::mpi::finalize();
  return any;
}
