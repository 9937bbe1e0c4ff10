// Host-memory reduction loops shared by the host communicators: fixed
// source order (rank 0 first), so results are bitwise reproducible.
#pragma once

#include "backends/comm/communicator.hpp"

#include <cstddef>

namespace strata::comm::detail {

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i in [begin, end). dst may
// alias any source. average divides the sum by n (integer division for ints).
void reduce(DataType type, ReduceOp op, void* dst, const void* const* srcs, int n,
            std::size_t begin, std::size_t end);

// dst[i] = op(dst[i], src[i]) for i in [0, count): used by transports that
// receive one peer at a time. finish_average divides by n afterwards.
void accumulate(DataType type, ReduceOp op, void* dst, const void* src, std::size_t count);
void finish_average(DataType type, void* buf, std::size_t count, int n);

}  // namespace strata::comm::detail
