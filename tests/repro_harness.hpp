// Runs for the --reproducible tests (thread ranks and MPI ranks): training
// through the Engine, as strata-train does, and a comparison by bits.
#pragma once

#include "dp_harness.hpp"
#include "strategies/checkpoint.hpp"
#include "strategies/engine.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace strata::test {

struct Bits {
  std::vector<double> losses;
  std::vector<float> params, opt0, opt1;  // the checkpoint's payload
  std::string state;  // and its state (buffers: running statistics, counters)
};

// "" when a and b are the same bits, else what differs first.
inline std::string compare_bits(const Bits& a, const Bits& b) {
  if (a.losses.size() != b.losses.size()) return "numbers of steps differ";
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    if (std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)) != 0) {
      char buf[120];
      std::snprintf(buf, sizeof buf, "loss of step %zu: %.17g vs %.17g", i + 1, a.losses[i], b.losses[i]);
      return buf;
    }
  const std::pair<const char*, const std::vector<float>*> parts[] = {
      {"parameters", &a.params}, {"optimizer state 0", &a.opt0}, {"optimizer state 1", &a.opt1}};
  const std::vector<float>* other[] = {&b.params, &b.opt0, &b.opt1};
  for (int k = 0; k < 3; ++k) {
    const auto& x = *parts[k].second;
    const auto& y = *other[k];
    if (x.size() != y.size()) return std::string(parts[k].first) + ": sizes differ";
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s[%zu]: %.9g vs %.9g", parts[k].first, i, double(x[i]),
                      double(y[i]));
        return buf;
      }
  }
  if (a.state != b.state) return "checkpoint state (buffers) differs: " + a.state + " vs " + b.state;
  return "";
}

// c through make_engine on comm, `o` giving the strategy; the global
// batches of train_single's order (shuffled with c.seed, whole batches).
// Returns rank 0's view (losses are the same on every rank; the checkpoint
// holds the whole model in single-rank layout whatever the strategy).
// resume: a checkpoint to start from (its steps are skipped; losses are
// those of the steps after it).
inline Bits train_engine(Context& ctx, comm::Communicator& comm, const DpConfig& c, EngineOptions o,
                  const std::string& dir, const std::string& resume = "") {
  const auto d = test::dp_data(c);
  o.model = test::model_of(c);
  o.seed = c.seed;
  o.optimizer = c.optimizer;
  o.recompute = c.recompute;
  auto engine = make_engine(ctx, comm, o, c.batch);
  data::BatchLoader<float> loader(d, c.batch, true, c.seed, true, engine->data_rank(),
                                  engine->data_ranks());
  std::size_t first = 0;
  if (!resume.empty()) {
    const auto [snap, pos] = read_checkpoint(resume, "{}", engine->table());
    engine->restore(snap);
    first = pos.step;
  }
  Bits r;
  std::vector<data::Batch<float>> micro(1);
  for (std::size_t s = 0, epoch = 0; s < c.steps;) {
    loader.seek(epoch++, 0);
    while (s < c.steps && loader.next(micro[0])) {
      if (s++ < first) continue;
      r.losses.push_back(engine->step(micro, loader.global_size()));
    }
  }
  const std::string file = engine->save({dir, 1, "{}"}, Position{c.steps, 0, 0});
  if (comm.rank() == 0) {
    const checkpoint::State st = checkpoint::load(file);
    r.params = st.params;
    r.opt0 = st.opt0;
    r.opt1 = st.opt1;
    r.state = st.state;
  }
  return r;
}

// A fresh checkpoint directory that every rank of comm names alike (rank
// 0's process id, broadcast).
inline std::string repro_dir(comm::Communicator& comm, const std::string& tag) {
  std::int64_t pid = ::getpid();
  comm.broadcast(&pid, 1, comm::DataType::i64, 0);
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("strata-test-repro-" + std::to_string(pid) + "-" + tag))
                              .string();
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
  comm.barrier();
  return dir;
}

}  // namespace strata::test
