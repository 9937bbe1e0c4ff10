// Host builds: no device (backends/device.hpp).
#include "backends/device.hpp"

namespace strata::device {

const char* platform() { return ""; }
int count() { return 0; }
int current() { return -1; }
std::string describe(int) { return "host"; }
void* stream_of(const ExecSpace&) { return nullptr; }

}  // namespace strata::device
