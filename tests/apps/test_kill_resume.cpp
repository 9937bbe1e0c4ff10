// Kill and resume: strata-train is killed with SIGKILL at random moments,
// some of them while it writes a checkpoint (STRATA_CHECKPOINT_WRITE_DELAY_MS
// widens that window), and resumed with --resume until it finishes. The final
// checkpoint (parameters, optimizer state, counters) must be bitwise identical
// to that of an uninterrupted run, every checkpoint left on disk after a kill
// must load, and no temporary file may remain at the end.
//
// The kill moments come from a seeded generator; the seed is printed, and
// STRATA_KILL_SEED=N repeats a run.
#include "strategies/checkpoint.hpp"
#include "test_utils.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::uint64_t kill_seed() {
  if (const char* s = std::getenv("STRATA_KILL_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// A program started in its own process group, its output in a log file.
class Job {
 public:
  Job(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
      const std::string& log) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> a, ev;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    for (const auto& s : env) ev.push_back(const_cast<char*>(s.c_str()));
    ev.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    const int rc = posix_spawn(&pid_, a[0], &fa, &attr, a.data(), ev.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
      pid_ = -1;
    }
  }
  // Whether it has ended (then `status` holds its wait status).
  bool ended() {
    if (pid_ < 0) return true;
    if (done_) return true;
    done_ = ::waitpid(pid_, &status_, WNOHANG) == pid_;
    return done_;
  }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  // SIGKILL to the whole process group, then waits for the program.
  void kill_group() {
    if (pid_ < 0 || ended()) return;
    ::kill(-pid_, SIGKILL);
    while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    done_ = true;
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool done_ = false;
};

// The contents of a /proc file, empty when the process has gone meanwhile
// (std::ifstream throws from underflow() then: "No such process").
std::string proc_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

// Processes (of any process group) whose command line mentions `marker`: an
// MPI launcher's ranks may live in process groups of their own.
std::vector<pid_t> processes_mentioning(const std::string& marker) {
  std::vector<pid_t> pids;
  std::error_code ec;  // processes come and go while /proc is read
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    const std::string cmd = proc_file(e.path().string() + "/cmdline");
    if (cmd.find(marker) == std::string::npos) continue;
    // A zombie (no command line after it exited) is gone already.
    const std::string stat = proc_file(e.path().string() + "/stat");
    const auto paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') continue;
    pids.push_back(pid);
  }
  return pids;
}

// Kills what is left of a killed job, and waits until it is gone; returns
// how many processes it found.
int kill_strays(const std::string& marker) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::set<pid_t> found;
  for (;;) {
    const auto pids = processes_mentioning(marker);
    if (pids.empty()) return static_cast<int>(found.size());
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "processes of a killed job are still running";
      return static_cast<int>(found.size());
    }
    for (pid_t p : pids) {
      found.insert(p);
      ::kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
}

// The temporary files in `dir` and its shard folders, and their
// modification times.
using TmpFiles = std::map<std::string, fs::file_time_type>;
TmpFiles temporary_files(const std::string& dir) {
  TmpFiles t;
  std::error_code ec;  // files and folders come and go while it is read
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    if (e.path().extension() != ".tmp") continue;
    std::error_code gone;  // renamed into place meanwhile
    const auto when = fs::last_write_time(e.path(), gone);
    if (!gone) t[fs::relative(e.path(), dir).string()] = when;
  }
  return t;
}

// A checkpoint's bytes: the file, and for a sharded one the shard files in
// its folder (names and bytes).
std::string checkpoint_bytes(const std::string& dir, const std::string& name) {
  std::string all = file_bytes(dir + "/" + name);
  const fs::path shards = fs::path(dir) / (name.substr(0, name.size() - 7) + ".shards");
  std::vector<std::string> files;
  if (fs::is_directory(shards))
    for (const auto& e : fs::directory_iterator(shards)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) all += "\n" + fs::path(f).filename().string() + "\n" + file_bytes(f);
  return all;
}

bool has_temporary_file(const std::string& dir) { return !temporary_files(dir).empty(); }

// The file being written (empty: none): a temporary file that was not
// there, as it is, when the run started (a killed run leaves its own behind).
std::string writing_now(const std::string& dir, const TmpFiles& stale) {
  for (const auto& [name, when] : temporary_files(dir)) {
    const auto it = stale.find(name);
    if (it == stale.end() || it->second != when) return name;
  }
  return std::string();
}

// What kind of file a temporary file becomes.
std::string kind_of_write(const std::string& tmp) {
  if (tmp.find(".shards/") != std::string::npos) return "a shard write (" + tmp + ")";
  if (tmp.find("ckpt-") != std::string::npos) return "a checkpoint or manifest write";
  return "the update of 'latest'";
}

class KillAndResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata-kill-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    kill_strays(dir_.string());
    if (!HasFailure()) fs::remove_all(dir_);
    else std::cout << "kept " << dir_.string() << " (logs: *.log)\n";
  }

  // Runs `launcher` + strata-train with `args` to completion (without kills);
  // returns the run's time.
  double run_to_end(const std::vector<std::string>& command, const std::string& log,
                    const std::vector<std::string>& env = {}) {
    const auto t0 = Clock::now();
    Job job(command, env, log);
    while (!job.ended()) {
      if (Clock::now() - t0 > std::chrono::seconds(300)) {
        job.kill_group();
        ADD_FAILURE() << "the run did not end within 300 s; log " << log;
        return 0;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_EQ(job.exit_code(), 0) << file_bytes(log);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // The scenario: `launcher` (empty, or mpirun and its options) runs
  // strata-train with `args`; the final checkpoint after kills and resumes
  // must equal the uninterrupted one.
  void kill_and_resume(const std::vector<std::string>& launcher, const std::string& args) {
    const std::uint64_t seed = kill_seed();
    std::cout << "kill-and-resume seed: " << seed << " (STRATA_KILL_SEED=" << seed
              << " repeats these kill moments)" << std::endl;
    RecordProperty("kill_seed", std::to_string(seed));
    std::mt19937_64 rng(seed);

    auto command = [&](const std::string& ckdir, bool resume) {
      std::vector<std::string> c = launcher;
      c.push_back(std::string(STRATA_BIN_DIR) + "/strata-train");
      std::istringstream in(args);
      for (std::string a; in >> a;) c.push_back(a);
      c.push_back("--checkpoint-dir");
      c.push_back(ckdir);
      if (resume) c.push_back("--resume");
      return c;
    };

    // The uninterrupted reference (with the same write delays, so that its
    // time tells how long a killed run would last).
    const std::string ref_dir = (dir_ / "reference").string();
    const std::vector<std::string> delay{"STRATA_CHECKPOINT_WRITE_DELAY_MS=" + std::to_string(kDelayMs)};
    const double ref_s = run_to_end(command(ref_dir, false), (dir_ / "reference.log").string(), delay);
    ASSERT_FALSE(HasFailure());
    std::string final_name;
    for (const auto& e : fs::directory_iterator(ref_dir))
      if (e.path().extension() == ".strata") final_name = std::max(final_name, e.path().filename().string());
    ASSERT_FALSE(final_name.empty());
    const std::string reference = checkpoint_bytes(ref_dir, final_name);

    // Killed runs: even ones at a random moment of the run, odd ones while a
    // checkpoint file is being written (a .tmp file exists).
    const std::string dir = (dir_ / "killed").string();
    const std::size_t total = std::stoul(final_name.substr(5, 9));
    int kills = 0, kills_mid_write = 0, kills_mid_shard = 0, runs = 0;
    for (int attempt = 0; attempt < kKills; ++attempt) {
      const bool resume = fs::exists(dir + "/latest");
      const std::string log = (dir_ / ("run-" + std::to_string(runs++) + ".log")).string();
      const bool mid_write = attempt % 2 == 1;
      // A random moment within the first 70% of the time this run would
      // take: the reference's time, scaled by the steps left after the
      // checkpoint it resumes from. Every run writes at least its final
      // checkpoint, so the odd runs are always killed.
      const std::size_t from =
          resume ? std::stoul(fs::path(checkpoint::latest(dir)).filename().string().substr(5, 9)) : 0;
      const double left = double(total - from) / total;
      const auto at = milliseconds(std::uniform_int_distribution<int>(
          50, std::max(60, static_cast<int>(700 * ref_s * left)))(rng));
      const auto after_tmp = milliseconds(std::uniform_int_distribution<int>(0, kDelayMs / 2)(rng));
      const TmpFiles stale = temporary_files(dir);
      Job job(command(dir, resume), delay, log);
      const auto t0 = Clock::now();
      bool killed = false;
      std::string during_write;  // the file being written when killed
      while (!job.ended()) {
        if (Clock::now() - t0 > std::chrono::seconds(300)) break;
        if (!mid_write && Clock::now() - t0 >= at) {
          during_write = writing_now(dir, stale);
          job.kill_group();
          killed = true;
          break;
        }
        if (mid_write && !writing_now(dir, stale).empty()) {
          std::this_thread::sleep_for(after_tmp);
          during_write = writing_now(dir, stale);
          job.kill_group();
          killed = true;
          break;
        }
        std::this_thread::sleep_for(milliseconds(1));
      }
      const int strays = kill_strays(dir);
      if (!killed) {
        ASSERT_TRUE(job.ended()) << "run " << runs - 1 << " did not end within 300 s";
        ASSERT_EQ(job.exit_code(), 0) << file_bytes(log);
        ASSERT_TRUE(checkpoint_bytes(dir, final_name) == reference)
            << "an uninterrupted run in " << dir << " differs from the reference";
        // It ended before its kill moment (the machine ran faster than the
        // reference): start the chain afresh.
        std::cout << "  run " << runs - 1 << " ended before its kill moment (" << at.count()
                  << " ms); starting afresh\n";
        fs::remove_all(dir);
        continue;
      }
      ++kills;
      kills_mid_write += !during_write.empty();
      kills_mid_shard += during_write.find(".shards/") != std::string::npos;
      std::cout << "  run " << runs - 1
                << (resume ? " (resumed at step " + std::to_string(from) + ")" : " (fresh)") << ": killed "
                << (mid_write ? std::to_string(after_tmp.count()) + " ms into a checkpoint write"
                              : "at " + std::to_string(at.count()) + " ms")
                << (during_write.empty() ? "" : ", during " + kind_of_write(during_write))
                << (mid_write && during_write.empty() ? ", after the write had ended" : "")
                << (strays > 0 ? "; " + std::to_string(strays) + " process(es) outside its process group killed too" : "")
                << "\n";
      // What a kill leaves: `latest` (if any) names a complete checkpoint,
      // and every checkpoint file loads.
      if (fs::exists(dir + "/latest")) {
        const std::string latest = checkpoint::latest(dir);
        EXPECT_NO_THROW(checkpoint::load(latest)) << latest;
      }
      if (fs::exists(dir))  // a run killed early may not have created it
        for (const auto& e : fs::directory_iterator(dir))
          if (e.path().extension() == ".strata")
            EXPECT_NO_THROW(checkpoint::load(e.path().string())) << e.path();
    }
    // Resume to the end.
    const std::string log = (dir_ / ("run-" + std::to_string(runs++) + ".log")).string();
    run_to_end(command(dir, fs::exists(dir + "/latest")), log);
    ASSERT_FALSE(HasFailure());
    const bool sharded = fs::is_directory(ref_dir + "/" + final_name.substr(0, 14) + ".shards");
    std::cout << "  " << kills << " kill(s), " << kills_mid_write << " while a checkpoint was being written"
              << (sharded ? " (" + std::to_string(kills_mid_shard) + " in a shard file)" : "") << ", "
              << runs << " run(s)" << std::endl;
    EXPECT_GE(kills, kKills / 2) << "the runs ended before they could be killed";
    EXPECT_GE(kills_mid_write, 1) << "no kill landed while a checkpoint was being written";
    if (sharded) EXPECT_GE(kills_mid_shard, 1) << "no kill landed while a shard was being written";
    const std::string final_file = dir + "/" + final_name;
    ASSERT_TRUE(fs::exists(final_file)) << final_file;
    EXPECT_TRUE(checkpoint_bytes(dir, final_name) == reference)
        << "the final checkpoint after kills and resumes differs from the uninterrupted run's";
    EXPECT_FALSE(has_temporary_file(dir)) << "a temporary file was left behind";
  }

  static constexpr int kKills = 6;
  static constexpr int kDelayMs = 40;
  fs::path dir_;
};

// Adam, dropout, shuffling and 2 thread ranks: every piece of state that a
// resume must restore. 60 steps, a checkpoint every 4. (Model-parallel runs:
// the same with another strategy; their checkpoints are sharded, one file
// per rank and a manifest, and kills land in shard and manifest writes.)
const char* kArgs =
    "--dataset synthetic --layers 24,96,96,6 --samples 800 --batch-size 20 --steps 60 "
    "--checkpoint-every 4 --keep-checkpoints 3 --optimizer adam --dropout 0.1 --no-eval -q "
    "--log-every 0 --strategy dp --ranks 2 --threads 1";

TEST_F(KillAndResume, ThreadRanksEndBitwiseIdenticalToAnUninterruptedRun) {
  kill_and_resume({}, kArgs);
}

std::string with_strategy(const std::string& strategy) {
  return std::regex_replace(kArgs, std::regex("--strategy dp --ranks 2"), strategy);
}

TEST_F(KillAndResume, PipelineStagesEndBitwiseIdenticalToAnUninterruptedRun) {
  kill_and_resume({}, with_strategy("--strategy pipeline --ranks 2"));
}

TEST_F(KillAndResume, TensorParallelWithZeroEndsBitwiseIdenticalToAnUninterruptedRun) {
  kill_and_resume({}, with_strategy("--strategy hybrid --ranks 4 --tp 2 --zero 1"));
}

#ifdef STRATA_MPIEXEC
TEST_F(KillAndResume, MpiProcessesEndBitwiseIdenticalToAnUninterruptedRun) {
  // Open MPI, as root in containers too; 2 processes of 1 rank each.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  std::string args = kArgs;
  args = std::regex_replace(args, std::regex("--ranks 2"), "--ranks 1");
  kill_and_resume({STRATA_MPIEXEC, "-n", "2", "--bind-to", "none"}, args);
}
#endif

}  // namespace
}  // namespace strata
