#include "strategies/parameter_gather.hpp"

#include "backends/error.hpp"

#include <cstdint>

namespace strata {

template <class T>
ParameterGather<T>::ParameterGather(Context& ctx, comm::Communicator& group, Sequential<T>& model,
                                    const ShardMap& map, Vector<T> shard)
    : ctx_(ctx), group_(group), model_(model), map_(map), shard_(shard) {
  const auto& units = model.param_units();
  STRATA_REQUIRE(units.size() == map.units().size() && !units.empty(), config,
                 "parameter gather: the model holds ", units.size(), " parameter units for ",
                 map.units().size(), " shard units");
  std::size_t buffers = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    STRATA_REQUIRE(units[u].first_piece == map.units()[u].first_piece &&
                       units[u].last_piece == map.units()[u].last_piece,
                   config, "parameter gather: parameter unit ", u, " holds other pieces");
    buffers = std::max(buffers, units[u].buffer + 1);
  }
  const std::size_t pieces = model.piece_offsets().size() - 1;
  unit_of_piece_.assign(pieces, 0);
  for (std::size_t u = 0; u < units.size(); ++u)
    for (std::size_t l = units[u].first_piece; l < units[u].last_piece; ++l) unit_of_piece_[l] = u;
  std::vector<std::size_t> users(buffers, 0);
  for (const BufferUnit& v : units) ++users[v.buffer];
  for (const BufferUnit& v : units) pinned_.push_back(users[v.buffer] == 1);
  // The next unit each call of a pass needs: the first later call's unit
  // that differs and takes turns.
  for (auto& n : next_) n.assign(pieces, SIZE_MAX);
  for (const bool backward : {false, true}) {
    const std::vector<PieceCall> calls = model.piece_calls(backward);
    // Backwards over the calls: `near` is the nearest later call's unit,
    // `beyond` the first after it that differs.
    std::size_t near = SIZE_MAX, beyond = SIZE_MAX;
    for (std::size_t c = calls.size(); c-- > 0;) {
      const auto [p, pass] = calls[c];
      const std::size_t u = unit_of_piece_[p];
      next_[static_cast<int>(pass)][p] = near == u ? beyond : near;
      if (!pinned_[u] && near != u) beyond = near, near = u;
    }
  }
  resident_.assign(buffers, SIZE_MAX);
  pending_.resize(buffers);
  in_flight_.assign(buffers, false);
}

template <class T>
bool ParameterGather<T>::pinned(std::size_t u) const {
  return pinned_[u];
}

template <class T>
void ParameterGather<T>::start(std::size_t u) {
  const std::size_t b = model_.param_units()[u].buffer;
  if (resident_[b] == u) return;
  if (in_flight_[b]) {  // another unit's prefetch: let it land before the buffer is reused
    pending_[b].wait();
    in_flight_[b] = false;
  }
  ctx_.exec.fence();  // the kernels that read the buffer's last unit are done
  const ShardUnit& unit = map_.units()[u];
  resident_[b] = u;
  if (unit.slice == 0) return;
  pending_[b] = group_.iallgather(shard_.data() + unit.shard, model_.unit_params(u).data(),
                                  unit.slice, comm::data_type_of<T>());
  in_flight_[b] = true;
}

template <class T>
void ParameterGather<T>::ensure(std::size_t u) {
  start(u);
  const std::size_t b = model_.param_units()[u].buffer;
  if (in_flight_[b]) {
    pending_[b].wait();
    in_flight_[b] = false;
  }
}

template <class T>
void ParameterGather<T>::before_piece(std::size_t p, Pass pass) {
  const std::size_t u = unit_of_piece_[p];
  if (pinned(u)) return;
  ensure(u);
  // The next unit the pass needs starts now, unless it would take this
  // unit's buffer (consecutive units alternate; a recomputing block may
  // meet one of the same buffer, which then waits for its turn).
  const std::size_t v = next_[static_cast<int>(pass)][p];
  if (v != SIZE_MAX && model_.param_units()[v].buffer != model_.param_units()[u].buffer) start(v);
}

template <class T>
void ParameterGather<T>::shard_changed() {
  ctx_.exec.fence();  // the shard's update is complete
  for (std::size_t b = 0; b < resident_.size(); ++b) {
    if (in_flight_[b]) pending_[b].wait();
    in_flight_[b] = false;
    resident_[b] = SIZE_MAX;
  }
  for (std::size_t u = 0; u < map_.units().size(); ++u)
    if (pinned(u)) ensure(u);
}

template class ParameterGather<float>;
template class ParameterGather<double>;

}  // namespace strata
