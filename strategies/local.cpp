#include "strategies/local.hpp"

#include "backends/error.hpp"

#include <algorithm>

namespace strata {

template <class T>
Local<T>::Local(Context& ctx, Sequential<T>& model, Loss<T>& loss, Optimizer<T>& optimizer)
    : ctx_(ctx), model_(model), loss_(loss), optimizer_(optimizer) {
  STRATA_REQUIRE(optimizer.size() == model.num_params(), config, "optimizer for ",
                 optimizer.size(), " parameters used with a model of ", model.num_params());
}

template <class T>
double Local<T>::step(const data::Batch<T>& batch) {
  const std::size_t n = batch.size();
  STRATA_REQUIRE(n > 0, config, "training step on an empty batch");
  model_.zero_grad(ctx_);
  model_.set_training(true);
  ConstMatrix<T> out = model_.forward(ctx_, batch.x);
  const double sum =
      loss_.forward_backward(ctx_, out, batch.targets, model_.output_grad(), T(1) / T(n)).value();
  model_.backward(ctx_);
  // --reproducible (BuildOptions::numerics.exact_chunk): the exact sums into grads().
  if (model_.numerics().exact()) model_.finish_exact_grads(ctx_, 0, model_.num_params());
  optimizer_.step(ctx_, model_.params(), model_.grads());
  return sum / static_cast<double>(n);
}

template <class T>
Evaluation evaluate(Context& ctx, Sequential<T>& model, Loss<T>& loss, const data::Dataset& d,
                    std::size_t batch) {
  Evaluation e;
  model.set_training(false);
  data::BatchLoader<T> loader(d, std::min(batch, model.max_batch()), false, 0);
  ExactSum sum;
  std::size_t correct = 0;
  data::Batch<T> b;
  while (loader.next(b)) {
    ConstMatrix<T> out = model.forward(ctx, b.x);
    sum += loss.forward_backward(ctx, out, b.targets, Matrix<T>(), T(1));
    if (d.is_classification()) correct += count_correct(ctx, out, b.targets.labels);
    e.samples += b.size();
  }
  model.set_training(true);
  e.loss = sum.value() / static_cast<double>(e.samples);
  e.accuracy = static_cast<double>(correct) / static_cast<double>(e.samples * d.label_width);
  return e;
}

template class Local<float>;
template class Local<double>;
template Evaluation evaluate<float>(Context&, Sequential<float>&, Loss<float>&,
                                    const data::Dataset&, std::size_t);
template Evaluation evaluate<double>(Context&, Sequential<double>&, Loss<double>&,
                                     const data::Dataset&, std::size_t);

}  // namespace strata
