// The ranks of a run, made from what a job started: `ranks` thread ranks in
// each of the world's processes (MPI, or this process alone), joined by the
// communicator a run asked for (comm::resolve_communicator's answer):
//   one rank per process   the world itself, or the device backend's
//                          communicator over it (nccl: the GPUs, on the
//                          kernels' stream);
//   several per process    thread ranks (backends/ranks.hpp), joined with
//                          the other processes hierarchically (threads
//                          first, then the processes).
// Every rank gets its own Context (its threads, `gemm`) and runs body.
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/context.hpp"

#include <functional>
#include <string>

namespace strata {

void run_world(comm::Communicator& world, const std::string& communicator, int ranks,
               int threads_per_rank, GemmBackend gemm,
               const std::function<void(Context&, comm::Communicator&)>& body);

// Host threads busy on this node: `mine` summed over the world's processes
// on this host (collective over `world`; processes are on one node when
// their host names match).
int node_threads(comm::Communicator& world, int mine);

}  // namespace strata
