#include "layers/dropout.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/random.hpp"
#include "layers/registry.hpp"

#include <cmath>

namespace strata {

template <class T>
Dropout<T>::Dropout(double p, std::uint64_t seed)
    : p_(p), seed_(random::mix64(seed ^ random::stream_dropout)) {
  STRATA_REQUIRE(p >= 0.0 && p < 1.0, config, "Dropout: probability must be in [0, 1), got ",
                 p);
}

template <class T>
LayerPtr<T> Dropout<T>::from_args(LayerArgs& args, const Shape&, LayerBuild& build) {
  const double p = args.number("p", 0.5);
  STRATA_REQUIRE(p >= 0.0 && p < 1.0, config, args.at("p"), ": a probability in [0, 1), got ", p);
  return std::make_unique<Dropout<T>>(p, build.seed + build.dropouts++);
}

template <class T>
void Dropout<T>::write_buffer(std::size_t, const std::vector<double>& v) {
  const double c = v.at(0);
  STRATA_REQUIRE(c >= 0 && c <= 9007199254740992.0 && c == std::floor(c), config, name(),
                 ": pass counter ", c, " is not a whole number in [0, 2^53]");
  calls_ = static_cast<std::uint64_t>(c);
}

template <class T>
std::string Dropout<T>::name() const {
  return "Dropout(" + std::to_string(p_) + ")";
}

namespace detail {
// y = x * mask / (1 - p) with mask from (seed, call, global index); also used
// for dx. Element (i, j) of the (rows, cols) block has the global index
// (first_row + i) * total + first_col + j.
template <class T>
void dropout_apply(Context& ctx, const char* label, const T* in, T* out, std::size_t rows,
                   std::size_t cols, std::size_t first_row, std::size_t first_col,
                   std::size_t total, std::uint64_t seed, std::uint64_t call, double p) {
  const float threshold = static_cast<float>(p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for_range(ctx, label, rows * cols, KOKKOS_LAMBDA(const std::size_t k) {
    const std::size_t i = k / cols, j = k - i * cols;
    const std::size_t global = (first_row + i) * total + first_col + j;
    const bool keep = random::uniform_float(seed, call, global) >= threshold;
    out[k] = keep ? in[k] * scale : T(0);
  });
}
}  // namespace detail

template <class T>
typename Dropout<T>::Block Dropout<T>::block(std::size_t rows, std::size_t cols,
                                             std::size_t row_offset) const {
  if (seq_ranks_ > 0) return {rows, cols, row_offset, cols * seq_ranks_};
  if (col_total_ == 0) return {rows, cols, row_offset, cols};
  // A column shard of the last dimension: one row per position.
  const std::size_t width = this->in_shape_.rank() > 0 ? this->in_shape_.back() : cols;
  const std::size_t positions = width > 0 ? cols / width : 1;
  return {rows * positions, width, row_offset * positions, col_total_};
}

template <class T>
void Dropout<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& s) {
  s.counter = calls_;  // backward draws the masks of this pass
  if (!s.training || p_ == 0.0) {
    Kokkos::deep_copy(ctx.exec, y, x);
    return;
  }
  const Block b = block(x.extent(0), x.extent(1), s.row_offset);
  detail::dropout_apply(ctx, "strata::Dropout::forward", x.data(), y.data(), b.rows, b.cols,
                        b.first_row, first_col(b.cols), b.total, seed_, calls_, p_);
}

template <class T>
void Dropout<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& s) {
  if (dx.data() == nullptr) return;
  if (!s.training || p_ == 0.0) {
    if (dx.data() != dy.data()) Kokkos::deep_copy(ctx.exec, dx, dy);
    return;
  }
  const Block b = block(dy.extent(0), dy.extent(1), s.row_offset);
  detail::dropout_apply(ctx, "strata::Dropout::backward", dy.data(), dx.data(), b.rows, b.cols,
                        b.first_row, first_col(b.cols), b.total, seed_, s.counter, p_);
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace strata
