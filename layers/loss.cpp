#include "layers/loss.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/vmath.hpp"
#include "layers/softmax_sum.hpp"

namespace strata {

LossKind parse_loss(const std::string& name) {
  if (name == "cross-entropy" || name == "ce") return LossKind::cross_entropy;
  if (name == "mse") return LossKind::mse;
  STRATA_THROW(config, "unknown loss '", name, "' (expected cross-entropy or mse)");
}

const char* to_string(LossKind kind) {
  return kind == LossKind::cross_entropy ? "cross-entropy" : "mse";
}

template <class T>
void SoftmaxCrossEntropy<T>::check(std::size_t batch, std::size_t width,
                                   const Targets<T>& t) const {
  STRATA_REQUIRE(t.labels.data() != nullptr || batch == 0, config, name(),
                 ": needs integer class labels, but the targets are values of shape (",
                 t.values.extent(0), ", ", t.values.extent(1), ")");
  const std::size_t n = t.labels.extent(0);
  STRATA_REQUIRE(n == batch || (batch > 0 && n % batch == 0 && width % (n / batch) == 0), config,
                 name(), ": ", n, " labels for a model output of shape (", batch, ", ", width,
                 ") (one label per row, or per position: a multiple of the rows that divides "
                 "the width)");
  STRATA_REQUIRE(width >= 1, config, name(), ": model output has width 0");
}

namespace {
// The output as one row per label: (batch * P, width / P) for P labels per row.
template <class M>
M per_label(const M& m, std::size_t labels) {
  return m.extent(0) == 0 || labels == m.extent(0)
             ? m
             : as_rows(m, m.extent(1) / (labels / m.extent(0)));
}
}  // namespace

template <class T>
ExactSum SoftmaxCrossEntropy<T>::forward_backward(Context& ctx, ConstMatrix<T> out,
                                                const Targets<T>& t, Matrix<T> dout, T scale) {
  check(out.extent(0), out.extent(1), t);
  // P labels per row: each position weighs 1 / P of its sample.
  const std::size_t positions = out.extent(0) > 0 ? t.labels.extent(0) / out.extent(0) : 1;
  const T weight = T(1) / static_cast<T>(positions);
  scale *= weight;
  out = per_label(out, t.labels.extent(0));
  if (dout.data() != nullptr) dout = per_label(dout, t.labels.extent(0));
  const int width = static_cast<int>(out.extent(1));
  const bool grad = dout.data() != nullptr;
  Labels labels = t.labels;
  const bool exact = ctx.reproducible;  // the softmax's sum too (layers/softmax_sum.hpp)
  ExactSum sum;
  sum_range(ctx, "strata::SoftmaxCrossEntropy", out.extent(0),
      KOKKOS_LAMBDA(const int i, ExactSum& acc) {
        const int label = labels(i);
        STRATA_EXPECT(label < width);
        if (label < 0) {  // ignored
          if (grad)
            for (int j = 0; j < width; ++j) dout(i, j) = T(0);
          return;
        }
        T mx = out(i, 0);
        for (int j = 1; j < width; ++j) mx = out(i, j) > mx ? out(i, j) : mx;
        const T s = exp_sum(out, i, width, mx, exact);
        const T lse = mx + kmath::log(s);
        acc.add(static_cast<double>((lse - out(i, label)) * weight));
        if (grad) {
          const T inv = T(1) / s;
          for (int j = 0; j < width; ++j)
            dout(i, j) = (vmath::exp(out(i, j) - mx) * inv - (j == label ? T(1) : T(0))) * scale;
        }
      },
      sum, 3 * width);
  return sum;
}

template <class T>
void MeanSquaredError<T>::check(std::size_t batch, std::size_t width, const Targets<T>& t) const {
  STRATA_REQUIRE(t.values.data() != nullptr || batch == 0, config, name(),
                 ": needs target values of shape (", batch, ", ", width,
                 "), but the targets are class labels");
  STRATA_REQUIRE(t.values.extent(0) == batch && t.values.extent(1) == width, config, name(),
                 ": target shape (", t.values.extent(0), ", ", t.values.extent(1),
                 ") does not match model output shape (", batch, ", ", width,
                 "); Strata does not broadcast targets");
}

template <class T>
ExactSum MeanSquaredError<T>::forward_backward(Context& ctx, ConstMatrix<T> out,
                                             const Targets<T>& t, Matrix<T> dout, T scale) {
  check(out.extent(0), out.extent(1), t);
  const int width = static_cast<int>(out.extent(1));
  const bool grad = dout.data() != nullptr;
  ConstMatrix<T> target = t.values;
  const T gscale = T(2) / T(width) * scale;
  ExactSum sum;
  sum_range(ctx, "strata::MeanSquaredError", out.extent(0),
      KOKKOS_LAMBDA(const int i, ExactSum& acc) {
        T s = 0;
        for (int j = 0; j < width; ++j) {
          const T d = out(i, j) - target(i, j);
          s += d * d;
          if (grad) dout(i, j) = d * gscale;
        }
        acc.add(static_cast<double>(s / T(width)));
      },
      sum, width);
  return sum;
}

template <class T>
std::unique_ptr<Loss<T>> make_loss(LossKind kind) {
  if (kind == LossKind::cross_entropy) return std::make_unique<SoftmaxCrossEntropy<T>>();
  return std::make_unique<MeanSquaredError<T>>();
}

template <class T>
std::size_t count_correct(Context& ctx, ConstMatrix<T> out, Labels labels) {
  STRATA_REQUIRE(labels.extent(0) == out.extent(0) ||
                     (out.extent(0) > 0 && labels.extent(0) % out.extent(0) == 0 &&
                      out.extent(1) % (labels.extent(0) / out.extent(0)) == 0),
                 config, "count_correct: ", labels.extent(0), " labels for ", out.extent(0),
                 " rows of width ", out.extent(1));
  out = per_label(out, labels.extent(0));
  const int width = static_cast<int>(out.extent(1));
  std::size_t correct = 0;
  sum_range(ctx, "strata::count_correct", out.extent(0),
      KOKKOS_LAMBDA(const int i, std::size_t& acc) {
        int best = 0;
        for (int j = 1; j < width; ++j)
          if (out(i, j) > out(i, best)) best = j;
        acc += best == labels(i) ? 1 : 0;  // never for an ignored (negative) label
      },
      correct, width);
  return correct;
}

template <class T>
std::size_t Loss<T>::count_correct(Context& ctx, ConstMatrix<T> out, Labels labels) {
  return strata::count_correct<T>(ctx, out, labels);
}

template class Loss<float>;
template class Loss<double>;
template class SoftmaxCrossEntropy<float>;
template class SoftmaxCrossEntropy<double>;
template class MeanSquaredError<float>;
template class MeanSquaredError<double>;
template std::unique_ptr<Loss<float>> make_loss<float>(LossKind);
template std::unique_ptr<Loss<double>> make_loss<double>(LossKind);
template std::size_t count_correct<float>(Context&, ConstMatrix<float>, Labels);
template std::size_t count_correct<double>(Context&, ConstMatrix<double>, Labels);

}  // namespace strata
