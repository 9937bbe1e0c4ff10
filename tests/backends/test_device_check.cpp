// The device-memory check (backends/device_check.hpp) on a host build: a
// transport that claims to take device memory and then touches it on the
// host is stopped, naming the operation; the same transport declaring host
// memory gets staged copies and computes the right result; thread ranks on
// Kokkos buffers match the reference through every collective and send/recv.
// Every test starts the check itself (the rest of the suite runs under it
// through ctest entries with STRATA_DEVICE_CHECK=1).
#include "backends/comm/self.hpp"
#include "backends/comm/threads.hpp"
#include "backends/device.hpp"
#include "backends/device_check.hpp"
#include "comm_checks.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace strata {
namespace {

using comm::DataType;
using comm::Memory;
using comm::ReduceOp;

// One rank whose collectives are host copies (memcpy), like a transport
// that forgot device memory. `claims` is what it says it works on.
class HostCopyComm final : public comm::Communicator {
 public:
  explicit HostCopyComm(Memory claims) : Communicator(comm::CommOptions{}), claims_(claims) {}
  ~HostCopyComm() override { shutdown(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "host-copy"; }
  Memory memory(comm::Op, DataType, ReduceOp) const override { return claims_; }

 protected:
  void do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp) override {
    if (send != recv) std::memcpy(recv, send, count * comm::size_of(type));
    else std::memmove(recv, send, count * comm::size_of(type));  // reads it all the same
  }
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                         ReduceOp op) override {
    do_allreduce(send, recv, count, type, op);
  }
  void do_allgather(const void* send, void* recv, std::size_t count, DataType type) override {
    do_allreduce(send, recv, count, type, ReduceOp::sum);
  }
  void do_broadcast(void*, std::size_t, DataType, int) override {}
  void do_send(const void*, std::size_t, DataType, int, int) override {}
  void do_recv(void*, std::size_t, DataType, int, int) override {}
  void do_barrier() override {}
  std::unique_ptr<Communicator> do_split(int, int) override { return nullptr; }

 private:
  Memory claims_;
};

constexpr std::size_t kCount = 64 * 1024;  // 256 KiB of floats: many whole pages

Kokkos::View<float*, MemSpace> filled(const char* label, float first) {
  Kokkos::View<float*, MemSpace> v(std::string(label), kCount);
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < kCount; ++i) h(i) = first + static_cast<float>(i % 1000);
  Kokkos::deep_copy(v, h);
  return v;
}

TEST(DeviceCheckDeathTest, AHostCopyOfDeviceMemoryIsStoppedNamingTheOperation) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  auto broken = [] {
    device::check::start();
    auto src = filled("src", 1), dst = filled("dst", 0);
    HostCopyComm c(Memory::any);  // says it takes device memory, then memcpy's it
    c.allreduce(src.data(), dst.data(), kCount, DataType::f32, ReduceOp::sum);
  };
  EXPECT_DEATH(broken(),
      "host code touched device memory at 0x[0-9a-f]+, byte [0-9]+ of the protected pages of "
      "allreduce of the host-copy communicator \\(rank 0\\)");
}

TEST(DeviceCheck, KokkosMemoryIsDeviceMemoryAndHostMemoryIsNot) {
  device::check::start();
  ASSERT_TRUE(device::has_device_memory());
  auto v = filled("v", 0);
  std::vector<float> h(16);
  float x = 0;
  EXPECT_TRUE(device::is_device(v.data()));
  EXPECT_TRUE(device::is_device(v.data() + kCount - 1));
  EXPECT_FALSE(device::is_device(h.data()));
  EXPECT_FALSE(device::is_device(&x));
}

TEST(DeviceCheck, AHostTransportGetsStagedCopiesAndTheRightResult) {
  device::check::start();
  HostCopyComm c(Memory::host);  // the front doors stage every device buffer
  auto src = filled("src", 1), dst = filled("dst", 0);
  c.allreduce(src.data(), dst.data(), kCount, DataType::f32, ReduceOp::sum);
  c.allreduce(dst.data(), dst.data(), kCount, DataType::f32, ReduceOp::sum);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dst);
  for (std::size_t i = 0; i < kCount; ++i)
    ASSERT_EQ(h(i), 1 + static_cast<float>(i % 1000)) << "element " << i;
  // Asynchronous operations are staged in the progress thread.
  auto d2 = filled("d2", 5);
  c.iallreduce(src.data(), d2.data(), kCount, DataType::f32, ReduceOp::sum).wait();
  auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d2);
  for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(h2(i), 1 + static_cast<float>(i % 1000));
}

TEST(DeviceCheck, SelfCopiesDeviceMemoryThroughTheCopyEngine) {
  device::check::start();
  comm::SelfComm c;  // any memory: its copies are device::copy
  EXPECT_EQ(test::check_all_collectives(c), "");
}

TEST(DeviceCheck, ThreadRanksOnKokkosBuffersMatchTheReference) {
  device::check::start();
  for (int n : {2, 3}) {
    std::vector<std::string> errors(n);
    comm::run_thread_ranks(n, [&](comm::Communicator& c) {
      std::string e = test::check_collectives<float>(c, 4096);
      if (e.empty()) e = test::check_collectives<double>(c, 100003);
      if (e.empty()) e = test::check_16bit<bf16>(c);
      if (e.empty()) e = test::check_ring(c);
      errors[c.rank()] = e;
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << n << " ranks, rank " << r;
  }
}

}  // namespace
}  // namespace strata
