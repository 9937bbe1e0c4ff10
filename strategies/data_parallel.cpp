#include "strategies/data_parallel.hpp"

#include "backends/clock.hpp"
#include "backends/error.hpp"
#include "backends/trace.hpp"

#include <chrono>
#include <cmath>
#include <type_traits>

namespace strata {

template <class T>
DataParallel<T>::DataParallel(Context& ctx, comm::Communicator& comm, Sequential<T>& model,
                              Loss<T>& loss, Optimizer<T>& optimizer,
                              const DataParallelOptions& options)
    : ctx_(ctx), comm_(comm), model_(model), loss_(loss), optimizer_(optimizer), options_(options) {
  STRATA_REQUIRE(model.built(), config, "data parallel: build the model first");
  STRATA_REQUIRE(optimizer.size() == model.num_params(), config, "optimizer for ",
                 optimizer.size(), " parameters used with a model of ", model.num_params());
  validate<T>(options, "data parallel");
  const Numerics& n = model.numerics();
  STRATA_REQUIRE(n.storage == options.precision &&
                     (options.precision == Precision::fp32 || n.emulated == options.emulate_storage),
                 config, "data parallel: ", to_string(options.precision),
                 options.emulate_storage ? " (emulated)" : "", " training of a model built for ",
                 to_string(n.storage), n.emulated ? " (emulated)" : "",
                 " storage: build it with BuildOptions::numerics.storage = the precision");
  // Rank 0's parameters for everyone.
  comm_.broadcast(model_.params(), 0);
  batch_group_ = std::make_unique<CommBatchGroup<T>>(comm);
  synced_layers_ = model_.set_batch_group(batch_group_.get());
  sync_ = std::make_unique<GradientSync<T>>(ctx, comm, model_, options, options.loss_scaling);
  // With a 16-bit precision the model's parameters become the working
  // weights (rounded to 16 bits); the optimizer updates fp32 master weights.
  mixed_ = std::make_unique<MixedPrecision<T>>(ctx, options, model_.params());
  if (options.precision != Precision::fp32)
    model_.set_weights_rounded(true);  // by mixed_, just above: 16-bit-input GEMMs (cuBLAS)
}

template <class T>
Vector<T> DataParallel<T>::master_params() const {
  return mixed_->master();
}

template <class T>
void DataParallel<T>::sync_working_params() {
  mixed_->sync_working(ctx_);
}

template <class T>
double DataParallel<T>::step(const data::Batch<T>* micro, std::size_t count,
                             std::size_t global_samples) {
  STRATA_REQUIRE(count > 0, config, "data parallel: step without micro-batches");
  STRATA_REQUIRE(global_samples > 0, config, "data parallel: global batch of 0 samples");
  const auto t0 = Clock::now();
  info_ = StepInfo{};
  info_.loss_scale = mixed_->loss_scale();
  // With loss scaling the loss gradient is multiplied by the scale (a power
  // of two by default, so scaling and unscaling are exact).
  const T scale = static_cast<T>(info_.loss_scale) / static_cast<T>(global_samples);
  model_.zero_grad(ctx_);
  model_.set_training(true);
  ExactSum loss_sum;
  sync_->begin(info_);
  for (std::size_t m = 0; m < count; ++m) {
    const auto& batch = micro[m];
    model_.set_row_offset(batch.first_row);
    ConstMatrix<T> out = model_.forward(ctx_, batch.x);
    {
      STRATA_SPAN("compute", "loss " + loss_.name());
      loss_sum += loss_.forward_backward(ctx_, out, batch.targets, model_.output_grad(), scale);
    }
    const bool last = m + 1 == count;
    // The last backward launches the buckets it completes.
    if (last) model_.backward(ctx_, [&](std::size_t k) { sync_->layer_done(k); });
    else model_.backward(ctx_);
  }
  timing_.compute_s = seconds_since(t0);
  const auto t1 = Clock::now();
  {
    STRATA_SPAN("comm", "wait for gradient buckets");
    sync_->finish();
  }
  const double total = (comm_.size() == 1 ? loss_sum : comm_.allreduce_exact(loss_sum)).value();
  timing_.exposed_comm_s = seconds_since(t1);
  const auto t2 = Clock::now();
  {
    STRATA_SPAN("compute", "optimizer step");
    // Every rank holds the same summed gradients, so the norm, the finiteness
    // verdict and the skip decision agree on every rank without communication.
    mixed_->step(ctx_, optimizer_, model_.grads(), info_);
    if (trace::enabled()) ctx_.exec.fence();
  }
  timing_.optimizer_s = seconds_since(t2);
  return total / static_cast<double>(global_samples);
}

template class DataParallel<float>;
template class DataParallel<double>;

}  // namespace strata
