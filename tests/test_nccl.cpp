// The NCCL communicator and CUDA glue. Without a GPU, creating one must fail
// with a clear "no CUDA device" error (that path is tested everywhere); with
// a GPU, collectives on device buffers are checked against the reference.
#include "backends/comm/nccl.hpp"
#include "backends/comm/self.hpp"
#include "comm_checks.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(Nccl, NoDeviceIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a CUDA device is present";
  comm::SelfComm bootstrap;
  try {
    comm::NcclComm::create(bootstrap);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("no CUDA device"), std::string::npos) << e.message();
  }
  EXPECT_THROW(comm::cuda::device_count(), Error);
}

TEST(Nccl, CollectivesOnDeviceBuffers) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  comm::SelfComm bootstrap;
  auto nccl = comm::NcclComm::create(bootstrap);
  for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000003)}) {
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = test::comm_input<float>(0, i);
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, std::max<std::size_t>(count, 1) * sizeof(float)), cudaSuccess);
    cudaMemcpy(d, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    for (auto op : {comm::ReduceOp::sum, comm::ReduceOp::average, comm::ReduceOp::max}) {
      nccl->allreduce(d, d, count, comm::DataType::f32, op);
    }
    nccl->broadcast(d, count, comm::DataType::f32, 0);
    nccl->barrier();
    std::vector<float> back(count);
    cudaMemcpy(back.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost);
    EXPECT_EQ(back, host) << "one rank: every reduction is the identity";
    cudaFree(d);
  }
}

}  // namespace
}  // namespace strata
