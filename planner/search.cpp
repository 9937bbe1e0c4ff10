#include "planner/search.hpp"

#include <algorithm>
#include <set>
#include <tuple>

namespace strata::planner {

std::vector<std::size_t> micro_batch_counts(int pp, std::size_t shard, std::size_t most) {
  // Without a pipeline, micro-batches only save activation memory (the step
  // accumulates them): tried too, for layouts that need it to fit.
  const std::size_t top = std::min(shard, most);
  std::set<std::size_t> counts;
  for (std::size_t m = 1; m <= top; m *= 2) counts.insert(m);
  for (std::size_t k = 1; k * static_cast<std::size_t>(pp) <= top; k *= 2)
    counts.insert(k * static_cast<std::size_t>(pp));
  return {counts.begin(), counts.end()};
}

std::vector<Layout> layouts(int ranks, std::size_t batch, const SearchOptions& options) {
  std::vector<Layout> all;
  for (int tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp) continue;
    for (int pp = 1; pp <= ranks / tp; ++pp) {
      if ((ranks / tp) % pp) continue;
      const int dp = ranks / tp / pp;
      const std::size_t shard = (batch + static_cast<std::size_t>(dp) - 1) / static_cast<std::size_t>(dp);
      for (const std::size_t M : micro_batch_counts(pp, std::max<std::size_t>(shard, 1),
                                                    options.max_micro_batches))
        for (const Schedule schedule : {Schedule::one_f_one_b, Schedule::gpipe}) {
          if (schedule == Schedule::gpipe && (pp == 1 || !options.gpipe)) continue;
          for (int zero = 0; zero <= (options.zero && dp > 1 ? 3 : 0); ++zero)
            for (int rc = 0; rc <= (options.recompute ? 1 : 0); ++rc)
              for (int sp = 0; sp <= (options.sequence && tp > 1 ? 1 : 0); ++sp) {
                Layout l;
                l.mesh = {dp, pp, tp};
                l.micro_batches = M;
                l.schedule = schedule;
                l.zero = zero;
                l.recompute = rc != 0;
                l.sequence_parallel = sp != 0;
                all.push_back(l);
              }
        }
    }
  }
  return all;
}

std::vector<StageSet> stage_sets(const CostModel& model, int ranks, std::size_t batch,
                                 const SearchOptions& options) {
  std::set<StageSet> sets;
  for (const Layout& l : layouts(ranks, batch, options))
    sets.insert({l.mesh.tp, l.sequence_parallel, model.micro_batch_samples(l)});
  return {sets.begin(), sets.end()};
}

std::vector<Prediction> search(const CostModel& model, int ranks, std::size_t batch,
                               const SearchOptions& options) {
  std::vector<Prediction> all;
  for (const Layout& l : layouts(ranks, batch, options)) all.push_back(model.predict(l));
  // Without a pipeline, micro-batches only save memory: where the same
  // layout fits in one, more are not a plan (the model charges no cost per
  // micro-batch, and on a cache they can look faster than they run).
  const auto unpiped = [](const Layout& l) {
    return std::make_tuple(l.mesh.dp, l.mesh.tp, l.zero, l.recompute, l.sequence_parallel);
  };
  std::set<decltype(unpiped(Layout{}))> fit_in_one;
  for (const Prediction& p : all)
    if (p.layout.mesh.pp == 1 && p.layout.micro_batches == 1 && p.rejected.empty())
      fit_in_one.insert(unpiped(p.layout));
  for (Prediction& p : all)
    if (p.layout.mesh.pp == 1 && p.layout.micro_batches > 1 && p.rejected.empty() &&
        fit_in_one.count(unpiped(p.layout)))
      p.rejected = "micro-batches without a pipeline only save memory, and this layout fits in one";
  std::stable_sort(all.begin(), all.end(), [](const Prediction& a, const Prediction& b) {
    if (a.rejected.empty() != b.rejected.empty()) return a.rejected.empty();
    if (!a.rejected.empty()) return false;
    if (a.samples_per_s != b.samples_per_s) return a.samples_per_s > b.samples_per_s;
    return a.memory.total() < b.memory.total();
  });
  // The layouts predicted within options.tie of the fastest are a tie: the
  // one with the fewest synchronizations per step goes first (each costs a
  // wait for the slowest rank that the model does not charge).
  std::size_t tied = 0;
  while (tied < all.size() && all[tied].rejected.empty() &&
         all[tied].samples_per_s >= (1 - options.tie) * all[0].samples_per_s)
    ++tied;
  std::stable_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(tied),
                   [](const Prediction& a, const Prediction& b) { return a.collectives < b.collectives; });
  return all;
}

}  // namespace strata::planner
