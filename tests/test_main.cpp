// GoogleTest main for Strata's tests: Kokkos is initialised once around all
// tests (Kokkos options such as --kokkos-num-threads pass through).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include "backends/device_check.hpp"
#include "backends/ranks.hpp"

#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Tests of thread ranks need a Kokkos host pool of at least 4 threads (one
  // per rank); STRATA_TEST_THREADS sets it (an explicit Kokkos option wins).
  std::vector<char*> args(argv, argv + argc);
  std::string threads;
  if (const char* t = std::getenv("STRATA_TEST_THREADS")) {
    threads = strata::kokkos_threads_option(std::atoi(t));
    args.push_back(threads.data());
  }
  int kargc = static_cast<int>(args.size());
  args.push_back(nullptr);
  setenv("OMP_PROC_BIND", "false", 0);  // silences Kokkos 3.x; libgomp has read it already
  Kokkos::initialize(kargc, args.data());
  // STRATA_DEVICE_CHECK=1: Kokkos memory counts as device memory (backends/device_check.hpp).
  if (strata::device::check::requested()) strata::device::check::start();
  int result = RUN_ALL_TESTS();
  Kokkos::finalize();
  return result;
}

#include "test_utils.hpp"

#include <cstdio>
#include <sys/wait.h>

namespace strata::test {
CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
}  // namespace strata::test
