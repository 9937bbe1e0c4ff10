// Shared pieces of Strata's libFuzzer targets.
//
// Oracle: a reader either returns a dataset that satisfies its documented
// invariants, or throws strata::Error of an allowed kind. Any other exception,
// a broken invariant, or a sanitizer report is a finding (the target aborts).
#pragma once

#include "backends/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace strata::fuzz {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "strata fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define STRATA_FUZZ_CHECK(cond) \
  do {                          \
    if (!(cond)) ::strata::fuzz::fail("invariant violated: " #cond); \
  } while (0)

// Runs body(); strata::Error of one of `allowed` kinds is an accepted outcome
// (its message must name something: it may not be empty). Everything else
// escaping body() is a finding.
template <class F>
void expect_only(std::initializer_list<ErrorKind> allowed, F&& body) {
  try {
    body();
  } catch (const Error& e) {
    bool ok = false;
    for (ErrorKind k : allowed) ok |= e.kind() == k;
    if (!ok) fail(std::string("unexpected error kind ") + to_string(e.kind()) + ": " + e.message());
    if (e.message().empty()) fail("an error with an empty message");
  } catch (const std::exception& e) {
    fail(std::string("exception that is not a strata::Error: ") + e.what());
  }
}

// A file in memory (memfd) reachable by path, so that readers that open files
// by name read exactly the bytes given, without touching the disk.
class MemFile {
 public:
  explicit MemFile(const char* name) {
    fd_ = ::memfd_create(name, 0);
    if (fd_ < 0) fail("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const std::string& set(const std::uint8_t* data, std::size_t n) {
    if (::ftruncate(fd_, 0) != 0) fail("ftruncate failed");
    std::size_t done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd_, data + done, n - done, static_cast<off_t>(done));
      if (w <= 0) fail("pwrite failed");
      done += static_cast<std::size_t>(w);
    }
    return path_;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace strata::fuzz
