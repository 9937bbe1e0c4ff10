// Real 16-bit storage of the activations a Sequential keeps for backward.
//
// Layers compute in float (T) on two reusable scratch buffers of the widest
// layer output: layer i writes output(i) (scratch i % 2) and reads layer
// i - 1's output from the other one. After layer i's forward, store() rounds
// the output in place to the 16-bit type (the values the next layer reads)
// and, when some backward reads it (kept(i)), copies its 16 bits into a
// buffer of its own, per micro-batch slot. Before a layer's backward,
// restore() writes the 16-bit copy back into the very scratch buffer the
// layer saved a view of in forward, so the layer's saved views are valid
// again. 16-bit values convert to float exactly, so layers see bitwise what
// the emulated storage (float buffers holding rounded values) gives them.
//
// Memory: 2 bytes per kept element per slot plus the two float scratch
// buffers (max_batch x widest output), instead of 4 bytes per element of
// every layer output per slot.
#pragma once

#include "backends/context.hpp"
#include "backends/precision.hpp"

#include <cstdint>
#include <vector>

namespace strata {

namespace detail {
// Elements of p[0, n) that are NaN or Inf (device memory).
template <class T>
std::size_t count_nonfinite(Context& ctx, const T* p, std::size_t n);
}  // namespace detail

template <class T>
class ActivationStore {
 public:
  // Bytes allocate() takes: kept[i] says whether output i (widths[i] wide)
  // is kept; buffers for max_batch rows and `slots` micro-batches.
  static std::size_t bytes(const std::vector<std::size_t>& widths, const std::vector<bool>& kept,
                           std::size_t max_batch, std::size_t slots);

  // p: bf16 or fp16.
  void allocate(Precision p, const std::vector<std::size_t>& widths, const std::vector<bool>& kept,
                std::size_t max_batch, std::size_t slots);
  // Bytes of the views allocated (what bytes() promised).
  std::size_t allocated_bytes() const;

  bool kept(std::size_t i) const { return kept_[i]; }
  // Where layer i writes its output for a batch of `batch` rows (float scratch).
  Matrix<T> output(std::size_t i, std::size_t batch) const;
  // After layer i's forward of `slot` wrote output(i, batch): rounds it to
  // the 16-bit type in place and, when `keep` (training) and kept(i), stores
  // the 16 bits for backward.
  void store(Context& ctx, std::size_t slot, std::size_t i, std::size_t batch, bool keep);
  // Makes output(i, batch of slot's forward) hold the values stored for
  // `slot` again (nothing to do when the scratch still holds them). kept(i)
  // must hold, and slot's last forward must have been a training one.
  void restore(Context& ctx, std::size_t slot, std::size_t i);
  // Non-finite values in output i of slot (16-bit copy, or the scratch while
  // it still holds that output); -1 when neither is available.
  long long count_nonfinite(Context& ctx, std::size_t slot, std::size_t i) const;

 private:
  using Bits = Kokkos::View<std::uint16_t*, MemSpace>;
  Precision precision_ = Precision::bf16;
  std::vector<std::size_t> widths_;
  std::vector<bool> kept_;
  std::size_t max_batch_ = 0, layers_ = 0;
  VectorBuffer<T> scratch_[2];
  std::vector<Bits> bits_;                // bits_[slot * layers + i]; empty unless kept(i)
  std::vector<std::size_t> batch_;        // rows of each slot's last forward
  std::vector<bool> stored_;              // per slot: the last forward stored its outputs
  struct Resident {                       // what a scratch buffer holds
    std::size_t slot = 0, layer = 0;
    bool valid = false;
  };
  Resident resident_[2];
};

}  // namespace strata
