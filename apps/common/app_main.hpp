// The one place where exceptions become exit codes, shared by every program:
//   0 done, 2 bad options or configuration, 3 bad input data,
//   4 numerical or runtime failure.
#pragma once

#include "backends/error.hpp"

#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata {
class Runtime;
}

namespace strata::app {

constexpr int exit_ok = 0;
constexpr int exit_config = 2;
constexpr int exit_data = 3;
constexpr int exit_runtime = 4;

// "PROGRAM: KIND: MESSAGE" on stderr in one write (under mpirun, where
// every process may report, lines do not interleave), with "[rank R of N]"
// after the kind when launched by MPI.
void report_error(const char* program, const char* kind, const std::string& message);

// Runs body() and maps any exception to a message on stderr and an exit code.
template <class F>
int guarded(const char* program, F&& body) {
  try {
    return std::forward<F>(body)();
  } catch (const Error& e) {
    report_error(program, to_string(e.kind()), e.message());
    return static_cast<int>(e.kind());
  } catch (const std::bad_alloc&) {
    report_error(program, "runtime error", "out of memory");
    return exit_runtime;
  } catch (const std::exception& e) {
    report_error(program, "runtime error", e.what());
    return exit_runtime;
  }
}

// Splits argv into Kokkos' own options (--kokkos-...) and the program's.
// --kokkos-threads=N and --kokkos-num-threads=N are both accepted and passed
// on in the spelling of the Kokkos in use (3.x before 3.7 knows only the
// first; 3.7 and later prefer the second).
struct SplitArgs {
  std::vector<char*> kokkos;   // argv[0] first
  std::vector<std::string> program;  // without argv[0]
  std::deque<std::string> owned;     // rewritten Kokkos options (kokkos points into them)
};
SplitArgs split_kokkos_args(int argc, char** argv);

// Starts Kokkos with its options from the command line, and `threads` host
// threads when > 0 (a program's --threads).
std::unique_ptr<Runtime> start_runtime(SplitArgs& args, int threads = 0);

// main() of a program: parse(options, config) fills a Config from the
// command line (false: --help was printed), Kokkos starts with
// threads(config) host threads (0: its default), then run(config); errors
// become messages and exit codes (guarded). Needs backends/runtime.hpp.
template <class Config, class Parse, class Threads, class Run>
int program_main(const char* program, int argc, char** argv, Parse parse, Threads threads, Run run) {
  std::unique_ptr<Runtime> runtime;
  return guarded(program, [&] {
    auto args = split_kokkos_args(argc, argv);
    Config c;
    if (!parse(args.program, c)) return exit_ok;
    runtime = start_runtime(args, threads(c));
    return run(c);
  });
}

}  // namespace strata::app
