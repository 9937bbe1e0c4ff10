#include "backends/comm/self.hpp"

#include "backends/device.hpp"

namespace strata::comm {
namespace {
// Host or device memory alike.
void copy(const void* send, void* recv, std::size_t count, DataType type) {
  if (send != recv && count > 0) device::copy(recv, send, count * size_of(type));
}
}  // namespace

void SelfComm::do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                            ReduceOp) {
  copy(send, recv, count, type);
}
void SelfComm::do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType type,
                                 ReduceOp) {
  copy(send, recv, count, type);
}
void SelfComm::do_allgather(const void* send, void* recv, std::size_t count, DataType type) {
  copy(send, recv, count, type);
}
void SelfComm::do_send(const void*, std::size_t, DataType, int, int) {
  STRATA_THROW(config, "self communicator: no peer to send to");
}
void SelfComm::do_recv(void*, std::size_t, DataType, int, int) {
  STRATA_THROW(config, "self communicator: no peer to receive from");
}
std::unique_ptr<Communicator> SelfComm::do_split(int color, int) {
  if (color < 0) return nullptr;
  return std::make_unique<SelfComm>(options_);
}

}  // namespace strata::comm
