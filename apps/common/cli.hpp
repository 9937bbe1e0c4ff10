// Command-line parsing shared by Strata's programs (CLI11).
#pragma once

#include "backends/error.hpp"

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

namespace strata::app {

// Parses args (without argv[0] and Kokkos options). Returns false after
// printing --help; throws a config error (exit code 2) naming the bad option.
inline bool parse_cli(CLI::App& app, const std::vector<std::string>& args) {
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
