#include "layers/loss_scaler.hpp"

#include "backends/error.hpp"

#include <algorithm>
#include <cmath>

namespace strata {

void validate(const LossScalerConfig& c) {
  STRATA_REQUIRE(c.min_scale > 0 && std::isfinite(c.min_scale), config,
                 "loss scaler: min_scale must be finite and > 0, got ", c.min_scale);
  STRATA_REQUIRE(c.max_scale >= c.min_scale && std::isfinite(c.max_scale), config,
                 "loss scaler: max_scale must be finite and >= min_scale, got ", c.max_scale);
  STRATA_REQUIRE(c.init_scale >= c.min_scale && c.init_scale <= c.max_scale, config,
                 "loss scaler: init_scale must be in [min_scale, max_scale] = [", c.min_scale,
                 ", ", c.max_scale, "], got ", c.init_scale);
  STRATA_REQUIRE(c.growth_factor > 1 && std::isfinite(c.growth_factor), config,
                 "loss scaler: growth_factor must be > 1, got ", c.growth_factor);
  STRATA_REQUIRE(c.backoff_factor > 0 && c.backoff_factor < 1, config,
                 "loss scaler: backoff_factor must be in (0, 1), got ", c.backoff_factor);
  STRATA_REQUIRE(c.growth_interval >= 1, config,
                 "loss scaler: growth_interval must be >= 1, got ", c.growth_interval);
}

DynamicLossScaler::DynamicLossScaler(const LossScalerConfig& config) : config_(config) {
  validate(config);
  state_.scale = config.init_scale;
}

bool DynamicLossScaler::update(bool finite) {
  if (!finite) {
    state_.scale = std::max(config_.min_scale, state_.scale * config_.backoff_factor);
    state_.good_steps = 0;
    ++state_.skipped;
    return false;
  }
  if (++state_.good_steps >= config_.growth_interval) {
    state_.scale = std::min(config_.max_scale, state_.scale * config_.growth_factor);
    state_.good_steps = 0;
  }
  return true;
}

void DynamicLossScaler::set_state(const State& s) {
  STRATA_REQUIRE(s.scale >= config_.min_scale && s.scale <= config_.max_scale && s.good_steps >= 0,
                 config, "loss scaler: state with scale ", s.scale, " and ", s.good_steps,
                 " good steps is outside [", config_.min_scale, ", ", config_.max_scale, "]");
  state_ = s;
}

}  // namespace strata
