#include "backends/comm/threads.hpp"

#include "backends/comm/reduce.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata::comm {
namespace detail {

using Clock = std::chrono::steady_clock;

// The first failure among all ranks of one run_thread_ranks (shared by every
// group split from it). Waits poll it so that no rank waits for a dead peer.
struct Failure {
  std::atomic<bool> failed{false};
  std::mutex mutex;
  int rank = -1;
  std::string message;

  void set(int r, const std::string& m) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failed.load(std::memory_order_relaxed)) return;
    rank = r;
    message = m;
    failed.store(true, std::memory_order_release);
  }
  [[noreturn]] void rethrow_as_peer(int me) {
    std::lock_guard<std::mutex> lock(mutex);
    STRATA_THROW(runtime, "threads communicator: rank ", me, " stops because rank ", rank,
                 " failed: ", message);
  }
};

enum class Kind { allreduce, reduce_scatter, allgather, broadcast, barrier, split };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allreduce: return "allreduce";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::allgather: return "allgather";
    case Kind::broadcast: return "broadcast";
    case Kind::barrier: return "barrier";
    case Kind::split: return "split";
  }
  return "?";
}

// What a rank is calling; compared across ranks after the first barrier.
struct Desc {
  Kind kind = Kind::barrier;
  std::size_t count = 0;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  int color = 0, key = 0;  // split only (differ across ranks by design)
  std::uint64_t seq = 0;

  bool matches(const Desc& o) const {
    return kind == o.kind && count == o.count && type == o.type && op == o.op &&
           root == o.root && seq == o.seq;
  }
  std::string str() const {
    std::ostringstream os;
    os << kind_name(kind) << " #" << seq;
    if (kind == Kind::barrier || kind == Kind::split) return os.str();
    os << " (" << count << " x " << to_string(type);
    if (kind == Kind::allreduce || kind == Kind::reduce_scatter) os << ", " << to_string(op);
    if (kind == Kind::broadcast) os << ", root " << root;
    os << ")";
    return os.str();
  }
};

// A rank's published state. Descriptors and small-message staging are double
// buffered by sequence number: a rank may publish collective k+1 while a slow
// peer still reads collective k, never k+2 (that needs everyone past k+1).
struct alignas(64) Slot {
  // Small allreduces: sequence number + 1 of the last one whose input this
  // rank has staged (alone on its cache line: peers poll it).
  alignas(64) std::atomic<std::uint64_t> ready{0};
  alignas(64) Desc desc[2];
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<unsigned char> staging[2];
  std::shared_ptr<ThreadsGroup> child;
};

struct Mailbox {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<unsigned char>>> queues;  // (source, tag)
};

class ThreadsGroup {
 public:
  ThreadsGroup(int n, const CommOptions& options, std::shared_ptr<Failure> failure)
      : size(n), options(options), failure(std::move(failure)), slots(n), arrived_(n),
        boxes_(n) {
    for (auto& a : arrived_) a.store(0);
    for (auto& b : boxes_) b = std::make_unique<Mailbox>();
  }

  const int size;
  const CommOptions options;
  // Busy-wait iterations before yielding: a peer is usually microseconds
  // away when every rank has a core; with more busy threads on the node than
  // cores (this group's ranks, or every process's thread ranks: node_threads)
  // the peer may need this rank's core, so yield almost at once.
  const int spins = spin_limit(std::max(size, options.node_threads));
  const std::shared_ptr<Failure> failure;
  std::vector<Slot> slots;

