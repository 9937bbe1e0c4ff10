#include "apps/common/app_main.hpp"

#include <cstring>

namespace strata::app {

SplitArgs split_kokkos_args(int argc, char** argv) {
  SplitArgs s;
  s.kokkos.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--kokkos-", 9) == 0)
      s.kokkos.push_back(argv[i]);
    else
      s.program.emplace_back(argv[i]);
  }
  s.kokkos.push_back(nullptr);
  return s;
}

}  // namespace strata::app
