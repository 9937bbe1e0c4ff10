// Host errors of Strata: exceptions of type strata::Error carrying a kind
// (which the apps map to an exit code), a readable message and the file:line
// that raised it. Free of Kokkos, so that host-only code (the model-file
// reader, compiled by the host compiler in CUDA builds) can use it;
// backends/error.hpp adds the contract macro for kernels.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

// What went wrong, in the terms a user acts on. apps/ map these to exit codes.
enum class ErrorKind {
  config = 2,   // bad options or an inconsistent configuration (shapes, sizes)
  data = 3,     // bad input data (missing, truncated or corrupt files)
  runtime = 4,  // numerical failure or a failure of the runtime (device, comm)
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, const char* file = nullptr,
        int line = 0);
  ErrorKind kind() const noexcept { return kind_; }
  // The message without the source location.
  const std::string& message() const noexcept { return message_; }
  // "file:line" of the code that raised it (empty when unknown).
  const std::string& where() const noexcept { return where_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string where_;
};

namespace detail {
// Builds a message from stream-insertable pieces.
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace strata

// Throws strata::Error of the given kind (config, data, runtime) with a message
// built from the remaining arguments.
#define STRATA_THROW(kind, ...)                                                      \
  throw ::strata::Error(::strata::ErrorKind::kind, ::strata::detail::cat(__VA_ARGS__), \
                        __FILE__, __LINE__)

// Host-side check that always runs: throws strata::Error when cond is false.
#define STRATA_REQUIRE(cond, kind, ...) \
  do {                                  \
    if (!(cond)) STRATA_THROW(kind, __VA_ARGS__); \
  } while (0)

