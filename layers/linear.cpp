#include "layers/linear.hpp"

#include "backends/error.hpp"
#include "backends/exact_sum.hpp"
#include "backends/gemm_reproducible.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/registry.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace strata {

template <class T>
Linear<T>::Linear(std::size_t in, std::size_t out, bool bias, double std)
    : in_(in), out_(out), bias_(bias), std_(std) {
  STRATA_REQUIRE(std >= 0, config, "Linear: std must be >= 0 (0: the model's initialisation), got ",
                 std);
  STRATA_REQUIRE(in > 0 && out > 0, config, "Linear(", in, ", ", out,
                 "): widths must be positive");
  STRATA_REQUIRE(in <= Shape::max_numel / out, config, "Linear(", in, ", ", out,
                 "): more than ", Shape::max_numel, " weights");
}

template <class T>
Linear<T>::Linear(std::size_t in, std::size_t out, bool bias, double std, std::string tie)
    : Linear(in, out, bias, std) {
  tie_ = std::move(tie);
}

template <class T>
void Linear<T>::tie_weight(const Shape& shape) {
  STRATA_REQUIRE(shape == (Shape{out_, in_}), config, name(), ": the weight of '", tie_,
                 "' has shape ", shape.str(), ", but this layer needs {", out_, ", ", in_, "}");
  tied_ = true;
}

template <class T>
void Linear<T>::bind_tied(Vector<T> weight, Vector<T> grad) {
  weight_ = reshape(weight, 0, out_, in_);
  dweight_ = reshape(grad, 0, out_, in_);
}

template <class T>
LayerPtr<T> Linear<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild&) {
  const double sd = args.number("std", 0.0);
  STRATA_REQUIRE(sd >= 0, config, args.at("std"), ": must be >= 0 (0: the model's initialisation)");
  return std::make_unique<Linear<T>>(in.back(), args.positive("out"), args.flag("bias", true), sd,
                                     args.text("tie", ""));
}

template <class T>
std::string Linear<T>::name() const {
  return "Linear(" + std::to_string(in_) + ", " + std::to_string(out_) +
         (bias_ ? "" : ", bias=false") + (tie_.empty() ? ")" : ", tied to " + tie_ + ")");
}

template <class T>
Shape Linear<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.back() == in_, config, name(), " expects inputs whose last dimension is ", in_,
                 " but gets shape ", in.str());
  return in.with_back(out_);
}

template <class T>
std::vector<ParamSpec> Linear<T>::params() const {
  // Weights by the model's scheme with fans (in, out), or N(0, std^2) with
  // `std`; biases zero (U(-1/sqrt(in), +) under torch-default), zero with
  // `std` or a tied weight, as PyTorch's tied heads have none or zero.
  std::vector<ParamSpec> t;
  const double in = static_cast<double>(in_), out = static_cast<double>(out_);
  if (!tied_)
    t.push_back({"weight", Shape{out_, in_}, ParamGroup::decay,
                 std_ > 0 ? ParamInit::normal(std_) : ParamInit::weights(in, out)});
  if (bias_)
    t.push_back({"bias", Shape{out_}, ParamGroup::no_decay,
                 tied_ || std_ > 0 ? ParamInit::constant(0) : ParamInit::bias(in)});
  return t;
}

template <class T>
void Linear<T>::add_costs(std::vector<LayerCost>& out) const {
  const Shape& in = this->input_shape();
  const std::size_t positions = in.rank() ? in.numel() / in_ : 1;
  out.push_back(this->cost(2.0 * static_cast<double>(positions) * static_cast<double>(in_ * out_)));
  out.back().gemm = features_last_gemm(in.numel(), in.back(), output_shape(in).back());
}

template <class T>
void Linear<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  if (!tied_) {  // tied: bind_tied gives the weight
    weight_ = s[0].value_matrix();
    dweight_ = s[0].grad_matrix();
  }
  if (bias_) {
    b_ = s.back().value;
    db_ = s.back().grad;
  }
}

template <class T>
void Linear<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  if (x.extent(1) != in_) {  // several positions per sample
    x = as_rows(x, in_);
    y = as_rows(y, out_);
  }
  if (exact_forward()) detail::round_exact<T>(ctx, exact_product(ctx, x, false), y);
  else ctx.blas.gemm(Op::N, Op::T, T(1), x, ConstMatrix<T>(weight_), T(0), y);
  if (bias_) detail::add_bias<T>(ctx, y, b_);
}

