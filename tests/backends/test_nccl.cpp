// The NCCL communicator (RCCL on HIP builds) and its GPU runtime glue. Without
// a GPU, creating one must fail with a clear "no CUDA device" ("no HIP
// device") error (that path is tested everywhere); with a GPU, collectives on
// device buffers are checked against the reference.
#include "backends/comm/nccl.hpp"
#include "backends/comm/registry.hpp"
#include "backends/comm/self.hpp"
#include "backends/comm/threads.hpp"
#include "comm_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace strata {
namespace {

bool have_gpu() {
  try {
    return comm::gpu::device_count() > 0;
  } catch (const Error&) {
    return false;
  }
}

// "CUDA device" or "HIP device", as the runtime's messages say.
std::string device_word() { return std::string(comm::gpu::name()) + " device"; }

TEST(Nccl, NoDeviceIsAClearError) {
  if (have_gpu()) GTEST_SKIP() << "a " << device_word() << " is present";
  comm::SelfComm bootstrap;
  try {
    comm::NcclComm::create(bootstrap);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("no " + device_word()), std::string::npos) << e.message();
  }
  EXPECT_THROW(comm::gpu::device_count(), Error);
  EXPECT_THROW(comm::cuda::device_count(), Error);  // the name before HIP builds had it
}

TEST(Nccl, IsTheDeviceBackendOfTheRegistry) {
  EXPECT_STREQ(comm::nccl_backend().name, "nccl");
  comm::use_device_backend(comm::nccl_backend());
  ASSERT_NE(comm::device_backend(), nullptr);
  EXPECT_STREQ(comm::device_backend()->name, "nccl");
}

// Device buffers from host values and back.
struct DeviceVector {
  float* p = nullptr;
  std::size_t n = 0;
  explicit DeviceVector(const std::vector<float>& host) : n(host.size()) {
    p = static_cast<float*>(comm::gpu::allocate(std::max<std::size_t>(n, 1) * sizeof(float)));
    comm::gpu::copy(p, host.data(), n * sizeof(float));
  }
  ~DeviceVector() { comm::gpu::release(p); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  std::vector<float> host() const {
    std::vector<float> out(n);
    comm::gpu::copy(out.data(), p, n * sizeof(float));
    return out;
  }
};

// Every collective on device buffers against the reference of comm_checks.hpp
// (exact values, so any reduction order gives them). Out of place, so that on
// one rank, where every reduction is the identity, a collective that did
// nothing would leave the sentinel and fail.
std::string check_device_collectives(comm::Communicator& c, std::size_t count) {
  using comm::ReduceOp;
  const int n = c.size(), me = c.rank();
  const std::string where = "count " + std::to_string(count) + " rank " + std::to_string(me) +
                            "/" + std::to_string(n) + ": ";
  std::vector<float> in(count), sentinel(count * n, -12345.0f);
  for (std::size_t i = 0; i < count; ++i) in[i] = test::comm_input<float>(me, i);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max, ReduceOp::min}) {
    DeviceVector src(in), dst(std::vector<float>(sentinel.begin(), sentinel.begin() + count));
    c.allreduce(src.p, dst.p, count, comm::DataType::f32, op);
    const auto got = dst.host();
    for (std::size_t i = 0; i < count; ++i)
      if (got[i] != test::reduce_ref<float>(op, n, i))
        return where + "allreduce " + comm::to_string(op) + " wrong at " + std::to_string(i);
  }
  std::vector<float> big(count * n);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = test::comm_input<float>(me, i);
  {
    DeviceVector src(big), dst(std::vector<float>(sentinel.begin(), sentinel.begin() + count));
    c.reduce_scatter(src.p, dst.p, count, comm::DataType::f32, ReduceOp::sum);
    const auto got = dst.host();
    for (std::size_t i = 0; i < count; ++i)
      if (got[i] != test::reduce_ref<float>(ReduceOp::sum, n, me * count + i))
        return where + "reduce_scatter wrong at " + std::to_string(i);
  }
  {
    DeviceVector src(in), dst(sentinel);
    c.allgather(src.p, dst.p, count, comm::DataType::f32);
    const auto got = dst.host();
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        if (got[r * count + i] != test::comm_input<float>(r, i))
          return where + "allgather wrong at block " + std::to_string(r);
  }
  {
    DeviceVector buf(in);
    c.broadcast(buf.p, count, comm::DataType::f32, n - 1);
    const auto got = buf.host();
    for (std::size_t i = 0; i < count; ++i)
      if (got[i] != test::comm_input<float>(n - 1, i)) return where + "broadcast wrong";
  }
  c.barrier();
  return "";
}

// One rank per GPU (1, 2 or 4: averages of the exact inputs stay exact when
// NCCL scales by 1/ranks) as thread ranks bootstrapping NCCL; one rank when
// the machine has one GPU (NCCL refuses two ranks of one communicator on the
// same device).
TEST(Nccl, CollectivesOnDeviceBuffers) {
  if (!have_gpu()) GTEST_SKIP() << "no " << device_word();
  const int devices = comm::gpu::device_count();
  const int ranks = devices >= 4 ? 4 : devices >= 2 ? 2 : 1;
  if (ranks < 2)
    std::printf("one %s: NCCL runs one rank (collectives out of place)\n", device_word().c_str());
  comm::run_thread_ranks(ranks, [&](comm::Communicator& bootstrap) {
    auto nccl = comm::NcclComm::create(bootstrap, bootstrap.rank());
    for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000003)})
      EXPECT_EQ(check_device_collectives(*nccl, count), "");
  });
}

// Every rank sends to the next before it receives from the previous one, a
// ring that waits forever when each send waits for its receiver; then a
// pipeline's exchange whose last send is flushed. Needs one GPU per rank.
TEST(Nccl, RingOfSendsBeforeReceivesProgresses) {
  if (!have_gpu()) GTEST_SKIP() << "no " << device_word();
  const int devices = comm::gpu::device_count();
  if (devices < 2)
    GTEST_SKIP() << "one " << device_word()
                 << ": NCCL puts no two ranks of a communicator on one GPU";
  const int ranks = devices >= 4 ? 4 : 2;
  comm::run_thread_ranks(ranks, [&](comm::Communicator& bootstrap) {
    auto nccl = comm::NcclComm::create(bootstrap, bootstrap.rank());
    const int n = nccl->size(), me = nccl->rank();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (std::size_t count : {std::size_t(1), std::size_t(100000)}) {
      DeviceVector out(std::vector<float>(count, float(me))), in(std::vector<float>(count, -1.0f));
      nccl->send(out.p, count, comm::DataType::f32, next, 0);
      nccl->recv(in.p, count, comm::DataType::f32, prev, 0);
      for (float v : in.host()) ASSERT_EQ(v, float(prev)) << "ring of " << count;
    }
    // Stage me sends forward, then the last one flushes its send backward.
    DeviceVector a(std::vector<float>(1000, float(me))), b(std::vector<float>(1000, 0.0f));
    if (me > 0) nccl->recv(b.p, 1000, comm::DataType::f32, me - 1, 1);
    if (me + 1 < n) nccl->send(a.p, 1000, comm::DataType::f32, me + 1, 1);
    nccl->flush();
    if (me > 0) EXPECT_EQ(b.host(), std::vector<float>(1000, float(me - 1)));
  });
}

}  // namespace
}  // namespace strata