  // Waits until every rank of the group has arrived. Throws when the timeout
  // passes (naming the missing ranks) or when any rank has failed.
  void wait(int rank, const Desc& what) {
    const std::uint64_t gen = generation_.load(std::memory_order_acquire);
    arrived_[rank].store(gen + 1, std::memory_order_relaxed);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == size - 1) {
      count_.store(0, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.store(gen + 1, std::memory_order_release);
      }
      cv_.notify_all();
      return;
    }
    // Spin (a peer is usually microseconds away), then yield, then block.
    for (int i = 0; i < spins; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      STRATA_CPU_RELAX();
    }
    for (int i = 0; i < 100; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      if (failure->failed.load(std::memory_order_acquire)) failure->rethrow_as_peer(rank);
      std::this_thread::yield();
    }
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(options.timeout_s));
    std::unique_lock<std::mutex> lock(mutex_);
    while (generation_.load(std::memory_order_acquire) == gen) {
      if (failure->failed.load(std::memory_order_acquire)) {
        lock.unlock();
        failure->rethrow_as_peer(rank);
      }
      if (Clock::now() >= deadline) {
        std::ostringstream missing;
        int k = 0;
        for (int r = 0; r < size; ++r)
          if (arrived_[r].load(std::memory_order_relaxed) != gen + 1)
            missing << (k++ ? ", " : "") << r;
        STRATA_THROW(runtime, "threads communicator: ", what.str(), " on rank ", rank, " of ",
                     size, " timed out after ", options.timeout_s, " s; rank(s) ", missing.str(),
                     " did not arrive (STRATA_COMM_TIMEOUT sets the limit)");
      }
      cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }


  // Publishes the rank's descriptor (and whatever it wrote into its slot
  // before) for collective `d` by raising its flag (ready = seq + 1), waits
  // until every peer has raised theirs (each flag on its own cache line: no
  // shared counter, no lock on the way), then fails on every rank alike when
  // the ranks disagree on what they are calling. A peer cannot be further
  // than the next collective: it would need this rank's flag for that, so
  // double buffering by sequence number is enough.
  void sync(int rank, const Desc& d) {
    const int b = d.seq % 2;
    slots[rank].desc[b] = d;
    slots[rank].ready.store(d.seq + 1, std::memory_order_release);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      const std::atomic<std::uint64_t>& flag = slots[r].ready;
      auto arrived = [&] { return flag.load(std::memory_order_acquire) > d.seq; };
      if (arrived()) continue;
      for (int i = 0; i < spins && !arrived(); ++i) STRATA_CPU_RELAX();
      for (int i = 0; i < 100 && !arrived(); ++i) {
        if (failure->failed.load(std::memory_order_acquire)) failure->rethrow_as_peer(rank);
        std::this_thread::yield();
      }
      const auto deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(options.timeout_s));
      while (!arrived()) {
        if (failure->failed.load(std::memory_order_acquire)) failure->rethrow_as_peer(rank);
        if (Clock::now() >= deadline) {
          std::ostringstream missing;
          int k = 0;
          for (int q = 0; q < size; ++q)
            if (q != rank && slots[q].ready.load(std::memory_order_acquire) <= d.seq)
              missing << (k++ ? ", " : "") << q;
          STRATA_THROW(runtime, "threads communicator: ", d.str(), " on rank ", rank, " of ",
                       size, " timed out after ", options.timeout_s, " s; rank(s) ", missing.str(),
                       " did not arrive (STRATA_COMM_TIMEOUT sets the limit)");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    for (int r = 0; r < size; ++r)
      if (!slots[r].desc[b].matches(d))
        STRATA_THROW(runtime, "threads communicator: collective mismatch: rank ", rank, " calls ",
                     d.str(), " but rank ", r, " calls ", slots[r].desc[b].str());
  }

  Mailbox& box(int rank) { return *boxes_[rank]; }

 private:
  std::atomic<int> count_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::vector<std::atomic<std::uint64_t>> arrived_;  // generation + 1 at arrival, per rank
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
};

namespace {
constexpr std::size_t small_bytes = 8 * 1024;

// Slice of rank k out of n over count elements, on cache-line boundaries.
std::pair<std::size_t, std::size_t> slice(std::size_t count, std::size_t elem, int n, int k) {
  const std::size_t line = std::max<std::size_t>(1, 64 / elem);
  std::size_t chunk = (count + n - 1) / n;
  chunk = (chunk + line - 1) / line * line;
  const std::size_t begin = std::min(count, chunk * k);
  return {begin, std::min(count, begin + chunk)};
}

unsigned char* at(void* p, std::size_t bytes) { return static_cast<unsigned char*>(p) + bytes; }
const unsigned char* at(const void* p, std::size_t bytes) {
  return static_cast<const unsigned char*>(p) + bytes;
}
}  // namespace

}  // namespace detail

using detail::Desc;
using detail::Kind;

ThreadsComm::ThreadsComm(std::shared_ptr<detail::ThreadsGroup> group, int rank)
    : Communicator(group->options), group_(std::move(group)), rank_(rank) {}

ThreadsComm::~ThreadsComm() { shutdown(); }

int ThreadsComm::size() const { return group_->size; }

int ThreadsComm::spins() const { return group_->spins; }

int spin_limit(int busy) {
  return busy <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) ? 4000 : 16;
}

