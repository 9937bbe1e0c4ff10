#include "backends/world.hpp"

#include "backends/comm/hierarchical.hpp"
#include "backends/comm/registry.hpp"
#include "backends/device.hpp"
#include "backends/error.hpp"
#include "backends/ranks.hpp"

#include <algorithm>

namespace strata {

void run_world(comm::Communicator& world, const std::string& communicator, int ranks,
               int threads_per_rank, GemmBackend gemm,
               const std::function<void(Context&, comm::Communicator&)>& body) {
  if (ranks == 1) {
    Context ctx(gemm);
    const comm::DeviceBackend* device = comm::device_backend();
    if (device != nullptr && communicator == device->name) {
      auto devices = device->create(world, device::stream_of(ctx.exec));
      body(ctx, *devices);
    } else {
      body(ctx, world);
    }
    return;
  }
  run_ranks(ranks, std::max(1, threads_per_rank), [&](Context& ctx, comm::Communicator& local) {
    Context mine(gemm, ctx.exec);
    if (world.size() == 1) {
      body(mine, local);
    } else {
      comm::HierarchicalComm h(local, local.rank() == 0 ? &world : nullptr);
      body(mine, h);
    }
  });
}

}  // namespace strata
