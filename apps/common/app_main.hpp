// The one place where exceptions become exit codes, shared by every program:
//   0 done, 2 bad options or configuration, 3 bad input data,
//   4 numerical or runtime failure.
#pragma once

#include "backends/error.hpp"

#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace strata::app {

constexpr int exit_ok = 0;
constexpr int exit_config = 2;
constexpr int exit_data = 3;
constexpr int exit_runtime = 4;

// Runs body() and maps any exception to a message on stderr and an exit code.
template <class F>
int guarded(const char* program, F&& body) {
  try {
    return std::forward<F>(body)();
  } catch (const Error& e) {
    std::cerr << program << ": " << to_string(e.kind()) << ": " << e.message() << "\n";
    return static_cast<int>(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << program << ": runtime error: out of memory\n";
    return exit_runtime;
  } catch (const std::exception& e) {
    std::cerr << program << ": runtime error: " << e.what() << "\n";
    return exit_runtime;
  }
}

// Splits argv into Kokkos' own options (--kokkos-...) and the program's.
struct SplitArgs {
  std::vector<char*> kokkos;   // argv[0] first
  std::vector<std::string> program;  // without argv[0]
};
SplitArgs split_kokkos_args(int argc, char** argv);

}  // namespace strata::app
