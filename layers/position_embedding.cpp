#include "layers/position_embedding.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/registry.hpp"

namespace strata {

template <class T>
PositionEmbedding<T>::PositionEmbedding(std::size_t context, std::size_t dim, double std)
    : context_(context), dim_(dim), std_(std) {
  STRATA_REQUIRE(context > 0 && dim > 0, config, "PositionEmbedding(", context, ", ", dim,
                 "): sizes must be positive");
  STRATA_REQUIRE(context <= Shape::max_numel / dim, config, "PositionEmbedding(", context, ", ",
                 dim, "): more than ", Shape::max_numel, " weights");
  STRATA_REQUIRE(std > 0, config, "PositionEmbedding: std must be positive, got ", std);
}

template <class T>
LayerPtr<T> PositionEmbedding<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild&) {
  STRATA_REQUIRE(in.rank() == 2, config, args.where(),
                 ": position_embedding takes shape {T, dim}, but gets shape ", in.str());
  return std::make_unique<PositionEmbedding<T>>(args.positive("context"), in.back(),
                                                args.number("std", 0.02));
}

template <class T>
std::string PositionEmbedding<T>::name() const {
  return "PositionEmbedding(" + std::to_string(context_) + ", " + std::to_string(dim_) + ")";
}

template <class T>
Shape PositionEmbedding<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.rank() == 2 && in.back() == dim_, config, name(),
                 " takes shape {T, ", dim_, "}, but gets shape ", in.str());
  STRATA_REQUIRE(in[0] <= context_, config, name(), ": a sequence of ", in[0],
                 " positions is longer than the context of ", context_);
  return in;
}

template <class T>
void PositionEmbedding<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  weight_ = s[0].value;
  dweight_ = s[0].grad;
}

template <class T>
void PositionEmbedding<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  const std::size_t width = x.extent(1);  // T * dim: position t's vector is W(t * dim ...)
  const ConstVector<T> w = weight_;
  for_range(ctx, "strata::PositionEmbedding::forward", x.extent(0) * width,
      KOKKOS_LAMBDA(const std::size_t k) {
        y.data()[k] = x.data()[k] + w(k % width);
      });
}

template <class T>
void PositionEmbedding<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>&) {
  const std::size_t width = dy.extent(1);
  // The positions' rows of the table: the sums over the batch of dy's columns.
  add_column_sums<T>(ctx, dy, Vector<T>(dweight_.data(), width));
  if (dx.data() != nullptr && dx.data() != dy.data()) Kokkos::deep_copy(ctx.exec, dx, dy);
}

template <class T>
void PositionEmbedding<T>::decode(Context& ctx, ConstMatrix<T> x, Matrix<T> y, std::size_t position,
                                  std::size_t, Saved<T>&) {
  STRATA_REQUIRE(position < context_, config, name(), ": position ", position,
                 " is beyond the context of ", context_);
  const std::size_t width = x.extent(1), first = position * dim_;
  const ConstVector<T> w = weight_;
  for_range(ctx, "strata::PositionEmbedding::decode", width, KOKKOS_LAMBDA(const std::size_t k) {
        y(0, k) = x(0, k) + w(first + k);
      });
}

template class PositionEmbedding<float>;
template class PositionEmbedding<double>;

}  // namespace strata
