// strata-train's --metrics file: JSON lines (training log, evaluation, summary).
#pragma once

#include "backends/error.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace strata::app {

// Appends JSON lines to the --metrics file; a no-op without one.
class Metrics {
 public:
  explicit Metrics(const std::string& path) : path_(path) {
    if (path.empty()) return;
    out_.open(path, std::ios::trunc);
    STRATA_REQUIRE(out_.good(), config, "--metrics: cannot open '", path, "' for writing");
  }
  void write(const nlohmann::json& j) {
    if (!out_.is_open()) return;
    out_ << j.dump() << "\n";
    out_.flush();
    STRATA_REQUIRE(out_.good(), runtime, "--metrics: write to '", path_, "' failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace strata::app