void ThreadsComm::do_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                               ReduceOp op) {
  Desc d{Kind::allreduce, count, type, op, 0, 0, 0, seq_++};
  const int n = group_->size;
  const std::size_t elem = size_of(type), bytes = count * elem;
  auto& slots = group_->slots;
  if (n == 1) {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
    return;
  }
  std::vector<const void*> srcs(n);
  if (bytes <= detail::small_bytes) {
    // Copy in, raise this rank's flag, wait for the peers' flags; every rank
    // then reduces everything from the slots (no shared counter, no lock).
    // The staging buffer of collective k was last read in collective k - 2,
    // which every peer finished before raising its flag for k - 1.
    auto& staging = slots[rank_].staging[d.seq % 2];
    if (staging.size() < bytes) staging.resize(bytes);
    if (bytes > 0) std::memcpy(staging.data(), send, bytes);
    group_->sync(rank_, d);
    for (int k = 0; k < n; ++k) srcs[k] = slots[k].staging[d.seq % 2].data();
    detail::reduce(type, op, recv, srcs.data(), n, 0, count);
    return;
  }
  slots[rank_].send = send;
  slots[rank_].recv = recv;
  group_->sync(rank_, d);
  // Each rank owns a slice: it reads that slice of every input, reduces it
  // block by block into its own output and writes the block into every other
  // output while it is still in cache. Slices are disjoint, so in place is
  // safe: 2 n S bytes of traffic in all, the minimum.
  for (int k = 0; k < n; ++k) srcs[k] = slots[k].send;
  auto [begin, end] = detail::slice(count, elem, n, rank_);
  const std::size_t block = std::max<std::size_t>(1, (std::size_t(64) << 10) / elem);
  for (std::size_t b = begin; b < end; b += block) {
    const std::size_t e = std::min(end, b + block);
    detail::reduce(type, op, recv, srcs.data(), n, b, e);
    for (int k = 0; k < n; ++k)
      if (k != rank_)
        std::memcpy(detail::at(slots[k].recv, b * elem), detail::at(recv, b * elem), (e - b) * elem);
  }
  // Every output is complete once all ranks are through.
  group_->wait(rank_, d);
}

void ThreadsComm::do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                    DataType type, ReduceOp op) {
  Desc d{Kind::reduce_scatter, count, type, op, 0, 0, 0, seq_++};
  const int n = group_->size;
  const std::size_t elem = size_of(type);
  auto& slots = group_->slots;
  slots[rank_].send = send;
  group_->sync(rank_, d);
  std::vector<const void*> srcs(n);
  for (int k = 0; k < n; ++k) srcs[k] = detail::at(slots[k].send, rank_ * count * elem);
  detail::reduce(type, op, recv, srcs.data(), n, 0, count);
  group_->wait(rank_, d);
}

void ThreadsComm::do_allgather(const void* send, void* recv, std::size_t count, DataType type) {
  Desc d{Kind::allgather, count, type, ReduceOp::sum, 0, 0, 0, seq_++};
  const int n = group_->size;
  const std::size_t bytes = count * size_of(type);
  auto& slots = group_->slots;
  slots[rank_].send = send;
  slots[rank_].recv = recv;
  group_->sync(rank_, d);
  // Each rank pushes its block into every output: the source is in this
  // core's cache (it was just written here, by a reduce-scatter or an
  // optimizer step). Pulling instead read blocks still dirty in their
  // owner's cache; ZeRO-1's pair took 3-6x an allreduce so, 0.9-1.5x now
  // (docs/benchmarks.md, "thread ranks: the allgather pushes").
  for (int k = 0; k < n; ++k) {
    unsigned char* dst = detail::at(slots[k].recv, rank_ * bytes);
    if (bytes > 0 && dst != send) std::memcpy(dst, send, bytes);
  }
  group_->wait(rank_, d);
}

void ThreadsComm::do_broadcast(void* buf, std::size_t count, DataType type, int root) {
  Desc d{Kind::broadcast, count, type, ReduceOp::sum, root, 0, 0, seq_++};
  auto& slots = group_->slots;
  slots[rank_].send = buf;
  group_->sync(rank_, d);
  if (rank_ != root && count > 0) std::memcpy(buf, slots[root].send, count * size_of(type));
  group_->wait(rank_, d);
}

void ThreadsComm::do_barrier() {
  group_->sync(rank_, Desc{Kind::barrier, 0, DataType::f32, ReduceOp::sum, 0, 0, 0, seq_++});
}

std::unique_ptr<Communicator> ThreadsComm::do_split(int color, int key) {
  Desc d{Kind::split, 0, DataType::f32, ReduceOp::sum, 0, color, key, seq_++};
  auto& slots = group_->slots;
  group_->sync(rank_, d);
  std::vector<std::pair<int, int>> members;  // (key, rank) of my color
  for (int r = 0; r < group_->size; ++r)
    if (color >= 0 && slots[r].desc[d.seq % 2].color == color)
      members.push_back({slots[r].desc[d.seq % 2].key, r});
  std::sort(members.begin(), members.end());
  const bool leader = !members.empty() && members.front().second == rank_;
  if (leader)
    slots[rank_].child = std::make_shared<detail::ThreadsGroup>(
        static_cast<int>(members.size()), group_->options, group_->failure);
  group_->wait(rank_, d);
  std::unique_ptr<Communicator> out;
  if (!members.empty()) {
    const int index = static_cast<int>(
        std::find_if(members.begin(), members.end(), [&](auto& m) { return m.second == rank_; }) -
        members.begin());
    out = std::make_unique<ThreadsComm>(slots[members.front().second].child, index);
  }
  group_->wait(rank_, d);
  if (leader) slots[rank_].child.reset();
  return out;
}

