#include "backends/comm/communicator.hpp"

#include "backends/device.hpp"
#include "backends/device_check.hpp"
#include "backends/trace.hpp"
#include "backends/units.hpp"

#include <cstdio>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace strata::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::average: return "average";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::f32: return "float32";
    case DataType::f64: return "float64";
    case DataType::i32: return "int32";
    case DataType::i64: return "int64";
    case DataType::bf16: return "bfloat16";
    case DataType::f16: return "float16";
  }
  return "?";
}

std::size_t size_of(DataType type) {
  if (type == DataType::bf16 || type == DataType::f16) return 2;
  return type == DataType::f32 || type == DataType::i32 ? 4 : 8;
}

CommOptions CommOptions::from_environment() {
  CommOptions o;
  if (const char* t = std::getenv("STRATA_COMM_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    STRATA_REQUIRE(end != t && *end == '\0' && v > 0, config,
                   "STRATA_COMM_TIMEOUT='", t, "' is not a positive number of seconds");
    o.timeout_s = v;
  }
  if (const char* c = std::getenv("STRATA_COMM_CHECK")) o.check = std::string(c) == "1";
  return o;
}

// ------------------------------------------------------------------ Handle
struct Handle::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    if (state_) {
      try {
        wait();
      } catch (...) {
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Handle::~Handle() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
}

void Handle::wait() {
  if (!state_) return;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->cv.wait(lock, [&] { return state_->done; });
    error = state_->error;
  }
  state_.reset();
  if (error) std::rethrow_exception(error);
}

bool Handle::ready() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

// ------------------------------------------------------------------ progress thread
// Executes asynchronous operations of one communicator in issue order. Once an
// operation fails, the ones queued after it fail with the same error (their
// partners may be waiting in a different operation now).
class Communicator::Progress {
 public:
  Progress() : thread_([this] { run(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Handle submit(std::function<void()> op) {
    auto state = std::make_shared<Handle::State>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({std::move(op), state});
      ++pending_;
    }
    cv_.notify_all();
    return Handle(state);
  }

  std::size_t pending() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_;
  }

  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  struct Task {
    std::function<void()> op;
    std::shared_ptr<Handle::State> state;
  };

  void run() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop requested and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error = failed_;
      if (!error) {
        try {
          task.op();
        } catch (...) {
          error = failed_ = std::current_exception();
        }
      }
      {
        std::lock_guard<std::mutex> lock(task.state->mutex);
        task.state->done = true;
        task.state->error = error;
      }
      task.state->cv.notify_all();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --pending_;
      }
      idle_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Task> queue_;
  std::size_t pending_ = 0;
  bool stop_ = false;
  std::exception_ptr failed_;  // only touched by the progress thread
  std::thread thread_;
};

// ------------------------------------------------------------------ Communicator
Communicator::Communicator(const CommOptions& options) : options_(options) {}

Communicator::~Communicator() { shutdown(); }

void Communicator::shutdown() noexcept { progress_.reset(); }

namespace {
// "allreduce 7.1 MiB" (built only while tracing).
std::string span_name(const char* what, std::size_t count, DataType type) {
  return std::string(what) + " " + format_bytes(static_cast<double>(count * size_of(type)));
}
}  // namespace

Handle Communicator::submit(std::function<void()> op) {
  if (!progress_) progress_ = std::make_unique<Progress>();
  return progress_->submit(std::move(op));
}

void Communicator::ordered(const std::function<void()>& op) {
  if (!progress_ || progress_->pending() == 0) {
    op();
    return;
  }
  submit(op).wait();
}

void Communicator::wait_all() {
  if (progress_) progress_->wait_idle();
}

void Communicator::check_peer(int peer, const char* what) const {
  STRATA_REQUIRE(peer >= 0 && peer < size(), config, name(), " communicator: ", what, " rank ",
                 peer, " out of range [0, ", size(), ")");
}

void Communicator::on_memory(const char* what, Op op, DataType type, ReduceOp reduce, Buffer a,
                             Buffer b, const std::function<void(void*, void*)>& transport) {
  auto* ap = const_cast<void*>(a.p);
  auto* bp = const_cast<void*>(b.p);
  if (!device::has_device_memory()) {  // host builds: every buffer is where it must be
    transport(ap, bp);
    return;
  }
  // One buffer inside the other (in-place operations): stage the outer one.
  auto inside = [](const Buffer& x, const Buffer& y) {
    const auto* xp = static_cast<const char*>(x.p);
    const auto* yp = static_cast<const char*>(y.p);
    return x.bytes > 0 && y.bytes > 0 && xp >= yp && xp + x.bytes <= yp + y.bytes;
  };
  std::ptrdiff_t b_offset = -1;  // b's offset in a, when b lies in a
  std::ptrdiff_t a_offset = -1;
  if (inside(b, a)) b_offset = static_cast<const char*>(b.p) - static_cast<const char*>(a.p);
  else if (inside(a, b)) a_offset = static_cast<const char*>(a.p) - static_cast<const char*>(b.p);
  if (b_offset >= 0) a.in |= b.in, a.out |= b.out, b.bytes = 0;
  if (a_offset >= 0) b.in |= a.in, b.out |= a.out, a.bytes = 0;

  const Memory where = memory(op, type, reduce);
  Buffer* bufs[2] = {&a, &b};
  void* given[2] = {ap, bp};
  bool staged[2] = {false, false};
  for (int i = 0; i < 2; ++i) {
    Buffer& x = *bufs[i];
    if (x.p == nullptr || x.bytes == 0) continue;
    const bool dev = device::is_device(x.p);
    if (where == Memory::host && dev) {
      host_stage_[i].resize(x.bytes);
      given[i] = host_stage_[i].data();
    } else if (where == Memory::device && !dev) {
      if (device_stage_[i].extent(0) < x.bytes)
        device_stage_[i] = Kokkos::View<unsigned char*, MemSpace>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "strata::comm::stage"), x.bytes);
      given[i] = device_stage_[i].data();
    } else {
      continue;
    }
    staged[i] = true;
    if (x.in) device::copy(given[i], x.p, x.bytes);
  }
  if (b_offset >= 0) given[1] = static_cast<char*>(given[0]) + b_offset;
  if (a_offset >= 0) given[0] = static_cast<char*>(given[1]) + a_offset;
  {
    // Device buffers the transport gets as they are: host code in it must
    // not touch them (the check makes their pages inaccessible).
    const bool check = device::check::enabled();
    device::check::Protect guard(
        {{staged[0] || !check ? nullptr : a.p, a.bytes}, {staged[1] || !check ? nullptr : b.p, b.bytes}},
        check ? std::string(what) + " of the " + name() + " communicator (rank " +
                    std::to_string(rank()) + ")"
              : std::string());
    transport(given[0], given[1]);
  }
  for (int i = 0; i < 2; ++i)
    if (staged[i] && bufs[i]->out) device::copy(const_cast<void*>(bufs[i]->p), given[i], bufs[i]->bytes);
}