template <class T>
void Linear<T>::set_inner_chunk(std::size_t s) {
  STRATA_REQUIRE((s == 0 || std::is_same_v<T, float>), config,
                 "--reproducible trains float models");
  inner_chunk_ = s;
  if (s == 0) pairs_ = Kokkos::View<double*, MemSpace>();
}

template <class T>
Kokkos::View<double*, MemSpace> Linear<T>::exact_product(Context& ctx, ConstMatrix<T> a,
                                                         bool input_grad) {
  const std::size_t k = input_grad ? out_ : in_, n = input_grad ? in_ : out_;
  STRATA_REQUIRE(input_grad ? exact_input_grad() : exact_forward(), runtime, name(),
                 ": exact_product of a sum over ", k, " values without a chunk (set_inner_chunk)");
  if (a.extent(1) != k) a = as_rows(a, k);
  const std::size_t rows = a.extent(0), size = 2 * rows * n;
  if (pairs_.extent(0) < size) {
    pairs_ = Kokkos::View<double*, MemSpace>();  // free the old one first
    pairs_ = Kokkos::View<double*, MemSpace>(Kokkos::view_alloc("strata::Linear::exact_product",
                                                                Kokkos::WithoutInitializing),
                                             size);
  }
  double* e = pairs_.data();
  for_range(ctx, "strata::Linear::zero_pairs", size, KOKKOS_LAMBDA(const std::size_t i) { e[i] = 0.0; });
  if constexpr (std::is_same_v<T, float>)
    gemm_exact_chunks(ctx.exec, Op::N, input_grad ? Op::N : Op::T, static_cast<int>(rows),
                      static_cast<int>(n), static_cast<int>(k), static_cast<int>(inner_chunk_),
                      a.data(), static_cast<int>(a.stride(0)), weight_.data(),
                      static_cast<int>(in_), e, static_cast<int>(n));
  return Kokkos::subview(pairs_, Kokkos::make_pair(std::size_t(0), size));
}

namespace detail {
template <class T>
void add_bias(Context& ctx, Matrix<T> y, ConstVector<T> b) {
  // One item per element on a device, a row per item on the host.
  for_elements(ctx, "strata::Linear::bias", y.extent(0), y.extent(1),
      KOKKOS_LAMBDA(const std::size_t) { return 0; },
      KOKKOS_LAMBDA(int, const std::size_t i, const std::size_t j) { y(i, j) += b(j); });
}

template <class T>
void round_exact(Context& ctx, Kokkos::View<const double*, MemSpace> pairs, Matrix<T> y) {
  const std::size_t cols = y.extent(1);
  STRATA_REQUIRE(pairs.extent(0) == 2 * y.extent(0) * cols, runtime, "round_exact: ",
                 pairs.extent(0), " doubles for ", y.extent(0), " x ", cols, " values");
  const double* p = pairs.data();
  for_range(ctx, "strata::Linear::round_exact", y.extent(0), KOKKOS_LAMBDA(const std::size_t i) {
        for (std::size_t j = 0; j < cols; ++j) {
          const std::size_t v = i * cols + j;
          y(i, j) = static_cast<T>(exact_value(p[2 * v], p[2 * v + 1]));
        }
      },
      cols);
}

template void round_exact<float>(Context&, Kokkos::View<const double*, MemSpace>, Matrix<float>);
template void round_exact<double>(Context&, Kokkos::View<const double*, MemSpace>, Matrix<double>);
template void add_bias<float>(Context&, Matrix<float>, ConstVector<float>);
template void add_bias<double>(Context&, Matrix<double>, ConstVector<double>);
}  // namespace detail

template <class T>
void Linear<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  ConstMatrix<T> x = saved.x;
  const std::size_t samples = dy.extent(0);
  if (dy.extent(1) != out_) {  // several positions per sample
    dy = as_rows(dy, out_);
    x = as_rows(x, in_);
    if (dx.data() != nullptr) dx = as_rows(dx, in_);
  }
  // dW(out, in) += dy^T (out, batch) x (batch, in)
  add_weight_grad<T>(ctx, samples, dy, x, dweight_);
  if (bias_) add_column_sums<T>(ctx, dy, db_);
  if (dx.data() == nullptr) return;
  if (exact_input_grad()) detail::round_exact<T>(ctx, exact_product(ctx, dy, true), dx);
  else ctx.blas.gemm(Op::N, Op::N, T(1), dy, ConstMatrix<T>(weight_), T(0), dx);
}

template class Linear<float>;
template class Linear<double>;

}  // namespace strata
