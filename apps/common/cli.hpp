// Command-line parsing shared by Strata's programs (CLI11).
#pragma once

#include "backends/error.hpp"
#include "backends/runtime.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace strata::app {

// Validators whose messages say what is wrong with a value. CLI11 2.1's Range
// answers "not in range" for a value that is not a number at all (and shows
// DBL_MAX as PositiveNumber's bound), lets NaN through, and its conversion to
// unsigned types accepts "-1" as 2^64 - 1.

// A whole number (digits only) in [lo, hi].
inline CLI::Validator whole_number(std::uint64_t lo = 0,
                                   std::uint64_t hi = std::numeric_limits<std::uint64_t>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& in) -> std::string {
        const bool digits = !in.empty() && in.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        const unsigned long long v = digits ? std::strtoull(in.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE)
          return "'" + in + "' is not a whole number" + (in.rfind('-', 0) == 0 ? " (it is negative)" : "");
        if (v < lo || v > hi) {
          if (lo == 1 && hi == std::numeric_limits<std::uint64_t>::max())
            return "must be a positive whole number, got '" + in + "'";
          return "'" + in + "' is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        }
        return {};
      },
      hi == std::numeric_limits<std::uint64_t>::max()
          ? (lo == 1 ? "> 0" : "")
          : "in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// A finite number in [lo, hi].
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& in) -> std::string {
        char* end = nullptr;
        const double v = in.empty() ? 0.0 : std::strtod(in.c_str(), &end);
        if (in.empty() || end != in.c_str() + in.size() || !std::isfinite(v))
          return "'" + in + "' is not a finite number";
        if (v < lo || v > hi) {
          std::ostringstream os;
          os << "'" << in << "' is out of range [" << lo << ", " << hi << "]";
          return os.str();
        }
        return {};
      },
      [lo, hi] {
        std::ostringstream os;
        os << "in [" << lo << " - " << hi << "]";
        return os.str();
      }());
}

// Parses args (without argv[0] and Kokkos options). Returns false after
// printing --help; throws a config error (exit code 2) naming the bad option.
// Every program answers --version with the build configuration (before
// its required options are checked), unless it defines its own flag.
inline bool parse_cli(CLI::App& app, const std::vector<std::string>& args) {
  if (app.get_option_no_throw("--version") == nullptr) {
    app.add_flag("--version", "print the version and the build configuration, and exit");
    if (std::find(args.begin(), args.end(), "--version") != args.end()) {
      std::cout << build_info();
      return false;
    }
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    STRATA_THROW(config, e.what(), " (see ", app.get_name(), " --help)");
  }
  return true;
}

}  // namespace strata::app