void ThreadsComm::do_send(const void* buf, std::size_t count, DataType type, int dest, int tag) {
  const std::size_t bytes = count * size_of(type);
  std::vector<unsigned char> message(static_cast<const unsigned char*>(buf),
                                     static_cast<const unsigned char*>(buf) + bytes);
  auto& box = group_->box(dest);
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    box.queues[{rank_, tag}].push_back(std::move(message));
  }
  box.cv.notify_all();
}

void ThreadsComm::do_recv(void* buf, std::size_t count, DataType type, int source, int tag) {
  const std::size_t bytes = count * size_of(type);
  auto& box = group_->box(rank_);
  const auto deadline =
      detail::Clock::now() + std::chrono::duration_cast<detail::Clock::duration>(
                                 std::chrono::duration<double>(options_.timeout_s));
  std::vector<unsigned char> message;
  {
    std::unique_lock<std::mutex> lock(box.mutex);
    for (;;) {
      auto it = box.queues.find({source, tag});
      if (it != box.queues.end() && !it->second.empty()) {
        message = std::move(it->second.front());
        it->second.pop_front();
        break;
      }
      if (group_->failure->failed.load(std::memory_order_acquire)) {
        lock.unlock();
        group_->failure->rethrow_as_peer(rank_);
      }
      if (detail::Clock::now() >= deadline)
        STRATA_THROW(runtime, "threads communicator: rank ", rank_, " of ", size(),
                     ": recv from rank ", source, " (tag ", tag, ") timed out after ",
                     options_.timeout_s, " s; rank ", source, " did not send");
      box.cv.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
  STRATA_REQUIRE(message.size() == bytes, runtime, "threads communicator: rank ", rank_,
                 " expects ", count, " x ", to_string(type), " from rank ", source, " (tag ", tag,
                 ") but the message has ", message.size(), " bytes");
  if (bytes > 0) std::memcpy(buf, message.data(), bytes);
}

ThreadTeam::ThreadTeam(int ranks, const CommOptions& options) {
  STRATA_REQUIRE(ranks >= 1, config, "thread ranks: need at least 1 rank, got ", ranks);
  failure_ = std::make_shared<detail::Failure>();
  group_ = std::make_shared<detail::ThreadsGroup>(ranks, options, failure_);
  for (int r = 0; r < ranks; ++r) comms_.push_back(std::make_unique<ThreadsComm>(group_, r));
}

ThreadTeam::~ThreadTeam() = default;

bool ThreadTeam::failed() const { return failure_->failed.load(); }

void ThreadTeam::run(const std::function<void(int)>& body, const Spawner& spawner) {
  if (failed()) {
    std::lock_guard<std::mutex> lock(failure_->mutex);
    STRATA_THROW(runtime, "thread ranks: this team ended when rank ", failure_->rank,
                 " failed (", failure_->message, "); start a new one");
  }
  const int ranks = size();
  std::vector<std::exception_ptr> errors(ranks);
  auto run_rank = [&](int r) {
    try {
      body(r);
    } catch (const std::exception& e) {
      errors[r] = std::current_exception();
      failure_->set(r, e.what());
    } catch (...) {
      errors[r] = std::current_exception();
      failure_->set(r, "unknown exception");
    }
  };
  if (spawner) {
    spawner(ranks, run_rank);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(ranks - 1);
    for (int r = 1; r < ranks; ++r) threads.emplace_back(run_rank, r);
    run_rank(0);  // rank 0 on the calling thread
    for (auto& t : threads) t.join();
  }
  if (failed()) {
    if (!first_error_) {
      first_error_ = errors[failure_->rank];
      for (int r = 0; r < ranks && !first_error_; ++r) first_error_ = errors[r];
    }
    if (first_error_) std::rethrow_exception(first_error_);
    std::lock_guard<std::mutex> lock(failure_->mutex);
    STRATA_THROW(runtime, "thread ranks: rank ", failure_->rank, " failed: ", failure_->message);
  }
}

void run_thread_ranks(int ranks, const std::function<void(Communicator&)>& body,
                      const CommOptions& options, const Spawner& spawner) {
  ThreadTeam team(ranks, options);
  team.run([&](int r) { body(team.comm(r)); }, spawner);
}

}  // namespace strata::comm
