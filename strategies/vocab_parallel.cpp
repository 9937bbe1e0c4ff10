#include "strategies/vocab_parallel.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "backends/vmath.hpp"
#include "layers/softmax_sum.hpp"

namespace strata {

// ------------------------------------------------------------------ embedding
template <class T>
VocabParallelEmbedding<T>::VocabParallelEmbedding(std::unique_ptr<Embedding<T>>&& whole,
                                                  comm::Communicator& tp)
    : whole_(std::move(whole)),
      tp_(tp),
      split_(whole_->vocab(), tp.size()),
      local_(split_.share, whole_->dim(), whole_->init_std()) {
  STRATA_REQUIRE(split_.possible(), config, "tensor parallelism: --tp ", tp.size(),
                 " leaves a rank without a row of the vocabulary ", whole_->vocab(), " of ",
                 whole_->name());
  local_.set_vocab_shard(split_.first(tp.rank()), whole_->vocab());
}

template <class T>
std::string VocabParallelEmbedding<T>::name() const {
  return "VocabParallelEmbedding(" + std::to_string(whole_->vocab()) + ", " +
         std::to_string(whole_->dim()) + ", tp=" + std::to_string(tp_.size()) + ")";
}

template <class T>
void VocabParallelEmbedding<T>::set_input_shape(const Shape& in) {
  Layer<T>::set_input_shape(in);
  local_.set_input_shape(in);
}

template <class T>
void VocabParallelEmbedding<T>::init(HostVector<T> params, Init scheme, std::uint64_t seed,
                                     std::uint64_t layer_index) const {
  init_shard<T>(*whole_, *this, tp_.rank(), params.data(), scheme, seed, layer_index);
}

template <class T>
void VocabParallelEmbedding<T>::shard_map(int r, std::size_t* index, std::uint8_t* replica) const {
  // Rows [first(r), first(r) + share): one contiguous block, its rows past
  // the vocabulary padding.
  const std::size_t dim = whole_->dim(), first = split_.first(r) * dim, held = split_.held(r) * dim;
  for (std::size_t k = 0; k < local_.num_params(); ++k) {
    index[k] = first + k;
    replica[k] = k < held ? kOwned : kPadding;
  }
}

template <class T>
void VocabParallelEmbedding<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>& saved) {
  local_.forward(ctx, x, y, saved);  // this rank's rows, zeros for the others' ids
  if (tp_.size() == 1) return;
  ctx.exec.fence();
  tp_.allreduce(y);
}

