// Checks of every collective against a naive reference, written once and
// run on any communicator (thread ranks, MPI ranks). Inputs are functions of
// (rank, index) with values exact in every type, so the reference is exact
// whatever the reduction order. Under the device-memory check
// (STRATA_DEVICE_CHECK=1) the buffers are Kokkos allocations, which the
// communicators then treat as device memory.
#pragma once

#include "backends/comm/communicator.hpp"
#include "backends/device_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::test {

// A test buffer: a host vector, or under the device-memory check a Kokkos
// allocation (device memory to the communicators). Host code (the test)
// reads and writes it between operations, as a GPU test would its mirror.
template <class T>
class Buffer {
 public:
  explicit Buffer(std::size_t n = 0, T value = T()) {
    if (device::check::enabled()) {
      view_ = Kokkos::View<T*, Kokkos::HostSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "test buffer"), n);
      data_ = view_.data();
    } else {
      vector_.resize(n);
      data_ = vector_.data();
    }
    size_ = n;
    std::fill(begin(), end(), value);
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  std::vector<T> vector_;
  Kokkos::View<T*, Kokkos::HostSpace> view_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// Value of element i on rank r: small multiples of 1/8, exact in float.
template <class T>
T comm_input(int r, std::size_t i) {
  const auto v = static_cast<std::int64_t>((r * 7919 + i * 31) % 1001) - 500;
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v) / T(8);
  else return static_cast<T>(v);
}

template <class T>
T reduce_ref(comm::ReduceOp op, int n, std::size_t i) {
  T acc = comm_input<T>(0, i);
  for (int r = 1; r < n; ++r) {
    const T v = comm_input<T>(r, i);
    switch (op) {
      case comm::ReduceOp::sum:
      case comm::ReduceOp::average: acc += v; break;
      case comm::ReduceOp::max: acc = v > acc ? v : acc; break;
      case comm::ReduceOp::min: acc = v < acc ? v : acc; break;
    }
  }
  if (op == comm::ReduceOp::average) acc = acc / static_cast<T>(n);
  return acc;
}

