#include "backends/comm/mpi_watchdog.hpp"

#include "backends/comm/progress.hpp"
#include "backends/units.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata::comm::mpi {
namespace {

using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

constexpr int kPingTag = 1, kReplyTag = 2;
constexpr int kReplyBytes = 192;
using ReplyText = std::array<char, kReplyBytes>;

// How long the liveness probe waits for answers (and an aborting rank goes
// on answering others' probes): a quarter of the timeout, 0.5 to 2 s.
double probe_budget_s(double timeout_s) { return std::clamp(timeout_s / 4, 0.5, 2.0); }

// A process whose MPI_Abort does not end it (its launcher unreachable over a
// cut link, or srun waiting for a dead node) exits by itself this long after
// the abort began: with the probe and the answering before it, every
// surviving rank has exited within twice the timeout (the timeout, a
// quarter of it probing, a quarter answering, an eighth here: 1.625 x for
// timeouts up to 8 s, the timeout + 14 s beyond).
double exit_after_abort_s(double timeout_s) { return std::clamp(timeout_s / 8, 0.5, 10.0); }

constexpr int kHostBytes = 64;

class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog w;
    return w;
  }

  void add(Watched::Watch* w) {
    std::lock_guard<std::mutex> lock(mutex_);
    active_.push_back(w);
    ensure_thread();
  }
  void remove(Watched::Watch* w) {
    std::lock_guard<std::mutex> lock(mutex_);
    active_.erase(std::find(active_.begin(), active_.end(), w));
  }

  void start_probing() {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level != MPI_THREAD_MULTIPLE) return;  // the watchdog thread may not call MPI
    std::lock_guard<std::mutex> lock(mutex_);
    if (probe_comm_ != MPI_COMM_NULL) return;
    MPI_Comm_dup(MPI_COMM_WORLD, &probe_comm_);
    MPI_Comm_set_errhandler(probe_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(probe_comm_, &world_rank_);
    MPI_Comm_size(probe_comm_, &world_size_);
    // Every process's host, for the report naming the lost ranks.
    std::array<char, kHostBytes> mine{};
    int length = 0;
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    MPI_Get_processor_name(name, &length);
    std::snprintf(mine.data(), mine.size(), "%s", name);
    std::vector<char> all(static_cast<std::size_t>(world_size_) * kHostBytes);
    MPI_Allgather(mine.data(), kHostBytes, MPI_CHAR, all.data(), kHostBytes, MPI_CHAR, probe_comm_);
    hosts_.clear();
    for (int r = 0; r < world_size_; ++r) {
      const char* h = all.data() + static_cast<std::size_t>(r) * kHostBytes;
      hosts_.emplace_back(h, strnlen(h, kHostBytes));
    }
    ensure_thread();
  }

  void stop_probing() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (probe_comm_ == MPI_COMM_NULL) return;
    if (ping_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&ping_);
      MPI_Wait(&ping_, MPI_STATUS_IGNORE);
    }
    const double deadline = now_s() + 1.0;  // replies to a rank that timed out
    while (!replies_.empty() && now_s() < deadline) reap_replies();
    // A reply still in flight keeps its buffer: moved to a list that is
    // never freed (the peer is gone or aborting; this is the end of MPI).
    static auto* unfinished = new std::list<Reply>;
    for (auto& r : replies_) MPI_Request_free(&r.request);
    unfinished->splice(unfinished->end(), replies_);
    MPI_Comm_free(&probe_comm_);
  }

  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Reply {
    MPI_Request request = MPI_REQUEST_NULL;
    ReplyText text{};
  };

  void ensure_thread() {  // mutex_ held
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      serve();
      const double now = now_s();
      for (const Watched::Watch* w : active_)
        if (now - w->start_s > w->timeout_s) abort_for(*w);
    }
  }

  // What this process is doing, for another rank's probe (mutex_ held).
  std::string describe_self() const {
    if (active_.empty()) return "is alive, not waiting in a blocking MPI operation";
    const Watched::Watch& w = *active_.front();
    char text[kReplyBytes];
    std::snprintf(text, sizeof text, "is alive, waiting in %s #%llu (rank %d of %d) for %.1f s",
                  w.what, static_cast<unsigned long long>(w.seq), w.rank, w.size,
                  now_s() - w.start_s);
    return text;
  }

  // Answers the pings that arrived and retires finished replies (mutex_ held).
  void serve() {
    if (probe_comm_ == MPI_COMM_NULL) return;
    for (;;) {
      if (ping_ == MPI_REQUEST_NULL &&
          MPI_Irecv(&ping_value_, 1, MPI_INT, MPI_ANY_SOURCE, kPingTag, probe_comm_, &ping_) !=
              MPI_SUCCESS)
        return;
      int done = 0;
      MPI_Status status;
      if (MPI_Test(&ping_, &done, &status) != MPI_SUCCESS || !done) break;
      replies_.emplace_back();
      Reply& r = replies_.back();
      std::snprintf(r.text.data(), r.text.size(), "%s", describe_self().c_str());
      MPI_Isend(r.text.data(), kReplyBytes, MPI_CHAR, status.MPI_SOURCE, kReplyTag, probe_comm_,
                &r.request);
    }
    reap_replies();
  }

  void reap_replies() {
    for (auto it = replies_.begin(); it != replies_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? replies_.erase(it) : std::next(it);
    }
  }

  // Pings every other process and waits up to budget_s for the answers
  // (answering their pings meanwhile: they may be probing too). Returns, per
  // world rank, the answer or an empty string (mutex_ held).
  std::vector<std::string> probe(double budget_s) {
    const int n = world_size_;
    static const int ping = 1;  // stays valid after an abandoned send
    std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL), recvs(n, MPI_REQUEST_NULL);
    // Receives from lost ranks stay posted after this returns (the process
    // aborts next): their buffers are never freed.
    auto& texts = *new std::vector<ReplyText>(n);
    std::vector<std::string> answers(n);
    for (int r = 0; r < n; ++r) {
      if (r == world_rank_) continue;
      MPI_Isend(&ping, 1, MPI_INT, r, kPingTag, probe_comm_, &sends[r]);
      MPI_Irecv(texts[r].data(), kReplyBytes, MPI_CHAR, r, kReplyTag, probe_comm_, &recvs[r]);
    }
    const double deadline = now_s() + budget_s;
    int pending = n - 1;
    while (pending > 0 && now_s() < deadline) {
      serve();
      for (int r = 0; r < n; ++r) {
        if (recvs[r] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE);
        if (done) {
          texts[r].back() = '\0';
          answers[r] = texts[r].data();
          --pending;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // The process aborts next: requests to lost peers are left as they are.
    for (MPI_Request& r : sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    return answers;
  }

  std::string host_of(int r) const {
    return r >= 0 && static_cast<std::size_t>(r) < hosts_.size() ? hosts_[r] : std::string("?");
  }

  // "allreduce #735 (36.4 KiB, rank 1 of 3 of its group)"
  static std::string operation(const Watched::Watch& w) {
    char text[256];
    std::snprintf(text, sizeof text, "%s #%llu (%s%srank %d of %d of its group)", w.what,
                  static_cast<unsigned long long>(w.seq),
                  w.bytes > 0 ? format_bytes(static_cast<double>(w.bytes)).c_str() : "",
                  w.bytes > 0 ? ", " : "", w.rank, w.size);
    return text;
  }

  [[noreturn]] void abort_for(const Watched::Watch& w) {
    const std::string where = progress::describe();
    const std::string tail = where.empty() ? "" : ", " + where;
    std::string message;
    if (probe_comm_ != MPI_COMM_NULL && world_size_ > 1) {
      const double budget = probe_budget_s(w.timeout_s);
      const auto answers = probe(budget);
      std::string lost, lost_hosts, alive;
      int lowest_alive = world_rank_;  // prints what every live rank waits in
      for (int r = 0; r < world_size_; ++r) {
        if (r == world_rank_) continue;
        if (answers[r].empty()) {
          lost += (lost.empty() ? "" : ", ") + std::to_string(r);
          lost_hosts += (lost_hosts.empty() ? "" : ", ") + std::to_string(r) + " on " + host_of(r);
        } else {
          alive += "\n  world rank " + std::to_string(r) + " (" + host_of(r) + ") " + answers[r];
          lowest_alive = std::min(lowest_alive, r);
        }
      }
      if (lowest_alive != world_rank_)
        alive = "\n  (world rank " + std::to_string(lowest_alive) + " lists what every live rank waits in)";
      char buf[256];
      std::snprintf(buf, sizeof buf, " did not complete within %g s on world rank %d of %d (%s)",
                    w.timeout_s, world_rank_, world_size_, host_of(world_rank_).c_str());
      if (!lost.empty()) {
        // The first line names what was lost, the operation, the step and
        // the checkpoint to resume from.
        message = "strata: runtime error: lost world rank(s) " + lost_hosts + ": " + operation(w) +
                  buf + tail + ".";
        std::snprintf(buf, sizeof buf, "\n  lost: world rank(s) %s did not answer within %.1f s "
                      "(a dead process or node, or a cut link)", lost.c_str(), budget);
        message += buf;
      } else {
        message = "strata: runtime error: mpi communicator: " + operation(w) + buf + tail + "." +
                  "\n  every other rank answered: none was lost (ranks in different operations "
                  "are a program error; STRATA_COMM_CHECK=1 names the mismatch)";
      }
      message += alive;
      message += "\nAborting the job (--collective-timeout or STRATA_COMM_TIMEOUT sets the limit).\n";
    } else {
      char buf[128];
      std::snprintf(buf, sizeof buf, " did not complete within %g s", w.timeout_s);
      message = "strata: runtime error: mpi communicator: " + operation(w) + buf + tail +
                "; a rank did not arrive or died. Aborting the job (--collective-timeout or "
                "STRATA_COMM_TIMEOUT sets the limit; STRATA_COMM_CHECK=1 names the missing "
                "ranks).\n";
    }
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    // Ranks still probing must hear from this one: answer for as long as a
    // probe lasts before aborting (an aborting rank would look lost).
    if (probe_comm_ != MPI_COMM_NULL) {
      const double until = now_s() + probe_budget_s(w.timeout_s);
      while (now_s() < until) {
        serve();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    const double exit_s = exit_after_abort_s(w.timeout_s);
    std::thread([exit_s] {
      std::this_thread::sleep_for(std::chrono::duration<double>(exit_s));
      std::fprintf(stderr, "strata: MPI_Abort did not end this process within %g s (the launcher "
                   "is unreachable or waits for a lost node); exiting\n", exit_s);
      std::_Exit(4);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, 4);
    std::_Exit(4);
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Watched::Watch*> active_;
  bool stop_ = false;
  std::thread thread_;
  MPI_Comm probe_comm_ = MPI_COMM_NULL;
  int world_rank_ = 0, world_size_ = 1;
  MPI_Request ping_ = MPI_REQUEST_NULL;
  int ping_value_ = 0;
  std::list<Reply> replies_;  // stable addresses while the sends are in flight
  std::vector<std::string> hosts_;  // per world rank
};

}  // namespace

void start_probing() { Watchdog::instance().start_probing(); }
void stop_probing() { Watchdog::instance().stop_probing(); }

Watched::Watched(const char* what, std::uint64_t seq, int rank, int size, double timeout_s,
                 std::size_t bytes)
    : w_{now_s(), timeout_s, what, seq, rank, size, bytes} {
  Watchdog::instance().add(&w_);
}

Watched::~Watched() { Watchdog::instance().remove(&w_); }

}  // namespace strata::comm::mpi
