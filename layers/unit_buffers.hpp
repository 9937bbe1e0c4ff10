// Values of a model's layers held in unit buffers instead of one flat buffer
// (the ZeRO stages: strategies/sharded_optimizer.hpp). A unit is a run of
// parameter pieces (layers/param_pieces.hpp) whose values lie at the start
// of its buffer, padded with zeros to a multiple of `pad`; units sharing a
// buffer take turns in it.
#pragma once

#include "backends/context.hpp"
#include "backends/kokkos.hpp"
#include "layers/build_options.hpp"

#include <cstddef>
#include <vector>

namespace strata {

template <class T>
class UnitBuffers {
 public:
  UnitBuffers() = default;
  // offsets: the pieces' first values in the flat layout (pieces + 1
  // entries). Throws config unless the units cover every piece in order.
  UnitBuffers(const std::vector<BufferUnit>& units, const std::vector<std::size_t>& offsets,
              std::size_t pad, const char* label);

  bool empty() const { return units_.empty(); }
  const std::vector<BufferUnit>& units() const { return units_; }
  // Where the flat values [first, last) are (throws config for a range across two units).
  Vector<T> range(std::size_t first, std::size_t last) const;
  // Unit u's values and the zeros after them.
  Vector<T> unit(std::size_t u) const;
  // Whether unit u has its buffer to itself (its values stay between uses).
  bool alone(std::size_t u) const { return users_[units_[u].buffer] == 1; }
  std::size_t bytes() const;
  void zero(Context& ctx) const;

 private:
  std::vector<BufferUnit> units_;
  std::vector<std::size_t> offsets_, users_;
  std::size_t pad_ = 1;
  std::vector<VectorBuffer<T>> buffers_;
};

}  // namespace strata
