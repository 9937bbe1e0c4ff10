#include "apps/train/plan_profile.hpp"

#include "backends/error.hpp"
#include "backends/ranks.hpp"
#include "planner/calibrate.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace strata::app {
namespace fs = std::filesystem;

namespace {

std::string cache_dir() {
  if (const char* s = std::getenv("STRATA_CACHE"); s != nullptr && *s != '\0') return s;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/strata";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") + "/.cache/strata";
}

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// What a cached profile must say it was made by: this host, this build of
// strata-train (its executable's time stamp) and this many threads.
std::string identity(int threads) {
  std::error_code ec;
  const auto built = fs::last_write_time("/proc/self/exe", ec);
  return "calibrated by strata-train --strategy plan on " + host_name() + " with " +
         std::to_string(threads) + " Kokkos threads (build " +
         std::to_string(ec ? 0 : built.time_since_epoch().count()) + ")";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes p to path: beside it first, then renamed over, so that a reader
// never sees half a profile. A cache that cannot be written only forgets.
void save_cached(const planner::MachineProfile& p, const std::string& path,
                 const std::function<void(const std::string&)>& log) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  try {
    planner::save_profile(p, tmp);
    fs::rename(tmp, path);
    log("plan: wrote " + path);
  } catch (const std::exception& e) {
    fs::remove(tmp, ec);
    log(std::string("plan: could not cache the profile in ") + path + " (" + e.what() + ")");
  }
}

// The request's layers, optimizer update and step measured into p (those
// the cache lacks), and p written back when it gained any.
std::string with_model(std::string text, const planner::PlanRequest& request,
                       const std::function<void(const std::string&)>& log) {
  const int threads = kokkos_host_threads();
  const std::string path = cached_profile_path(threads);
  planner::MachineProfile p = planner::parse_profile(text, path);
  const std::size_t layers = p.measured_layers.size(), updates = p.measured_updates.size(),
                    steps = p.measured_steps.size();
  log("plan: measuring this model's layers as its layouts on " + std::to_string(request.ranks) +
      " rank(s) run them, and its step (those not in the cache)");
  planner::measure_model(p, request, [&](const std::string& line) { log("  " + line); });
  if (p.measured_layers.size() == layers && p.measured_updates.size() == updates &&
      p.measured_steps.size() == steps)
    return text;
  save_cached(p, path, log);
  return planner::profile_json(p);
}

// Rank 0's profile text, calibrated when the cache has none that fits.
std::string cached_or_calibrated(const std::function<void(const std::string&)>& log) {
  const int threads = kokkos_host_threads();
  const std::string path = cached_profile_path(threads), want = identity(threads);
  if (fs::exists(path)) {
    try {
      std::string text = read_text(path);  // read once: parsed here, and what the ranks get
      const planner::MachineProfile p = planner::parse_profile(text, path);
      if (p.source == want) {
        log("plan: this machine's profile from " + path);
        return text;
      }
      log("plan: " + path + " is stale (" + p.source + "; now " + want + "): calibrating again");
    } catch (const Error& e) {
      log(std::string("plan: ") + path + " is not a usable profile (" + e.what() +
          "): calibrating again");
    }
  } else {
    log("plan: no profile of this machine in " + path + ": calibrating (a few seconds)");
  }
  planner::MachineProfile p;
  try {
    p = planner::calibrate([&](const std::string& line) { log("  " + line); });
  } catch (const Error& e) {
    STRATA_THROW(config, "--strategy plan: calibrating this machine failed (", e.what(),
                 "); give --plan-profile FILE (strata-plan calibrate --output FILE writes one)");
  }
  p.name = "this machine (" + host_name() + ", " + std::to_string(threads) + " thread(s))";
  p.source = want;
  save_cached(p, path, log);
  return planner::profile_json(p);
}

}  // namespace

std::string cached_profile_path(int threads) {
  return cache_dir() + "/profiles/" + host_name() + "-t" + std::to_string(threads) + ".json";
}

planner::MachineProfile plan_profile(const std::string& given, comm::Communicator& world,
                                     const planner::PlanRequest& request,
                                     const std::function<void(const std::string&)>& log) {
  if (!given.empty()) return planner::load_profile(given);
  std::string text;
  if (world.rank() == 0) {
    text = cached_or_calibrated(log);
    if (world.size() == 1) {
      try {
        text = with_model(text, request, log);
      } catch (const Error& e) {
        STRATA_THROW(config, "--strategy plan: measuring the model (its layers, update and step) failed (", e.what(),
                     "); give --plan-profile FILE (strata-plan calibrate --model ... writes one)");
      }
    } else {
      log("plan: " + std::to_string(world.size()) + " processes: the model's layers are not "
          "measured (the rate curve plans); `strata-plan calibrate --model ... --ranks N` "
          "writes a profile with them for --plan-profile");
    }
  }
  if (world.size() > 1) {  // rank 0's text, packed in 64-bit words
    std::int64_t n = static_cast<std::int64_t>(text.size());
    world.broadcast(&n, 1, comm::DataType::i64, 0);
    std::vector<std::int64_t> words((static_cast<std::size_t>(n) + 7) / 8, 0);
    if (world.rank() == 0) std::copy(text.begin(), text.end(), reinterpret_cast<char*>(words.data()));
    world.broadcast(words.data(), words.size(), comm::DataType::i64, 0);
    text.assign(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(n));
  }
  return planner::parse_profile(text, "rank 0's profile of this machine");
}

}  // namespace strata::app
