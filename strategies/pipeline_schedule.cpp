#include "strategies/pipeline_schedule.hpp"

#include "backends/error.hpp"

#include <algorithm>

namespace strata {

Schedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return Schedule::gpipe;
  if (name == "1f1b") return Schedule::one_f_one_b;
  STRATA_THROW(config, "unknown pipeline schedule '", name, "' (expected gpipe or 1f1b)");
}

const char* to_string(Schedule s) { return s == Schedule::gpipe ? "gpipe" : "1f1b"; }

std::vector<PipelineAction> schedule_actions(Schedule schedule, std::size_t stages,
                                             std::size_t stage, std::size_t micro) {
  STRATA_REQUIRE(stage < stages, config, "pipeline schedule: stage ", stage, " of ", stages);
  std::vector<PipelineAction> a;
  a.reserve(2 * micro);
  const auto F = [&](std::size_t m) { a.push_back({PipelineAction::forward, m}); };
  const auto B = [&](std::size_t m) { a.push_back({PipelineAction::backward, m}); };
  if (schedule == Schedule::gpipe) {
    for (std::size_t m = 0; m < micro; ++m) F(m);
    for (std::size_t m = 0; m < micro; ++m) B(m);
    return a;
  }
  // 1F1B: the warm-up fills the pipeline below this stage.
  const std::size_t warmup = std::min(stages - 1 - stage, micro);
  for (std::size_t m = 0; m < warmup; ++m) F(m);
  for (std::size_t i = 0; i + warmup < micro; ++i) {
    F(i + warmup);
    B(i);
  }
  for (std::size_t m = micro - warmup; m < micro; ++m) B(m);
  return a;
}

std::size_t schedule_slots(Schedule schedule, std::size_t stages, std::size_t stage,
                           std::size_t micro) {
  std::size_t held = 0, most = 0;
  for (const PipelineAction& a : schedule_actions(schedule, stages, stage, micro)) {
    held = a.kind == PipelineAction::forward ? held + 1 : held - 1;
    most = std::max(most, held);
  }
  return most;
}

}  // namespace strata
