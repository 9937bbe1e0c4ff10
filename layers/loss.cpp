#include "layers/loss.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/segment_sums.hpp"
#include "backends/vmath.hpp"

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

namespace {
// What the gradient of one row shares: its largest value, 1 / its softmax's
// denominator, its label.
template <class T>
struct SoftmaxRow {
  T mx, inv;
  int label;
};
}  // namespace

// Shaped for a device as well as host threads (a row of a GPT's 50,257
// classes is too much for one GPU thread, and 4,096 rows too few threads):
//   1. the row maxima: rows x P items, each the largest value of a block of
//      classes, then one item per row takes the largest of its P;
//   2. the denominators, sum over j of exp(z(i, j) - mx(i)): two-stage in
//      double (backends/segment_sums.hpp), or exact under --reproducible
//      (each term split on the exact grid, so the grouping does not matter);
//   3. the loss, one item per row added into an exact sum;
//   4. the gradient, one item per value.
// P = segment_partials(rows, width) and the order of every sum depend on the
// shape alone: the same bits with any thread count and on any backend.
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
  const std::size_t rows = out.extent(0), width = out.extent(1);
  if (rows == 0) return ExactSum();
  const Labels labels = t.labels;
  const bool exact = ctx.reproducible;  // the denominators exact too
  const std::size_t P = segment_partials(rows, width), L = (width + P - 1) / P;
  double* ws = sums_workspace(ctx, 2 * rows + segment_sums_workspace(rows, width, 2));
  double* const mx = ws;             // rows: the row's largest value
  double* const denom = ws + rows;   // rows: sum over j of exp(z - mx), as a T
  double* const work = ws + 2 * rows;

  for_range(ctx, "strata::SoftmaxCrossEntropy::max_partials", rows * P,
      KOKKOS_LAMBDA(const std::size_t item) {
        const std::size_t i = item / P, begin = item % P * L;
        const std::size_t end = begin + L < width ? begin + L : width;
        if (begin >= end) return;  // an empty last block (stage 2 skips it)
        T m = out(i, begin);
        for (std::size_t j = begin + 1; j < end; ++j) m = out(i, j) > m ? out(i, j) : m;
        work[item] = static_cast<double>(m);
      },
      L);
  for_range(ctx, "strata::SoftmaxCrossEntropy::max", rows, KOKKOS_LAMBDA(const std::size_t i) {
        double m = work[i * P];
        for (std::size_t p = 1; p < P && p * L < width; ++p)
          m = work[i * P + p] > m ? work[i * P + p] : m;
        mx[i] = m;
      },
      P);
  segment_sums<2>(ctx, "strata::SoftmaxCrossEntropy::exp_partials",
      "strata::SoftmaxCrossEntropy::exp_sums", Terms::contiguous, rows, 1, width, work,
      KOKKOS_LAMBDA(const std::size_t i, std::size_t, const std::size_t j, double* acc) {
        const double e = static_cast<double>(vmath::exp(out(i, j) - static_cast<T>(mx[i])));
        if (exact) {
          double h, l;
          exact_split(e, h, l);
          acc[0] += h;
          acc[1] += l;
        } else {
          acc[0] += e;
        }
      },
      KOKKOS_LAMBDA(const std::size_t i, const double* total) {
        denom[i] = static_cast<double>(
            static_cast<T>(exact ? exact_value(total[0], total[1]) : total[0]));
      });

  ExactSum sum;
  sum_range(ctx, "strata::SoftmaxCrossEntropy", rows, KOKKOS_LAMBDA(const std::size_t i, ExactSum& acc) {
        const int label = labels(i);
        STRATA_EXPECT(label < static_cast<int>(width));
        if (label < 0) return;  // ignored
        const T lse = static_cast<T>(mx[i]) + kmath::log(static_cast<T>(denom[i]));
        acc.add(static_cast<double>((lse - out(i, label)) * weight));
      },
      sum);
  if (dout.data() == nullptr) return sum;
  for_elements(ctx, "strata::SoftmaxCrossEntropy::grad", rows, width,
      KOKKOS_LAMBDA(const std::size_t i) {
        return SoftmaxRow<T>{static_cast<T>(mx[i]), T(1) / static_cast<T>(denom[i]), labels(i)};
      },
      KOKKOS_LAMBDA(const SoftmaxRow<T>& r, const std::size_t i, const std::size_t j) {
        dout(i, j) = r.label < 0 ? T(0)
                                 : (vmath::exp(out(i, j) - r.mx) * r.inv -
                                    (static_cast<int>(j) == r.label ? T(1) : T(0))) * scale;
      });
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
