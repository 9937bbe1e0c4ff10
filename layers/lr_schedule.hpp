// Learning-rate schedules: the rate of optimizer step `step` (0-based) of a
// run of `total` steps, a pure function of both, so that a resumed run (same
// --epochs or --steps) continues with the rate it would have had.
//   constant: lr
//   cosine:   lr_min + (lr - lr_min) (1 + cos(pi t / T)) / 2 after the warm-up
//             (t counted from its end, T the steps after it), as PyTorch's
//             CosineAnnealingLR with T_max = T and eta_min = lr_min
// Both start with `warmup` steps rising linearly from lr / warmup to lr.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

enum class LrScheduleKind { constant, cosine };
LrScheduleKind parse_lr_schedule(const std::string& name);  // throws config
const char* to_string(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double lr = 0.01;
  double lr_min = 0.0;         // cosine: the rate at the end
  std::size_t warmup = 0;      // steps of linear warm-up
};

// Throws config naming the setting out of range.
void validate(const LrSchedule& s);
double scheduled_lr(const LrSchedule& s, std::size_t step, std::size_t total);

}  // namespace strata