// Returns "" when the collectives of type T on `count` elements are right on
// this rank, else a description of the first wrong element.
template <class T>
std::string check_collectives(comm::Communicator& c, std::size_t count) {
  using comm::ReduceOp;
  const int n = c.size(), me = c.rank();
  const auto type = comm::data_type_of<T>();
  const std::string where = std::string(comm::to_string(type)) + " count " +
                            std::to_string(count) + " rank " + std::to_string(me) + "/" +
                            std::to_string(n) + ": ";
  Buffer<T> in(count), out(count);
  auto fill = [&](Buffer<T>& v, int r, std::size_t offset) {
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = comm_input<T>(r, offset + i);
  };
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max, ReduceOp::min}) {
    for (bool in_place : {true, false}) {
      fill(in, me, 0);
      std::fill(out.begin(), out.end(), T(99));
      T* dst = in_place ? in.data() : out.data();
      c.allreduce(in.data(), dst, count, type, op);
      for (std::size_t i = 0; i < count; ++i)
        if (dst[i] != reduce_ref<T>(op, n, i))
          return where + "allreduce " + comm::to_string(op) + (in_place ? " in place" : "") +
                 " wrong at " + std::to_string(i);
    }
  }
  // reduce_scatter: block b of rank r's input holds comm_input(r, b*count + i);
  // in place, the result is the rank's own block of the input (as ZeRO-1
  // calls it).
  Buffer<T> big(count * n), block(count);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
    for (bool in_place : {false, true}) {
      fill(big, me, 0);
      T* dst = in_place ? big.data() + me * count : block.data();
      c.reduce_scatter(big.data(), dst, count, type, op);
      for (std::size_t i = 0; i < count; ++i)
        if (dst[i] != reduce_ref<T>(op, n, me * count + i))
          return where + "reduce_scatter " + comm::to_string(op) + (in_place ? " in place" : "") +
                 " wrong at " + std::to_string(i);
    }
  }
  // allgather: block r of the result is rank r's input; in place, the input
  // is the rank's own block of the output (as ZeRO-1 calls it), the other
  // blocks start as a sentinel the result must overwrite.
  for (bool in_place : {false, true}) {
    std::fill(big.begin(), big.end(), T(99));
    fill(in, me, 0);
    T* src = in.data();
    if (in_place) {
      src = big.data() + me * count;
      for (std::size_t i = 0; i < count; ++i) src[i] = in[i];
    }
    c.allgather(src, big.data(), count, type);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        if (big[r * count + i] != comm_input<T>(r, i))
          return where + "allgather" + (in_place ? " in place" : "") + " wrong at block " +
                 std::to_string(r);
  }
  // broadcast from the last rank.
  fill(in, me, 0);
  c.broadcast(in.data(), count, type, n - 1);
  for (std::size_t i = 0; i < count; ++i)
    if (in[i] != comm_input<T>(n - 1, i)) return where + "broadcast wrong at " + std::to_string(i);
  // asynchronous: two outstanding allreduces, then a blocking one.
  Buffer<T> a(count), b(count), d(count);
  fill(a, me, 0);
  fill(b, me, 0);
  fill(d, me, 0);
  auto ha = c.iallreduce(a.data(), a.data(), count, type, ReduceOp::sum);
  auto hb = c.iallreduce(b.data(), b.data(), count, type, ReduceOp::max);
  c.allreduce(d.data(), d.data(), count, type, ReduceOp::min);
  ha.wait();
  hb.wait();
  for (std::size_t i = 0; i < count; ++i)
    if (a[i] != reduce_ref<T>(ReduceOp::sum, n, i) || b[i] != reduce_ref<T>(ReduceOp::max, n, i) ||
        d[i] != reduce_ref<T>(ReduceOp::min, n, i))
      return where + "asynchronous allreduce wrong at " + std::to_string(i);
  // asynchronous reduce_scatter and allgather (the pair ZeRO-2/3 overlap with
  // compute), outstanding together with a blocking allreduce and finished by
  // wait_all: the blocking ones' results.
  Buffer<T> rs_in(count * n), rs_out(count), ag_in(count), ag_out(count * n, T(99));
  fill(rs_in, me, 0);
  fill(ag_in, me, 0);
  fill(d, me, 0);
  c.ireduce_scatter(rs_in.data(), rs_out.data(), count, type, ReduceOp::sum);
  c.iallgather(ag_in.data(), ag_out.data(), count, type);
  c.allreduce(d.data(), d.data(), count, type, ReduceOp::max);
  c.wait_all();
  for (std::size_t i = 0; i < count; ++i)
    if (rs_out[i] != reduce_ref<T>(ReduceOp::sum, n, me * count + i))
      return where + "asynchronous reduce_scatter wrong at " + std::to_string(i);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i)
      if (ag_out[r * count + i] != comm_input<T>(r, i))
        return where + "asynchronous allgather wrong at block " + std::to_string(r);
  for (std::size_t i = 0; i < count; ++i)
    if (d[i] != reduce_ref<T>(ReduceOp::max, n, i))
      return where + "allreduce beside asynchronous collectives wrong at " + std::to_string(i);
  return "";
}

// Every type and the sizes the issue names (zero, odd, page, large and odd).
inline std::string check_all_collectives(comm::Communicator& c) {
  for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(4096),
                            std::size_t(1000003)}) {
    for (auto err : {check_collectives<float>(c, count), check_collectives<double>(c, count),
                     check_collectives<std::int32_t>(c, count),
                     check_collectives<std::int64_t>(c, count)})
      if (!err.empty()) return err;
  }
  return "";
}

// Split into the rows and columns of a 2 x 2 mesh (4 ranks), and check sums
// within each.
inline std::string check_mesh_split(comm::Communicator& c) {
  const int me = c.rank();
  auto row = c.split(me / 2, me % 2), col = c.split(me % 2, me / 2);
  if (!row || !col || row->size() != 2 || col->size() != 2) return "split sizes wrong";
  if (row->rank() != me % 2 || col->rank() != me / 2) return "split ranks wrong";
  std::int32_t v = me, w = me;
  row->allreduce(&v, &v, 1, comm::DataType::i32, comm::ReduceOp::sum);
  col->allreduce(&w, &w, 1, comm::DataType::i32, comm::ReduceOp::sum);
  if (v != (me / 2) * 4 + 1) return "row sum " + std::to_string(v);
  if (w != (me % 2) + (me % 2) + 2) return "column sum " + std::to_string(w);
  // A color < 0 joins nothing.
  auto none = c.split(me == 0 ? -1 : 1, 0);
  if ((me == 0) != (none == nullptr)) return "negative color";
  if (none && none->size() != 3) return "split without rank 0 has size " + std::to_string(none->size());
  return "";
}

