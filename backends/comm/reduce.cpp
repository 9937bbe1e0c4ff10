#include "backends/comm/reduce.hpp"

#include <algorithm>
#include <cstdint>

namespace strata::comm::detail {
namespace {

// Accumulator type: 16-bit storage types are reduced in float and rounded
// once when stored.
template <class T>
struct Acc {
  using type = T;
};
template <>
struct Acc<bf16> {
  using type = float;
};
template <>
struct Acc<fp16> {
  using type = float;
};

template <class T>
struct Sum {
  static T apply(T a, T b) { return a + b; }
};
template <class T>
struct Max {
  static T apply(T a, T b) { return a < b ? b : a; }
};
template <class T>
struct Min {
  static T apply(T a, T b) { return b < a ? b : a; }
};

// Blocks small enough for the accumulator to stay in L1; each block is read
// from every source once, so dst may alias a source.
template <class T, class Op>
void reduce_block(T* dst, const void* const* srcs, int n, std::size_t begin, std::size_t end,
                  bool average) {
  using A = typename Acc<T>::type;
  constexpr std::size_t block = 512;
  A acc[block];
  for (std::size_t b = begin; b < end; b += block) {
    const std::size_t len = std::min(block, end - b);
    const T* s0 = static_cast<const T*>(srcs[0]) + b;
    for (std::size_t i = 0; i < len; ++i) acc[i] = static_cast<A>(s0[i]);
    for (int k = 1; k < n; ++k) {
      const T* s = static_cast<const T*>(srcs[k]) + b;
      for (std::size_t i = 0; i < len; ++i) acc[i] = Op::apply(acc[i], static_cast<A>(s[i]));
    }
    if (average)
      for (std::size_t i = 0; i < len; ++i) acc[i] = acc[i] / static_cast<A>(n);
    for (std::size_t i = 0; i < len; ++i) dst[b + i] = static_cast<T>(acc[i]);
  }
}

template <class T>
void reduce_typed(ReduceOp op, void* dst, const void* const* srcs, int n, std::size_t begin,
                  std::size_t end) {
  using A = typename Acc<T>::type;
  T* d = static_cast<T*>(dst);
  switch (op) {
    case ReduceOp::sum: reduce_block<T, Sum<A>>(d, srcs, n, begin, end, false); break;
    case ReduceOp::average: reduce_block<T, Sum<A>>(d, srcs, n, begin, end, true); break;
    case ReduceOp::max: reduce_block<T, Max<A>>(d, srcs, n, begin, end, false); break;
    case ReduceOp::min: reduce_block<T, Min<A>>(d, srcs, n, begin, end, false); break;
  }
}

template <class T>
void accumulate_typed(ReduceOp op, void* dst, const void* src, std::size_t count) {
  using A = typename Acc<T>::type;
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::average:
      for (std::size_t i = 0; i < count; ++i)
        d[i] = static_cast<T>(static_cast<A>(d[i]) + static_cast<A>(s[i]));
      break;
    case ReduceOp::max:
      for (std::size_t i = 0; i < count; ++i)
        d[i] = static_cast<T>(Max<A>::apply(static_cast<A>(d[i]), static_cast<A>(s[i])));
      break;
    case ReduceOp::min:
      for (std::size_t i = 0; i < count; ++i)
        d[i] = static_cast<T>(Min<A>::apply(static_cast<A>(d[i]), static_cast<A>(s[i])));
      break;
  }
}

template <class T>
void average_typed(void* buf, std::size_t count, int n) {
  using A = typename Acc<T>::type;
  T* b = static_cast<T*>(buf);
  for (std::size_t i = 0; i < count; ++i) b[i] = static_cast<T>(static_cast<A>(b[i]) / static_cast<A>(n));
}

template <template <class> class F, class... Args>
void dispatch(DataType type, Args&&... args) {
  switch (type) {
    case DataType::f32: F<float>::run(args...); break;
    case DataType::f64: F<double>::run(args...); break;
    case DataType::i32: F<std::int32_t>::run(args...); break;
    case DataType::i64: F<std::int64_t>::run(args...); break;
    case DataType::bf16: F<bf16>::run(args...); break;
    case DataType::f16: F<fp16>::run(args...); break;
  }
}

template <class T>
struct ReduceF {
  template <class... A>
  static void run(A... a) { reduce_typed<T>(a...); }
};
template <class T>
struct AccumulateF {
  template <class... A>
  static void run(A... a) { accumulate_typed<T>(a...); }
};
template <class T>
struct AverageF {
  template <class... A>
  static void run(A... a) { average_typed<T>(a...); }
};

}  // namespace

void reduce(DataType type, ReduceOp op, void* dst, const void* const* srcs, int n,
            std::size_t begin, std::size_t end) {
  dispatch<ReduceF>(type, op, dst, srcs, n, begin, end);
}

void accumulate(DataType type, ReduceOp op, void* dst, const void* src, std::size_t count) {
  dispatch<AccumulateF>(type, op, dst, src, count);
}

void finish_average(DataType type, void* buf, std::size_t count, int n) {
  dispatch<AverageF>(type, buf, count, n);
}

}  // namespace strata::comm::detail
