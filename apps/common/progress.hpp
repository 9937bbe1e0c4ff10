// Progress output for long runs: an in-place status line on a terminal,
// plain log lines otherwise.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace strata::app {

class Progress {
 public:
  explicit Progress(bool enabled);
  ~Progress();
  bool tty() const { return tty_; }
  // On a terminal: redraws the status line. Otherwise does nothing.
  void status(const std::string& line);
  // A permanent line (clears the status line first on a terminal).
  void line(const std::string& text);

 private:
  bool enabled_, tty_;
  std::size_t last_width_ = 0;
};

// "1h02m", "3m07s", "12s"
std::string format_duration(double seconds);

}  // namespace strata::app
