#include "layers/activation_store.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"

#include <algorithm>

namespace strata {

// Named, not anonymous: CUDA's extended lambdas need enclosing functions
// with external linkage.
namespace detail::store16 {
inline std::size_t widest(const std::vector<std::size_t>& widths) {
  std::size_t w = 0;
  for (std::size_t v : widths) w = std::max(w, v);
  return w;
}

// y(k) = 16-bit rounding of y(k) in place; bits(k) = its 16 bits when bits is given.
template <class L, class T>
void round_and_keep(Context& ctx, T* y, std::uint16_t* bits, std::size_t n) {
  if (bits == nullptr) {
    for_range(ctx, "strata::ActivationStore::round", n, KOKKOS_LAMBDA(const std::size_t k) {
      y[k] = static_cast<T>(static_cast<float>(L(static_cast<float>(y[k]))));
    });
    return;
  }
  for_range(ctx, "strata::ActivationStore::store", n, KOKKOS_LAMBDA(const std::size_t k) {
    const L v(static_cast<float>(y[k]));
    y[k] = static_cast<T>(static_cast<float>(v));
    bits[k] = v.bits;
  });
}

template <class L, class T>
void unpack(Context& ctx, const std::uint16_t* bits, T* y, std::size_t n) {
  for_range(ctx, "strata::ActivationStore::restore", n, KOKKOS_LAMBDA(const std::size_t k) {
    y[k] = static_cast<T>(static_cast<float>(L::from_bits(bits[k])));
  });
}

// NaN or Inf: v - v is NaN exactly then.
template <class L>
std::size_t nonfinite_bits(Context& ctx, const std::uint16_t* bits, std::size_t n) {
  std::size_t bad = 0;
  sum_range(ctx, "strata::ActivationStore::nonfinite", n,
      KOKKOS_LAMBDA(const std::size_t k, std::size_t& acc) {
        const float v = static_cast<float>(L::from_bits(bits[k]));
        acc += (v - v != v - v) ? 1 : 0;
      },
      bad);
  return bad;
}
}  // namespace detail::store16

namespace detail {
template <class T>
std::size_t count_nonfinite(Context& ctx, const T* p, std::size_t n) {
  std::size_t bad = 0;
  sum_range(ctx, "strata::count_nonfinite", n,
      KOKKOS_LAMBDA(const std::size_t i, std::size_t& acc) {
        const T v = p[i];
        acc += (v != v || v - v != v - v) ? 1 : 0;  // NaN, or Inf (Inf - Inf is NaN)
      },
      bad);
  return bad;
}
template std::size_t count_nonfinite<float>(Context&, const float*, std::size_t);
template std::size_t count_nonfinite<double>(Context&, const double*, std::size_t);
}  // namespace detail

using namespace detail::store16;

template <class T>
std::size_t ActivationStore<T>::bytes(const std::vector<std::size_t>& widths,
                                      const std::vector<bool>& kept, std::size_t max_batch,
                                      std::size_t slots) {
  std::size_t kept_elements = 0;
  for (std::size_t i = 0; i < widths.size(); ++i)
    if (kept[i]) kept_elements += widths[i];
  return slots * max_batch * kept_elements * sizeof(std::uint16_t) +
         2 * max_batch * widest(widths) * sizeof(T);
}

template <class T>
void ActivationStore<T>::allocate(Precision p, const std::vector<std::size_t>& widths,
                                  const std::vector<bool>& kept, std::size_t max_batch,
                                  std::size_t slots) {
  STRATA_REQUIRE(p != Precision::fp32 && kept.size() == widths.size(), config,
                 "ActivationStore: 16-bit precision and one flag per output expected");
  precision_ = p;
  widths_ = widths;
  kept_ = kept;
  max_batch_ = max_batch;
  layers_ = widths.size();
  for (auto& s : scratch_) s = VectorBuffer<T>("strata::activation_scratch", max_batch * widest(widths));
  bits_.assign(slots * layers_, Bits());
  for (std::size_t s = 0; s < slots; ++s)
    for (std::size_t i = 0; i < layers_; ++i)
      if (kept[i]) bits_[s * layers_ + i] = Bits("strata::activation16", max_batch * widths[i]);
  batch_.assign(slots, 0);
  stored_.assign(slots, false);
  resident_[0] = resident_[1] = Resident();
}

template <class T>
std::size_t ActivationStore<T>::allocated_bytes() const {
  std::size_t n = (scratch_[0].span() + scratch_[1].span()) * sizeof(T);
  for (const auto& b : bits_) n += b.span() * sizeof(std::uint16_t);
  return n;
}

template <class T>
Matrix<T> ActivationStore<T>::output(std::size_t i, std::size_t batch) const {
  return reshape(Vector<T>(scratch_[i % 2]), 0, batch, widths_[i]);
}

template <class T>
void ActivationStore<T>::store(Context& ctx, std::size_t slot, std::size_t i, std::size_t batch,
                               bool keep) {
  const std::size_t n = batch * widths_[i];
  T* y = scratch_[i % 2].data();
  std::uint16_t* bits = keep && kept_[i] ? bits_[slot * layers_ + i].data() : nullptr;
  if (precision_ == Precision::bf16) round_and_keep<bf16>(ctx, y, bits, n);
  else round_and_keep<fp16>(ctx, y, bits, n);
  if (i == 0) {  // a new forward of this slot
    batch_[slot] = batch;
    stored_[slot] = keep;
  }
  // The scratch now equals the stored copy (when kept in training); an
  // evaluation forward's values are nobody's to restore.
  resident_[i % 2] = Resident{slot, i, keep};
}

template <class T>
void ActivationStore<T>::restore(Context& ctx, std::size_t slot, std::size_t i) {
  STRATA_REQUIRE(kept_[i], runtime, "ActivationStore: output ", i, " is not kept for backward");
  STRATA_REQUIRE(stored_[slot], config, "Sequential: backward after a forward in evaluation mode "
                 "(16-bit storage keeps activations in training mode only)");
  Resident& r = resident_[i % 2];
  if (r.valid && r.slot == slot && r.layer == i) return;
  const std::size_t n = batch_[slot] * widths_[i];
  const std::uint16_t* bits = bits_[slot * layers_ + i].data();
  T* y = scratch_[i % 2].data();
  if (precision_ == Precision::bf16) unpack<bf16>(ctx, bits, y, n);
  else unpack<fp16>(ctx, bits, y, n);
  r = Resident{slot, i, true};
}

template <class T>
long long ActivationStore<T>::count_nonfinite(Context& ctx, std::size_t slot, std::size_t i) const {
  const std::size_t n = batch_[slot] * widths_[i];
  if (kept_[i] && stored_[slot]) {
    const std::uint16_t* bits = bits_[slot * layers_ + i].data();
    return static_cast<long long>(precision_ == Precision::bf16 ? nonfinite_bits<bf16>(ctx, bits, n)
                                                                : nonfinite_bits<fp16>(ctx, bits, n));
  }
  const Resident& r = resident_[i % 2];
  if (r.slot == slot && r.layer == i)  // an evaluation forward's output still in the scratch
    return static_cast<long long>(detail::count_nonfinite(ctx, scratch_[i % 2].data(), n));
  return -1;
}

template class ActivationStore<float>;
template class ActivationStore<double>;

}  // namespace strata
