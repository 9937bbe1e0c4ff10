#include "apps/common/progress.hpp"

#include "backends/runtime.hpp"

#include <unistd.h>

namespace strata::app {

// Under mpirun stdout is a pseudo-terminal whatever mpirun's own output is
// (often a job log): no progress bar there, the --log-every lines instead.
Progress::Progress(bool enabled)
    : enabled_(enabled), tty_(enabled && isatty(STDOUT_FILENO) && !launched_by_mpi()) {}

Progress::~Progress() {
  if (tty_ && last_width_ > 0) std::fputs("\n", stdout);
}

void Progress::status(const std::string& line) {
  if (!tty_) return;
  std::string padded = line;
  if (padded.size() < last_width_) padded.append(last_width_ - padded.size(), ' ');
  std::printf("\r%s", padded.c_str());
  std::fflush(stdout);
  last_width_ = line.size();
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  if (tty_ && last_width_ > 0) {
    std::printf("\r%s\r", std::string(last_width_, ' ').c_str());
    last_width_ = 0;
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

}  // namespace strata::app
