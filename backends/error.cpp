#include "backends/error.hpp"

namespace strata {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config: return "configuration error";
    case ErrorKind::data: return "data error";
    case ErrorKind::runtime: return "runtime error";
  }
  return "error";
}

namespace {
std::string where_of(const char* file, int line) {
  if (file == nullptr) return {};
  std::string f(file);
  // Keep the path relative to the source tree (drop everything before the
  // project's top-level folders) so that messages do not depend on where the
  // sources were built.
  for (const char* top : {"backends/", "layers/", "strategies/", "apps/", "data/", "tests/"}) {
    auto pos = f.rfind(top);
    if (pos != std::string::npos) {
      f = f.substr(pos);
      break;
    }
  }
  return f + ":" + std::to_string(line);
}
}  // namespace

Error::Error(ErrorKind kind, const std::string& message, const char* file, int line)
    : std::runtime_error(message), kind_(kind), message_(message), where_(where_of(file, line)) {}

}  // namespace strata
