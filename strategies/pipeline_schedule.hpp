// The order in which one pipeline stage runs its micro-batches' forwards and
// backwards: a schedule is a list of actions per stage, which the pipeline
// engine (strategies/model_parallel.hpp) runs in order, sending activations
// to the next stage and gradients to the previous one. A new schedule is one
// more case of schedule_actions (and its name in parse_schedule); the memory
// it needs (micro-batches held at once) follows from the list.
//
//   gpipe  all M forwards, then all M backwards: M micro-batches of
//          activations held per stage;
//   1f1b   stage p runs S - p - 1 forwards, then alternates one forward and
//          one backward, then drains the backwards: at most S - p held.
//
// Every list holds each micro-batch's forward once and its backward once,
// after its forward; stages run their lists concurrently without a deadlock
// (tests/strategies/test_model_parallel.cpp runs every stage's list against a model of
// the send/recv dependencies).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace strata {

enum class Schedule { gpipe, one_f_one_b };
Schedule parse_schedule(const std::string& name);  // "gpipe" | "1f1b"; throws config
const char* to_string(Schedule schedule);

struct PipelineAction {
  enum Kind { forward, backward };
  Kind kind;
  std::size_t micro;  // the micro-batch, 0 .. M - 1
  bool operator==(const PipelineAction& o) const { return kind == o.kind && micro == o.micro; }
};

// The actions of stage `stage` (0 .. stages - 1) for `micro` micro-batches.
std::vector<PipelineAction> schedule_actions(Schedule schedule, std::size_t stages,
                                             std::size_t stage, std::size_t micro);

// The most micro-batches whose forward has run and backward not yet on
// `stage`: the activation slots it needs.
std::size_t schedule_slots(Schedule schedule, std::size_t stages, std::size_t stage,
                           std::size_t micro);

}  // namespace strata
