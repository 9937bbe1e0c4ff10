#include "layers/unit_buffers.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"

#include <algorithm>
#include <string>

namespace strata {

template <class T>
UnitBuffers<T>::UnitBuffers(const std::vector<BufferUnit>& units,
                            const std::vector<std::size_t>& offsets, std::size_t pad,
                            const char* label)
    : units_(units), offsets_(offsets), pad_(pad) {
  const std::size_t pieces = offsets.size() - 1;
  std::vector<std::size_t> sizes;
  std::size_t next = 0;
  for (const BufferUnit& u : units) {
    STRATA_REQUIRE(u.first_piece == next && u.last_piece > u.first_piece && u.last_piece <= pieces,
                   config, label, ": unit of pieces [", u.first_piece, ", ", u.last_piece,
                   ") after piece ", next, " of ", pieces);
    next = u.last_piece;
    if (sizes.size() <= u.buffer) sizes.resize(u.buffer + 1, 0), users_.resize(u.buffer + 1, 0);
    const std::size_t n = offsets[u.last_piece] - offsets[u.first_piece];
    sizes[u.buffer] = std::max(sizes[u.buffer], (n + pad - 1) / pad * pad);
    ++users_[u.buffer];
  }
  STRATA_REQUIRE(next == pieces, config, label, ": units cover pieces [0, ", next, ") of ", pieces);
  for (std::size_t b = 0; b < sizes.size(); ++b) buffers_.emplace_back(std::string(label), sizes[b]);
}

template <class T>
Vector<T> UnitBuffers<T>::range(std::size_t first, std::size_t last) const {
  if (first == last) return Vector<T>(buffers_.front().data(), 0);
  for (const BufferUnit& u : units_) {
    const std::size_t lo = offsets_[u.first_piece], hi = offsets_[u.last_piece];
    if (first >= lo && last <= hi) return Vector<T>(buffers_[u.buffer].data() + (first - lo), last - first);
  }
  STRATA_THROW(config, "values [", first, ", ", last, ") span two units");
}

template <class T>
Vector<T> UnitBuffers<T>::unit(std::size_t u) const {
  STRATA_REQUIRE(u < units_.size(), config, "unit ", u, " of ", units_.size());
  const BufferUnit& g = units_[u];
  const std::size_t n = offsets_[g.last_piece] - offsets_[g.first_piece];
  return Vector<T>(buffers_[g.buffer].data(), (n + pad_ - 1) / pad_ * pad_);
}

template <class T>
std::size_t UnitBuffers<T>::bytes() const {
  std::size_t n = 0;
  for (const auto& b : buffers_) n += b.extent(0);
  return n * sizeof(T);
}

template <class T>
void UnitBuffers<T>::zero(Context& ctx) const {
  for (const auto& b : buffers_) {
    T* p = b.data();
    for_range(ctx, "strata::zero_units", b.extent(0), KOKKOS_LAMBDA(const std::size_t i) { p[i] = T(0); });
  }
}

template class UnitBuffers<float>;
template class UnitBuffers<double>;

}  // namespace strata