void Communicator::staged_allreduce(const void* send, void* recv, std::size_t count,
                                    DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  on_memory("allreduce", Op::allreduce, type, op, {send, bytes, true, false}, {recv, bytes, false, true},
            [&](void* s, void* r) { do_allreduce(s, r, count, type, op); });
}

void Communicator::staged_reduce_scatter(const void* send, void* recv, std::size_t count,
                                         DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  on_memory("reduce_scatter", Op::reduce_scatter, type, op,
            {send, bytes * static_cast<std::size_t>(size()), true, false}, {recv, bytes, false, true},
            [&](void* s, void* r) { do_reduce_scatter(s, r, count, type, op); });
}

void Communicator::staged_allgather(const void* send, void* recv, std::size_t count,
                                    DataType type) {
  const std::size_t bytes = count * size_of(type);
  on_memory("allgather", Op::allgather, type, ReduceOp::sum, {send, bytes, true, false},
            {recv, bytes * static_cast<std::size_t>(size()), false, true},
            [&](void* s, void* r) { do_allgather(s, r, count, type); });
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op) {
  STRATA_SPAN("comm", span_name("allreduce", count, type));
  ordered([&] { staged_allreduce(send, recv, count, type, op); });
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count,
                                  DataType type, ReduceOp op) {
  STRATA_SPAN("comm", span_name("reduce_scatter", count, type));
  ordered([&] { staged_reduce_scatter(send, recv, count, type, op); });
}

void Communicator::allgather(const void* send, void* recv, std::size_t count, DataType type) {
  STRATA_SPAN("comm", span_name("allgather", count, type));
  ordered([&] { staged_allgather(send, recv, count, type); });
}

void Communicator::broadcast(void* buf, std::size_t count, DataType type, int root) {
  check_peer(root, "broadcast root");
  STRATA_SPAN("comm", span_name("broadcast", count, type));
  ordered([&] {
    on_memory("broadcast", Op::broadcast, type, ReduceOp::sum,
              {buf, count * size_of(type), true, true}, {nullptr, 0, false, false},
              [&](void* b, void*) { do_broadcast(b, count, type, root); });
  });
}

void Communicator::send(const void* buf, std::size_t count, DataType type, int dest, int tag) {
  STRATA_SPAN("comm", span_name("send", count, type));
  check_peer(dest, "send to");
  STRATA_REQUIRE(dest != rank(), config, name(), " communicator: rank ", rank(),
                 " sends to itself");
  on_memory("send", Op::send, type, ReduceOp::sum, {buf, count * size_of(type), true, false},
            {nullptr, 0, false, false}, [&](void* b, void*) { do_send(b, count, type, dest, tag); });
}

void Communicator::recv(void* buf, std::size_t count, DataType type, int source, int tag) {
  STRATA_SPAN("comm", span_name("recv", count, type));
  check_peer(source, "receive from");
  STRATA_REQUIRE(source != rank(), config, name(), " communicator: rank ", rank(),
                 " receives from itself");
  on_memory("recv", Op::recv, type, ReduceOp::sum, {buf, count * size_of(type), false, true},
            {nullptr, 0, false, false}, [&](void* b, void*) { do_recv(b, count, type, source, tag); });
}

void Communicator::flush() {
  ordered([&] { do_flush(); });
}

void Communicator::barrier() {
  ordered([&] { do_barrier(); });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  std::unique_ptr<Communicator> out;
  ordered([&] { out = do_split(color, key); });
  return out;
}

Handle Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType type,
                                ReduceOp op) {
  const int lane = trace::lane();
  return submit([=] {
    trace::set_lane(lane | 1);  // the rank's communication lane
    STRATA_SPAN("comm", span_name("allreduce", count, type));
    staged_allreduce(send, recv, count, type, op);
  });
}

Handle Communicator::ireduce_scatter(const void* send, void* recv, std::size_t count,
                                     DataType type, ReduceOp op) {
  const int lane = trace::lane();
  return submit([=] {
    trace::set_lane(lane | 1);
    STRATA_SPAN("comm", span_name("reduce_scatter", count, type));
    staged_reduce_scatter(send, recv, count, type, op);
  });
}

Handle Communicator::iallgather(const void* send, void* recv, std::size_t count, DataType type) {
  const int lane = trace::lane();
  return submit([=] {
    trace::set_lane(lane | 1);
    STRATA_SPAN("comm", span_name("allgather", count, type));
    staged_allgather(send, recv, count, type);
  });
}

}  // namespace strata::comm
