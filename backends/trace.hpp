// Timeline tracing: spans written as Chrome trace-event JSON (open the file
// in Perfetto, ui.perfetto.dev, or chrome://tracing), one lane per rank and
// one per rank's communication, and the same names pushed as Kokkos
// profiling regions so that Kokkos Tools (space-time-stack, ...) see them.
//
//   trace::start();                       // once, before the work
//   trace::set_lane(rank);                // on each rank's thread
//   { STRATA_SPAN("compute", "forward " + layer.name()); ... }
//   trace::write("run.json");             // after the work
//
// When tracing is off and no Kokkos tool is loaded a span costs one branch
// (its name is not even built).
#pragma once

#include <atomic>
#include <chrono>
#include <string>

namespace strata::trace {

// Tracing on (records spans) from now on.
void start();
bool enabled();
// Whether spans do anything: tracing, or a Kokkos tool listening.
bool active();
// Whether Kokkos Tools are loaded (asked once, after Kokkos::initialize).
bool kokkos_tools_loaded();

// The lane (Chrome "tid") of spans recorded by the calling thread: rank r's
// computation is lane 2r, its communication lane 2r + 1.
void set_lane(int lane);
int lane();
// Names a lane in the viewer ("rank 0", "rank 0 comm").
void name_lane(int lane, const std::string& name);

// Writes every span recorded so far; `process` becomes the Chrome "pid"
// (the MPI rank; one file per process). Throws runtime naming the file when
// it cannot be written.
void write(const std::string& path, int process = 0);

class Span {
 public:
  Span(const char* category, std::string name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_ = false;
  const char* category_ = nullptr;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace strata::trace

#define STRATA_TRACE_CAT2(a, b) a##b
#define STRATA_TRACE_CAT(a, b) STRATA_TRACE_CAT2(a, b)
// A span over the rest of the scope; `name` is evaluated only when active.
#define STRATA_SPAN(category, name)                                  \
  ::strata::trace::Span STRATA_TRACE_CAT(strata_span_, __LINE__)(    \
      (category), ::strata::trace::active() ? std::string(name) : std::string())
