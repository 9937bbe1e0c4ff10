#include "planner/planning_comm.hpp"

#include "backends/error.hpp"

namespace strata::planner {

namespace {
[[noreturn]] void refuse(const char* what) {
  STRATA_THROW(runtime, "planning communicator: ", what, " (a plan runs no layer)");
}
}  // namespace

PlanningComm::PlanningComm(int size) : Communicator(comm::CommOptions{}), size_(size) {
  STRATA_REQUIRE(size > 0, config, "planning communicator of ", size, " ranks");
}

void PlanningComm::do_allreduce(const void*, void*, std::size_t, comm::DataType, comm::ReduceOp) {
  refuse("allreduce");
}
void PlanningComm::do_reduce_scatter(const void*, void*, std::size_t, comm::DataType,
                                     comm::ReduceOp) {
  refuse("reduce_scatter");
}
void PlanningComm::do_allgather(const void*, void*, std::size_t, comm::DataType) {
  refuse("allgather");
}
void PlanningComm::do_broadcast(void*, std::size_t, comm::DataType, int) { refuse("broadcast"); }
void PlanningComm::do_send(const void*, std::size_t, comm::DataType, int, int) { refuse("send"); }
void PlanningComm::do_recv(void*, std::size_t, comm::DataType, int, int) { refuse("recv"); }
void PlanningComm::do_barrier() { refuse("barrier"); }
std::unique_ptr<comm::Communicator> PlanningComm::do_split(int, int) { refuse("split"); }

}  // namespace strata::planner
