#include "backends/device_check.hpp"

#include "backends/device.hpp"
#include "backends/error.hpp"
#include "backends/kokkos.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace strata::device::check {

namespace {

std::atomic<bool> g_enabled{false};

struct State {
  std::mutex mutex;
  std::map<std::uintptr_t, std::uint64_t> allocations;  // begin -> bytes
  std::map<std::uintptr_t, int> protected_pages;        // page -> number of Protects
};
State& state() {
  static State* s = new State;  // never destroyed: Kokkos may free after exit handlers ran
  return *s;
}

std::uintptr_t page_size() {
  static const auto p = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// The whole pages inside a region (none for regions under a page).
Region whole_pages(const Region& r) {
  const std::uintptr_t ps = page_size();
  const auto b = reinterpret_cast<std::uintptr_t>(r.p);
  const std::uintptr_t first = (b + ps - 1) / ps * ps, last = (b + r.bytes) / ps * ps;
  if (r.p == nullptr || last <= first) return {nullptr, 0};
  return {reinterpret_cast<const void*>(first), last - first};
}

void set_access(std::uintptr_t page, bool accessible) {
  if (mprotect(reinterpret_cast<void*>(page), page_size(),
               accessible ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("strata device-memory check: mprotect");
    std::abort();
  }
}

// What the signal handler reports: a fixed table it can read without locks.
struct Slot {
  std::atomic<std::uintptr_t> begin{0}, end{0};
  char what[120];
};
Slot g_slots[64];

void remember(const Region& r, const std::string& what) {
  const auto b = reinterpret_cast<std::uintptr_t>(r.p);
  for (Slot& s : g_slots) {
    std::uintptr_t expected = 0;
    if (s.begin.load() != 0) continue;
    std::snprintf(s.what, sizeof s.what, "%s", what.c_str());
    s.end.store(b + r.bytes);
    if (s.begin.compare_exchange_strong(expected, b)) return;
  }
}
void forget(const Region& r) {
  const auto b = reinterpret_cast<std::uintptr_t>(r.p);
  for (Slot& s : g_slots)
    if (s.begin.load() == b) {
      s.end.store(0);
      s.begin.store(0);
      return;
    }
}

void on_segv(int, siginfo_t* info, void*) {
  const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const Slot& s : g_slots) {
    const std::uintptr_t b = s.begin.load(), e = s.end.load();
    if (b == 0 || a < b || a >= e) continue;
    char msg[320];
    const int n = std::snprintf(msg, sizeof msg,
                                "strata device-memory check: host code touched device memory at %p, "
                                "byte %zu of the protected pages of %s (STRATA_DEVICE_CHECK=1)\n",
                                info->si_addr, static_cast<std::size_t>(a - b), s.what);
    if (n > 0) (void)!write(STDERR_FILENO, msg, static_cast<std::size_t>(n));
    break;
  }
  // Let the default action stop the process (a core dump shows where).
  signal(SIGSEGV, SIG_DFL);
}

void on_allocate(const Kokkos_Profiling_SpaceHandle, const char* name, const void* ptr,
                 const std::uint64_t size) {
  // A View's block (allocated by its shared allocation record, labelled) is
  // reported from its start (the header first) with the size of the data:
  // the data ends a header later. Kokkos' own unlabelled blocks (thread
  // scratch, reduction buffers) are reported whole; adding a header there
  // would claim the next heap block (a host vector) as device memory.
  const bool unlabelled = name != nullptr && std::strcmp(name, "[unlabeled]") == 0;
  std::lock_guard<std::mutex> lock(state().mutex);
  state().allocations[reinterpret_cast<std::uintptr_t>(ptr)] =
      size + (unlabelled ? 0 : sizeof(Kokkos::Impl::SharedAllocationHeader));
}
void on_deallocate(const Kokkos_Profiling_SpaceHandle, const char*, const void* ptr, const std::uint64_t) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().allocations.erase(reinterpret_cast<std::uintptr_t>(ptr));
}

bool in_device_allocation_locked(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto& m = state().allocations;
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a < it->first + it->second;
}

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

bool requested() {
  const char* v = std::getenv("STRATA_DEVICE_CHECK");
  if (v == nullptr || std::strcmp(v, "1") != 0) return false;
  STRATA_REQUIRE(*platform() == '\0', config, "STRATA_DEVICE_CHECK=1 simulates device memory on a host "
                 "build; this build runs on ", platform(), ", where the GPU itself faults");
  return true;
}

void start() {
  if (enabled()) return;
  Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(&on_deallocate);
  struct sigaction sa {};
  sa.sa_sigaction = &on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  g_enabled = true;
}

bool in_device_allocation(const void* p) {
  std::lock_guard<std::mutex> lock(state().mutex);
  return in_device_allocation_locked(p);
}

Protect::Protect(std::initializer_list<Region> regions, std::string what) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  for (const Region& r : regions) {
    if (!in_device_allocation_locked(r.p)) continue;
    const Region w = whole_pages(r);
    if (w.bytes == 0) continue;
    bool seen = false;  // in-place operations name one buffer twice
    for (const Region& q : pages_) seen |= q.p == w.p;
    if (seen) continue;
    pages_.push_back(w);
    remember(w, what);
    const auto b = reinterpret_cast<std::uintptr_t>(w.p);
    for (std::uintptr_t pg = b; pg < b + w.bytes; pg += page_size())
      if (state().protected_pages[pg]++ == 0) set_access(pg, false);
  }
}

Protect::~Protect() {
  if (pages_.empty()) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  for (const Region& w : pages_) {
    const auto b = reinterpret_cast<std::uintptr_t>(w.p);
    for (std::uintptr_t pg = b; pg < b + w.bytes; pg += page_size()) {
      auto it = state().protected_pages.find(pg);
      if (--it->second == 0) {
        set_access(pg, true);
        state().protected_pages.erase(it);
      }
    }
    forget(w);
  }
}

Access::Access(std::initializer_list<Region> regions) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  for (const Region& r : regions) {
    const Region w = whole_pages(r);
    const auto b = reinterpret_cast<std::uintptr_t>(w.p);
    for (std::uintptr_t pg = b; pg < b + w.bytes; pg += page_size())
      if (state().protected_pages.count(pg)) {
        set_access(pg, true);
        pages_.push_back({reinterpret_cast<const void*>(pg), page_size()});
      }
  }
}

Access::~Access() {
  if (pages_.empty()) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  for (const Region& w : pages_)
    if (state().protected_pages.count(reinterpret_cast<std::uintptr_t>(w.p)))
      set_access(reinterpret_cast<std::uintptr_t>(w.p), false);
}

}  // namespace strata::device::check
