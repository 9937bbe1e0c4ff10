// Host builds: no device (backends/device.hpp).
#include "backends/device.hpp"

#include "backends/device_check.hpp"

#include <cstring>

namespace strata::device {

const char* platform() { return ""; }
int count() { return 0; }
int current() { return -1; }
std::string describe(int) { return "host"; }
void* stream_of(const ExecSpace&) { return nullptr; }

// Host memory everywhere, unless the check simulates device memory.
bool is_device(const void* p) { return check::enabled() && check::in_device_allocation(p); }
bool has_device_memory() { return check::enabled(); }

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  // The copy engine may touch device memory.
  check::Access access({{dst, bytes}, {src, bytes}});
  std::memcpy(dst, src, bytes);
}

}  // namespace strata::device
