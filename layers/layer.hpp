// The layer interface: forward keeps what backward needs, backward
// accumulates parameter gradients and returns the input gradient.
//
// Shapes: x is (batch, in) and y is (batch, out), both device memory
// (MemSpace), row-major. A layer's parameters and gradients are slices of the
// model's flat buffers, bound once by Sequential. Virtual calls happen once
// per layer per step (the model is assembled at run time); kernels never see
// them.
#pragma once

#include "backends/context.hpp"
#include "backends/kokkos.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace strata {

// Initialisation schemes for weights (biases start at zero unless stated).
enum class Init {
  kaiming_uniform,  // U(-b, b), b = sqrt(6 / fan_in): He et al., for ReLU
  kaiming_normal,   // N(0, 2 / fan_in)
  xavier_uniform,   // U(-b, b), b = sqrt(6 / (fan_in + fan_out)): Glorot
  xavier_normal,    // N(0, 2 / (fan_in + fan_out))
  torch_default,    // PyTorch's nn.Linear: weight and bias U(-1/sqrt(fan_in), +)
};

Init parse_init(const std::string& name);  // throws config on unknown names
const char* to_string(Init init);

// Host memory, for initialisation.
template <class T>
using HostVector = Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace, Unmanaged>;

template <class T>
class Layer {
 public:
  virtual ~Layer() = default;

  // "Linear(784, 256)" and the like.
  virtual std::string name() const = 0;
  // Output width for an input of width `in`; throws config (naming the layer
  // and both widths) when the layer cannot take that input.
  virtual std::size_t out_features(std::size_t in) const = 0;
  // Number of parameters (0 for parameter-free layers).
  virtual std::size_t num_params() const { return 0; }
  // Binds the layer's slices of the flat parameter and gradient buffers.
  virtual void bind(Vector<T> /*params*/, Vector<T> /*grads*/) {}
  // Writes initial parameters into `params` (host memory, this layer's slice).
  // `layer_index` makes each layer's random stream distinct.
  virtual void init(HostVector<T> /*params*/, Init /*scheme*/, std::uint64_t /*seed*/,
                    std::uint64_t /*layer_index*/) const {}
  // Workspace the layer needs for a batch of `batch` rows (allocated once).
  virtual void reserve(std::size_t /*batch*/, std::size_t /*in*/) {}

  // y = f(x). x must stay alive and unchanged until backward.
  virtual void forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y) = 0;
  // Accumulates parameter gradients from dy and, unless dx is empty (first
  // layer), writes dx. dx may alias dy only where a layer says so.
  virtual void backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx) = 0;
  // Whether backward reads the x / the y of its forward. Sequential keeps in
  // 16-bit storage only the activations some backward reads (set_storage);
  // a layer that says false must not read that view in backward.
  virtual bool backward_reads_input() const { return true; }
  virtual bool backward_reads_output() const { return true; }

  // Position of the batch's first row in the global batch (data parallelism
  // gives each rank a shard): layers that draw per-sample random numbers
  // (Dropout) index them globally, so that a shard sees exactly what
  // single-rank training of the whole batch would.
  virtual void set_row_offset(std::size_t /*offset*/) {}

  // A new training pass (one per optimizer step; the micro-batches of a
  // pipeline step belong to the same pass): Dropout draws new masks here, so
  // that splitting a batch into micro-batches draws what the whole batch would.
  virtual void begin_pass() {}

  // Micro-batches in flight (pipeline schedules): what backward needs of a
  // forward is kept per slot. set_slots(n) once before reserve(); use_slot(s)
  // before the forward and the backward of the micro-batch in slot s.
  virtual void set_slots(std::size_t n) { slots_ = n; }
  void use_slot(std::size_t s) { slot_ = s; }
  std::size_t slots() const { return slots_; }
  // Bytes of workspace reserve(max_batch, .) allocates with `slots` slots for
  // backward (beyond the activations Sequential holds): memory accounting.
  virtual std::size_t workspace_bytes(std::size_t /*max_batch*/, std::size_t /*slots*/) const {
    return 0;
  }

  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }

 protected:
  bool training_ = true;
  std::size_t slots_ = 1, slot_ = 0;
};

template <class T>
using LayerPtr = std::unique_ptr<Layer<T>>;

}  // namespace strata