// ---------------------------------------------------------------- the loss
namespace vocab_detail {
// The logits as one row per label (P labels per output row).
template <class M>
M per_label(const M& m, std::size_t labels) {
  return m.extent(0) == 0 || labels == m.extent(0) ? m : as_rows(m, m.extent(1) / (labels / m.extent(0)));
}

// best(i) = the largest logit of row i on this rank; at(i) its class (the
// first such), as a value (exact below 2^24).
// Every kernel reads the rank's `width` real classes of each row, not the
// padding after them.
template <class T>
void row_max(Context& ctx, ConstMatrix<T> z, Vector<T> best, Vector<T> at, int first, int width) {
  const bool with_index = at.data() != nullptr;
  for_range(ctx, "strata::VocabParallelCrossEntropy::max", z.extent(0), KOKKOS_LAMBDA(const int i) {
        int b = 0;
        for (int j = 1; j < width; ++j)
          if (z(i, j) > z(i, b)) b = j;
        best(i) = z(i, b);
        if (with_index) at(i) = static_cast<T>(first + b);
      },
      z.extent(1));
}

// sums(i) = sum_j exp(z(i, j) - mx(i)); target(i) = z(i, label - first)
// when this rank holds the label's class, else 0.
template <class T>
void row_sums(Context& ctx, ConstMatrix<T> z, Labels labels, ConstVector<T> mx, Vector<T> sums,
              Vector<T> target, int first, int width) {
  for_range(ctx, "strata::VocabParallelCrossEntropy::sums", z.extent(0), KOKKOS_LAMBDA(const int i) {
        sums(i) = exp_sum(z, i, width, mx(i), false);
        const int c = labels(i) - first;
        target(i) = c >= 0 && c < width ? z(i, c) : T(0);
      },
      2 * z.extent(1));
}

// --reproducible: the same as exact pairs in e (hi of every row, lo of
// every row, then the target logits), whose sum over the ranks is exact
// (layers/softmax_sum.hpp).
template <class T>
void row_sums_exact(Context& ctx, ConstMatrix<T> z, Labels labels, ConstVector<T> mx, double* e,
                    int first, int width) {
  const std::size_t R = z.extent(0);
  for_range(ctx, "strata::VocabParallelCrossEntropy::exact_sums", R, KOKKOS_LAMBDA(const int i) {
        double hi = 0, lo = 0;
        add_exp_terms_exact(z, i, 0, width, mx(i), hi, lo);
        e[i] = hi;
        e[R + i] = lo;
        const int c = labels(i) - first;
        e[2 * R + i] = c >= 0 && c < width ? static_cast<double>(z(i, c)) : 0.0;
      },
      2 * z.extent(1));
}

// sums(i), target(i) from the pairs summed over the ranks.
template <class T>
void round_sums(Context& ctx, const double* e, std::size_t R, Vector<T> sums, Vector<T> target) {
  for_range(ctx, "strata::VocabParallelCrossEntropy::round_sums", R, KOKKOS_LAMBDA(const std::size_t i) {
        sums(i) = static_cast<T>(exact_value(e[i], e[R + i]));
        target(i) = static_cast<T>(e[2 * R + i]);  // one rank's logit, zeros elsewhere: exact
      });
}

// The loss of every labelled row (times weight) and, unless dz is empty,
// dz = (softmax - onehot) * scale on this rank's classes (0 on padding).
template <class T>
ExactSum loss_and_grad(Context& ctx, ConstMatrix<T> z, Labels labels, ConstVector<T> mx,
                     ConstVector<T> sums, ConstVector<T> target, Matrix<T> dz, T weight, T scale,
                     int first, int width) {
  const int padded = static_cast<int>(z.extent(1));
  const bool grad = dz.data() != nullptr;
  ExactSum sum;
  sum_range(ctx, "strata::VocabParallelCrossEntropy::loss", z.extent(0),
      KOKKOS_LAMBDA(const int i, ExactSum& acc) {
        const int label = labels(i);
        if (label < 0) {  // ignored
          if (grad)
            for (int j = 0; j < padded; ++j) dz(i, j) = T(0);
          return;
        }
        acc.add(static_cast<double>((mx(i) + kmath::log(sums(i)) - target(i)) * weight));
        if (grad) {
          const T inv = T(1) / sums(i);
          const int c = label - first;
          for (int j = 0; j < width; ++j)
            dz(i, j) = (vmath::exp(z(i, j) - mx(i)) * inv - (j == c ? T(1) : T(0))) * scale;
          for (int j = width; j < padded; ++j) dz(i, j) = T(0);
        }
      },
      sum, 2 * z.extent(1));
  return sum;
}

template <class T>
std::size_t matches(Context& ctx, ConstVector<T> at, Labels labels) {
  std::size_t n = 0;
  sum_range(ctx, "strata::VocabParallelCrossEntropy::correct", at.extent(0),
      KOKKOS_LAMBDA(const int i, std::size_t& acc) {
        acc += labels(i) >= 0 && static_cast<T>(labels(i)) == at(i) ? 1 : 0;
      },
      n);
  return n;
}
}  // namespace vocab_detail

template <class T>
VocabParallelCrossEntropy<T>::VocabParallelCrossEntropy(comm::Communicator& tp,
                                                        std::size_t first_class, std::size_t classes)
    : tp_(tp), first_(first_class), classes_(classes), share_(VocabSplit(classes, tp.size()).share) {
  const VocabSplit v(classes, tp.size());
  STRATA_REQUIRE(v.possible() && first_class == v.first(tp.rank()), config, name(), ": classes [",
                 first_class, ", +", v.share, ") are not rank ", tp.rank(), "'s block of ", classes,
                 " over ", tp.size(), " ranks");
  held_ = v.held(tp.rank());
}

