#include "layers/embedding.hpp"

#include "backends/error.hpp"
#include "backends/launch.hpp"
#include "layers/batch_sums.hpp"
#include "layers/registry.hpp"

namespace strata {

template <class T>
Embedding<T>::Embedding(std::size_t vocab, std::size_t dim, double std)
    : vocab_(vocab), dim_(dim), std_(std), total_(vocab) {
  STRATA_REQUIRE(vocab > 0 && dim > 0, config, "Embedding(", vocab, ", ", dim,
                 "): sizes must be positive");
  STRATA_REQUIRE(vocab <= (std::size_t(1) << 24), config, "Embedding(", vocab, ", ", dim,
                 "): a vocabulary above 2^24 ids is not exact in float");
  STRATA_REQUIRE(vocab <= Shape::max_numel / dim, config, "Embedding(", vocab, ", ", dim,
                 "): more than ", Shape::max_numel, " weights");
  STRATA_REQUIRE(std > 0, config, "Embedding: std must be positive, got ", std);
}

template <class T>
LayerPtr<T> Embedding<T>::from_args(LayerArgs& args, const Shape& in, LayerBuild&) {
  STRATA_REQUIRE(in.rank() == 1, config, args.where(),
                 ": embedding takes token ids of shape {T}, but gets shape ", in.str());
  return std::make_unique<Embedding<T>>(args.positive("vocab"), args.positive("dim"),
                                        args.number("std", 0.02));
}

template <class T>
std::string Embedding<T>::name() const {
  return "Embedding(" + std::to_string(vocab_) + ", " + std::to_string(dim_) + ")";
}

template <class T>
Shape Embedding<T>::output_shape(const Shape& in) const {
  STRATA_REQUIRE(in.rank() == 1, config, name(), " takes token ids of shape {T}, but gets shape ",
                 in.str());
  return Shape{in[0], dim_};
}

template <class T>
void Embedding<T>::set_vocab_shard(std::size_t first, std::size_t total) {
  // The last rows of a padded vocabulary's last block may lie past it.
  STRATA_REQUIRE(first < total && total <= (std::size_t(1) << 24), config, name(), ": rows [", first,
                 ", ", first + vocab_, ") are not a block of a vocabulary of ", total);
  first_ = first;
  total_ = total;
}

template <class T>
void Embedding<T>::bind(Vector<T> params, Vector<T> grads) {
  const auto s = this->slices(params, grads);
  weight_ = s[0].value_matrix();
  dweight_ = s[0].grad_matrix();
}

template <class T>
void Embedding<T>::forward(Context& ctx, ConstMatrix<T> x, Matrix<T> y, Saved<T>&) {
  const ConstVector<T> ids(x.data(), x.extent(0) * x.extent(1));
  const int vocab = static_cast<int>(total_);
  std::size_t bad = 0;
  sum_range(ctx, "strata::Embedding::check", ids.extent(0),
      KOKKOS_LAMBDA(const int n, std::size_t& acc) {
        const T v = ids(n);
        acc += (v >= T(0) && v < T(vocab) && v == T(static_cast<int>(v))) ? 0 : 1;
      },
      bad);
  STRATA_REQUIRE(bad == 0, data, name(), ": ", bad, " of the batch's ", ids.extent(0),
                 " token ids are not whole numbers in [0, ", total_, ")");
  const Matrix<T> rows = as_rows(y, dim_);
  const ConstMatrix<T> w = weight_;
  const int dim = static_cast<int>(dim_), first = static_cast<int>(first_),
            held = static_cast<int>(vocab_);
  for_range(ctx, "strata::Embedding::forward", ids.extent(0), KOKKOS_LAMBDA(const int n) {
        const int id = static_cast<int>(ids(n)) - first;
        if (id >= 0 && id < held)
          for (int c = 0; c < dim; ++c) rows(n, c) = w(id, c);
        else
          for (int c = 0; c < dim; ++c) rows(n, c) = T(0);
      },
      dim_);
}

template <class T>
void Embedding<T>::backward(Context& ctx, ConstMatrix<T> dy, Matrix<T> dx, Saved<T>& saved) {
  // Column blocks: each item adds its columns of every position in position
  // order. On the host a block is a cache line of 16 floats (one line of dy
  // and of dW per position); on a device one column per thread.
  constexpr int block = host_kernels ? 16 : 1;
  const std::size_t positions = saved.x.extent(0) * saved.x.extent(1);
  const ConstVector<T> ids(saved.x.data(), positions);
  const ConstMatrix<T> g = as_rows(dy, dim_);
  const Matrix<T> dw = dweight_;
  const int dim = static_cast<int>(dim_), n = static_cast<int>(positions),
            first = static_cast<int>(first_), held = static_cast<int>(vocab_);
  // --reproducible: every position's row added exactly into the exact twin,
  // so the split of the positions over ranks cannot matter.
  double* e = ctx.exact != nullptr ? exact_twin(ctx, dw.data(), dw.size()) : nullptr;
  for_range(ctx, "strata::Embedding::backward", (dim_ + block - 1) / block,
      KOKKOS_LAMBDA(const int b) {
        const int c0 = b * block, c1 = c0 + block < dim ? c0 + block : dim;
        for (int p = 0; p < n; ++p) {
          const int id = static_cast<int>(ids(p)) - first;
          if (id < 0 || id >= held) continue;
          if (e != nullptr)
            for (int c = c0; c < c1; ++c)
              exact_add(e + 2 * (static_cast<std::size_t>(id) * dim + c), static_cast<double>(g(p, c)));
          else
            for (int c = c0; c < c1; ++c) dw(id, c) += g(p, c);
        }
      },
      positions * block);
  if (dx.data() != nullptr) Kokkos::deep_copy(ctx.exec, dx, T(0));  // ids have no gradient
}

template <class T>
std::size_t embedding_vocabulary(const Layer<T>& layer) {
  const auto* e = dynamic_cast<const Embedding<T>*>(&layer);
  return e != nullptr ? e->vocab() : 0;
}

template class Embedding<float>;
template class Embedding<double>;
template std::size_t embedding_vocabulary<float>(const Layer<float>&);
template std::size_t embedding_vocabulary<double>(const Layer<double>&);

}  // namespace strata
