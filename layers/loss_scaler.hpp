// Dynamic loss scaling for fp16 training (what Apex's and PyTorch's
// GradScaler do): the loss gradient is multiplied by scale() so that small
// gradients survive fp16's range; the optimizer step unscales. A step whose
// gradients hold an Inf or a NaN is skipped and the scale shrinks by
// backoff_factor; after growth_interval good steps in a row it grows by
// growth_factor. The scale never falls below min_scale (older tools let it
// underflow to 0, after which every gradient is 0 and training silently
// stops) nor rises above max_scale. Host-side state only: scale and the
// good-step counter are what a checkpoint keeps.
#pragma once

#include <cstdint>

namespace strata {

struct LossScalerConfig {
  double init_scale = 65536.0;  // 2^16, as torch.cuda.amp.GradScaler
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;  // good steps before growing
  double min_scale = 1.0;               // floor
  double max_scale = 16777216.0;        // 2^24
};

// Throws config naming the first setting out of range.
void validate(const LossScalerConfig& config);

class DynamicLossScaler {
 public:
  struct State {
    double scale = 0;
    std::int64_t good_steps = 0;  // finite steps since the last change of scale
    std::int64_t skipped = 0;     // steps skipped so far (statistics)
  };

  explicit DynamicLossScaler(const LossScalerConfig& config = {});

  double scale() const { return state_.scale; }
  double inv_scale() const { return 1.0 / state_.scale; }
  // Call once per step with whether every gradient was finite (unscaled or
  // not: the same). Returns true when the step is to be applied, false when
  // it must be skipped; updates scale and counters.
  bool update(bool finite);

  const State& state() const { return state_; }
  void set_state(const State& s);  // throws config when s.scale is out of [min, max]
  const LossScalerConfig& config() const { return config_; }

 private:
  LossScalerConfig config_;
  State state_;
};

}  // namespace strata