template <class T>
void VocabParallelCrossEntropy<T>::check(std::size_t batch, std::size_t width,
                                         const Targets<T>& t) const {
  STRATA_REQUIRE(t.labels.data() != nullptr || batch == 0, config, name(),
                 ": needs integer class labels, but the targets are values");
  const std::size_t n = t.labels.extent(0), share = share_;
  STRATA_REQUIRE(batch == 0 || (n % batch == 0 && n > 0 && width == (n / batch) * share), config,
                 name(), ": ", n, " labels for a model output of shape (", batch, ", ", width,
                 ") holding ", share, " of the ", classes_, " classes of each position");
}

template <class T>
ExactSum VocabParallelCrossEntropy<T>::forward_backward(Context& ctx, ConstMatrix<T> out,
                                                      const Targets<T>& t, Matrix<T> dout, T scale) {
  check(out.extent(0), out.extent(1), t);
  const std::size_t labels = t.labels.extent(0);
  if (out.extent(0) == 0) return ExactSum();
  const T weight = T(1) / static_cast<T>(labels / out.extent(0));  // each position's share of its sample
  const ConstMatrix<T> z = vocab_detail::per_label(out, labels);
  if (dout.data() != nullptr) dout = vocab_detail::per_label(dout, labels);
  const std::size_t R = z.extent(0);
  if (stats_.extent(0) < 3 * R) stats_ = VectorBuffer<T>("strata::VocabParallelCrossEntropy", 3 * R);
  const Vector<T> mx(stats_.data(), R), both(stats_.data() + R, 2 * R);
  const Vector<T> sums(both.data(), R), target(both.data() + R, R);
  const int first = static_cast<int>(first_), width = static_cast<int>(held_);
  vocab_detail::row_max<T>(ctx, z, mx, Vector<T>(), first, width);
  ctx.exec.fence();
  tp_.allreduce(mx, comm::ReduceOp::max);
  if (ctx.reproducible) {
    if (exact_.extent(0) < 3 * R) exact_ = Kokkos::View<double*, MemSpace>("strata::VocabParallelCrossEntropy::exact", 3 * R);
    const auto e = Kokkos::subview(exact_, Kokkos::make_pair(std::size_t(0), 3 * R));
    vocab_detail::row_sums_exact<T>(ctx, z, t.labels, mx, e.data(), first, width);
    ctx.exec.fence();
    tp_.allreduce(e);
    vocab_detail::round_sums<T>(ctx, e.data(), R, sums, target);
  } else {
    vocab_detail::row_sums<T>(ctx, z, t.labels, mx, sums, target, first, width);
    ctx.exec.fence();
    tp_.allreduce(both);
  }
  return vocab_detail::loss_and_grad<T>(ctx, z, t.labels, mx, sums, target, dout, weight,
                                        scale * weight, first, width);
}

template <class T>
std::size_t VocabParallelCrossEntropy<T>::count_correct(Context& ctx, ConstMatrix<T> out, Labels labels) {
  if (out.extent(0) == 0) return 0;
  const ConstMatrix<T> z = vocab_detail::per_label(out, labels.extent(0));
  const std::size_t R = z.extent(0);
  if (stats_.extent(0) < 3 * R) stats_ = VectorBuffer<T>("strata::VocabParallelCrossEntropy", 3 * R);
  const Vector<T> best(stats_.data(), R), at(stats_.data() + R, R);
  vocab_detail::row_max<T>(ctx, z, best, at, static_cast<int>(first_), static_cast<int>(held_));
  std::vector<T> b(R), a(R);
  Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(b.data(), R), best);
  Kokkos::deep_copy(Kokkos::View<T*, Kokkos::HostSpace, Unmanaged>(a.data(), R), at);
  // The largest logit over the ranks, then the smallest class holding it.
  std::vector<T> top = b;
  tp_.allreduce(top.data(), top.data(), R, comm::data_type_of<T>(), comm::ReduceOp::max);
  for (std::size_t i = 0; i < R; ++i)
    if (b[i] != top[i]) a[i] = static_cast<T>(classes_);
  tp_.allreduce(a.data(), a.data(), R, comm::data_type_of<T>(), comm::ReduceOp::min);
  Kokkos::deep_copy(at, Kokkos::View<const T*, Kokkos::HostSpace, Unmanaged>(a.data(), R));
  return vocab_detail::matches<T>(ctx, at, labels);
}

template class VocabParallelEmbedding<float>;
template class VocabParallelEmbedding<double>;
template class VocabParallelCrossEntropy<float>;
template class VocabParallelCrossEntropy<double>;

}  // namespace strata
