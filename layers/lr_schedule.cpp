#include "layers/lr_schedule.hpp"

#include "backends/error.hpp"

#include <cmath>

namespace strata {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::cosine;
  STRATA_THROW(config, "unknown learning-rate schedule '", name, "' (expected constant or cosine)");
}

const char* to_string(LrScheduleKind kind) {
  return kind == LrScheduleKind::cosine ? "cosine" : "constant";
}

void validate(const LrSchedule& s) {
  STRATA_REQUIRE(s.lr_min >= 0 && s.lr_min <= s.lr, config, "--lr-min must lie in [0, --lr = ",
                 s.lr, "], got ", s.lr_min);
}

double scheduled_lr(const LrSchedule& s, std::size_t step, std::size_t total) {
  if (step < s.warmup)
    return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup);
  if (s.kind == LrScheduleKind::constant) return s.lr;
  const std::size_t span = total > s.warmup ? total - s.warmup : 1;
  const double t = static_cast<double>(step - s.warmup) / static_cast<double>(span);
  const double pi = std::acos(-1.0);
  return s.lr_min + (s.lr - s.lr_min) * 0.5 * (1.0 + std::cos(pi * (t > 1.0 ? 1.0 : t)));
}

}  // namespace strata