// 16-bit data (bf16, f16): allreduce and reduce_scatter equal the naive
// reference: the 16-bit inputs converted to float, summed in float in rank
// order (divided by n for average), rounded once; max exactly; allgather
// moves the bits. Random values (not exact sums), so the rounding shows.
template <class L>
std::string check_16bit(comm::Communicator& c) {
  const int n = c.size(), me = c.rank();
  const auto input = [](int r, std::size_t i) {
    const double u = static_cast<double>((r * 2654435761u + i * 40503u) % 100003u) / 100003.0;
    return L(static_cast<float>((u - 0.5) * 1000.0 / (1 + static_cast<double>(i % 7))));
  };
  for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(1001), std::size_t(100003)}) {
    for (comm::ReduceOp op : {comm::ReduceOp::sum, comm::ReduceOp::average, comm::ReduceOp::max}) {
      Buffer<L> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = input(me, i);
      c.allreduce(v.data(), v.data(), count, comm::data_type_of<L>(), op);
      for (std::size_t i = 0; i < count; ++i) {
        float acc = static_cast<float>(input(0, i));
        for (int r = 1; r < n; ++r) {
          const float x = static_cast<float>(input(r, i));
          acc = op == comm::ReduceOp::max ? (x > acc ? x : acc) : acc + x;
        }
        if (op == comm::ReduceOp::average) acc = acc / static_cast<float>(n);
        if (v[i].bits != L(acc).bits)
          return std::string("16-bit allreduce (") + comm::to_string(op) + ") of " +
                 std::to_string(count) + ": element " + std::to_string(i) + " is " +
                 std::to_string(static_cast<float>(v[i])) + ", want " + std::to_string(static_cast<float>(L(acc)));
      }
    }
    // reduce_scatter: rank me gets block me summed.
    Buffer<L> blocks(count * n), mine(count);
    for (std::size_t i = 0; i < count * n; ++i) blocks[i] = input(me, i);
    c.reduce_scatter(blocks.data(), mine.data(), count, comm::data_type_of<L>(), comm::ReduceOp::sum);
    for (std::size_t i = 0; i < count; ++i) {
      float acc = 0;
      for (int r = 0; r < n; ++r) acc = r == 0 ? static_cast<float>(input(r, me * count + i))
                                               : acc + static_cast<float>(input(r, me * count + i));
      if (mine[i].bits != L(acc).bits) return "16-bit reduce_scatter element " + std::to_string(i);
    }
    Buffer<L> all(count * n);
    Buffer<L> own(count);
    for (std::size_t i = 0; i < count; ++i) own[i] = input(me, i);
    c.allgather(own.data(), all.data(), count, comm::data_type_of<L>());
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < count; ++i)
        if (all[r * count + i].bits != input(r, i).bits) return "16-bit allgather wrong";
  }
  return "";
}

// Ring of send/recv with two tags in flight.
inline std::string check_ring(comm::Communicator& c) {
  const int n = c.size(), me = c.rank();
  if (n == 1) return "";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Buffer<double> out(1000, me), out2(3, me + 0.5), in(1000), in2(3);
  c.send(out2.data(), 3, comm::DataType::f64, next, 8);
  c.send(out.data(), 1000, comm::DataType::f64, next, 7);
  c.recv(in.data(), 1000, comm::DataType::f64, prev, 7);
  c.recv(in2.data(), 3, comm::DataType::f64, prev, 8);
  for (double v : in) if (v != prev) return "ring tag 7 wrong";
  for (double v : in2) if (v != prev + 0.5) return "ring tag 8 wrong";
  c.barrier();
  return "";
}

}  // namespace strata::test
