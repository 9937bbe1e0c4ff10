#include "backends/world.hpp"

#include "backends/comm/hierarchical.hpp"
#include "backends/comm/registry.hpp"
#include "backends/device.hpp"
#include "backends/error.hpp"
#include "backends/ranks.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

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
  // The thread ranks' waits see every process's ranks on this node.
  comm::CommOptions options = comm::CommOptions::from_environment();
  options.node_threads = node_threads(world, ranks * std::max(1, threads_per_rank));
  run_ranks(ranks, std::max(1, threads_per_rank), [&](Context& ctx, comm::Communicator& local) {
    Context mine(gemm, ctx.exec);
    if (world.size() == 1) {
      body(mine, local);
    } else {
      comm::HierarchicalComm h(local, local.rank() == 0 ? &world : nullptr);
      body(mine, h);
    }
  }, options);
}

int node_threads(comm::Communicator& world, int mine) {
  if (world.size() == 1) return mine;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::int64_t me[2] = {static_cast<std::int64_t>(std::hash<std::string>{}(host)), mine};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(world.size()));
  world.allgather(me, all.data(), 2, comm::DataType::i64);
  std::int64_t busy = 0;
  for (std::size_t r = 0; r < all.size(); r += 2)
    if (all[r] == me[0]) busy += all[r + 1];
  return static_cast<int>(busy);
}

}  // namespace strata
