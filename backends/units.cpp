#include "backends/units.hpp"

#include <cstdio>

namespace strata {

namespace {
// v in the largest of `units` (each `base` times the one before) that keeps
// it at least 1.
std::string scaled(double v, double base, const char* const (&units)[5], const char* format) {
  int u = 0;
  while (v >= base && u < 4) v /= base, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? format : "%.0f%s", v, units[u]);
  return buf;
}
}  // namespace

std::string format_bytes(double bytes) {
  static const char* const units[] = {" B", " KiB", " MiB", " GiB", " TiB"};
  return scaled(bytes, 1024, units, "%.1f%s");
}

std::string format_mib(double bytes, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f MiB", decimals, bytes / (1024.0 * 1024.0));
  return buf;
}

std::string format_count(double n) {
  static const char* const units[] = {"", "k", "M", "G", "T"};
  return scaled(n, 1000, units, "%.2f%s");
}

}  // namespace strata
