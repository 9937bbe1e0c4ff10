// strata-plan: which parallel layout to train a model with. For a model, a
// global batch and a rank count it predicts the step time and the memory
// per rank of every layout (dp x pp x tp, micro-batches, schedule, ZeRO-1,
// recomputation) on a machine profile (planner/profile.hpp), and prints them
// ranked, with the reason each rejected layout fails.
//
//   strata-plan --model models/gpt-mini.toml --batch 32 --ranks 8 --profile P
//   strata-plan --layers 784,1024,1024,10 --batch 256 --ranks 4 --profile P --top 5
//   strata-plan --layers 784,1024,1024,10 --batch 256 --ranks 2 --profile P --pp 2 --micro-batches 4
//                                                    (one layout's prediction)
//   strata-plan calibrate --output machine.json      (this machine's profile, about a minute)
//
// Nothing runs: the layers are built without memory (planner/cost_model.hpp).
#include "apps/common/app_main.hpp"
#include "apps/common/cli.hpp"
#include "backends/clock.hpp"
#include "backends/runtime.hpp"
#include "layers/mlp.hpp"
#include "planner/calibrate.hpp"
#include "planner/search.hpp"

#include <CLI/CLI.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace strata::app {
namespace {

struct PlanConfig {
  std::string model_file, layers, profile, precision = "fp32", optimizer = "adam", loss = "ce";
  std::size_t batch = 0, top = 10;
  int ranks = 1, ranks_per_node = 0;
  double budget_mb = 0;
  bool all = false, no_recompute = false, no_sequence = false;
  // One layout (any of these given): its prediction alone.
  int dp = 0, pp = 1, tp = 1, zero = 0;
  std::size_t micro = 0;  // 0: planner::default_micro_batches(pp), as strata-train
  std::string schedule = "1f1b";
  bool recompute = false, sequence = false, one = false;
  // strata-plan calibrate
  bool calibrate = false;
  std::string output = "strata-machine.json";
};

bool parse(const std::vector<std::string>& args, PlanConfig& c) {
  CLI::App app{"strata-plan: predict the step time and memory per rank of every parallel layout "
               "(dp x pp x tp, micro-batches, schedule, ZeRO-1, recomputation) of a model on a "
               "machine profile, and rank them (docs/planner.md).\n"
               "Exit codes: 0 done, 2 bad options or configuration (or no layout fits), "
               "3 bad input data.",
               "strata-plan"};
  auto* model = app.add_option("--model", c.model_file, "a model file (TOML)");
  auto* layers = app.add_option("--layers", c.layers, "or an MLP's widths, input first (784,256,10)");
  model->excludes(layers);
  auto* batch = app.add_option("--batch", c.batch, "the global batch (samples per step)")
      ->check(whole_number(1));
  auto* ranks = app.add_option("--ranks", c.ranks, "ranks in all (processes x thread ranks, or GPUs)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--ranks-per-node", c.ranks_per_node,
                 "ranks on one node (default: one per device of a GPU profile; all the ranks "
                 "on one node of a CPU profile)")
      ->check(CLI::Range(1, 1 << 20));
  auto* profile = app.add_option(
      "--profile", c.profile,
      "the machine profile (JSON, planner/profile.hpp; `strata-plan calibrate` writes this "
      "machine's; planner/profiles/ has clusters)");
  app.add_option("--memory-budget-mb", c.budget_mb,
                 "MiB per rank a layout may use (default: the node's memory / ranks per node)")
      ->check(CLI::PositiveNumber);
  app.add_option("--precision", c.precision, "fp32, bf16 or fp16")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw (its state's memory)")
      ->capture_default_str();
  app.add_option("--loss", c.loss, "ce or mse (ce splits a language model's head by vocabulary)")
      ->capture_default_str();
  app.add_option("--top", c.top, "layouts to print")->capture_default_str()->check(whole_number(1));
  app.add_flag("--all", c.all, "print every layout, the rejected ones with their reasons");
  app.add_flag("--no-recompute", c.no_recompute, "leave recomputation out of the search");
  app.add_flag("--no-sequence-parallel", c.no_sequence,
               "leave sequence parallelism out of the search");
  // One layout.
  std::vector<CLI::Option*> layout{
      app.add_option("--dp", c.dp, "predict one layout: data-parallel size (default: the rest)")
          ->check(CLI::Range(1, 1 << 20)),
      app.add_option("--pp", c.pp, "predict one layout: pipeline stages")->check(CLI::Range(1, 1 << 20)),
      app.add_option("--tp", c.tp, "predict one layout: tensor-parallel size")->check(CLI::Range(1, 1 << 20)),
      app.add_option("--micro-batches", c.micro, "predict one layout: micro-batches per step (default: 2 x stages with a "
                     "pipeline, else 1, as strata-train)")
          ->check(whole_number(1)),
      app.add_option("--schedule", c.schedule, "predict one layout: 1f1b or gpipe"),
      app.add_option("--zero", c.zero, "predict one layout: its ZeRO stage (0-3)")->check(CLI::Range(0, 3)),
      app.add_flag("--recompute", c.recompute, "predict one layout: with recomputation"),
      app.add_flag("--sequence-parallel", c.sequence,
                   "predict one layout: with sequence parallelism (needs --tp 2 or more)"),
      app.add_flag("--only", "predict the one layout these options give (dp: the ranks left)")};
  auto* cal = app.add_subcommand(
      "calibrate", "measure this machine (a few seconds) and write its profile; with a model "
                   "(--model or --layers, --batch, --ranks, given after `calibrate` too) also "
                   "time its layers as its layouts on that many ranks (and one rank) run them, "
                   "its optimizer's update and its whole data-parallel steps, which the plans "
                   "then use");
  cal->add_option("--output", c.output, "the profile file to write")->capture_default_str();
  cal->fallthrough();  // the model's options after `calibrate`
  if (!parse_cli(app, args)) return false;
  c.calibrate = cal->parsed();
  if (c.calibrate) {
    STRATA_REQUIRE((c.model_file.empty() && c.layers.empty()) ||
                       (batch->count() > 0 && ranks->count() > 0),
                   config, "strata-plan calibrate with a model needs --batch and --ranks (the "
                   "layouts whose GEMMs it times)");
    return true;
  }
  for (auto* o : layout) c.one = c.one || o->count() > 0;
  STRATA_REQUIRE(!c.model_file.empty() || !c.layers.empty(), config,
                 "give the model: --model FILE or --layers WIDTHS");
  STRATA_REQUIRE(batch->count() > 0 && ranks->count() > 0 && profile->count() > 0, config,
                 "give --batch, --ranks and --profile (or run `strata-plan calibrate`)");
  return true;
}

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// The table's header; the parts of a step in ms ("other": the work the
// profile's measured steps add, 0 without them).
void print_header(const char* first) {
  std::printf("%4s  %-48s %12s %10s %10s   %8s %8s %8s %8s %8s %8s %8s\n", first, "layout",
              "samples/s", "step ms", "MiB/rank", "compute", "bubble", "tp comm", "pp comm",
              "dp comm", "optim", "other");
}

void print_row(std::size_t rank, const planner::Prediction& p) {
  std::printf("%4zu  %-48s %12.1f %10.2f %10s   %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", rank,
              p.layout.str().c_str(), p.samples_per_s, p.step * 1e3, mib(p.memory.total()).c_str(),
              p.compute * 1e3, p.bubble * 1e3, p.tensor_comm * 1e3, p.pipeline_comm * 1e3,
              p.data_comm * 1e3, p.optimizer * 1e3, p.other * 1e3);
}

planner::PlanRequest request(const PlanConfig& c) {
  planner::PlanRequest r;
  r.model = c.model_file.empty() ? mlp_model({parse_widths(c.layers)}) : read_model_file(c.model_file);
  r.loss = parse_loss(c.loss);
  r.optimizer.kind = parse_optimizer(c.optimizer);
  r.precision = parse_precision(c.precision);
  r.batch = c.batch;
  r.ranks = c.ranks;
  r.ranks_per_node = c.ranks_per_node;
  r.memory_budget = static_cast<std::size_t>(c.budget_mb * 1024 * 1024);
  return r;
}

int calibrate(const PlanConfig& c) {
  std::fprintf(stderr, "strata-plan calibrate: measuring this machine\n");
  const auto log = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
  planner::MachineProfile p = planner::calibrate(log);
  if (!c.model_file.empty() || !c.layers.empty()) {
    // The layers as the layouts of --ranks run them, and as one rank with
    // every core does (the layout to compare with).
    log("the model's layers, as its layouts on " + std::to_string(c.ranks) + " ranks run them");
    planner::PlanRequest r = request(c);
    planner::measure_model(p, r, log);
    if (r.ranks > 1) {
      r.ranks = 1;
      r.ranks_per_node = 0;
      planner::measure_model(p, r, log);
    }
  }
  planner::save_profile(p, c.output);
  std::fprintf(stderr, "strata-plan calibrate: wrote %s\n", c.output.c_str());
  return exit_ok;
}

int run(const PlanConfig& c) {
  if (c.calibrate) return calibrate(c);
  const auto t0 = Clock::now();
  const planner::PlanRequest r = request(c);
  const planner::MachineProfile profile = planner::load_profile(c.profile);
  const planner::CostModel model(r, profile);
  planner::SearchOptions o;
  o.recompute = !c.no_recompute;
  o.sequence = !c.no_sequence;
  if (c.one) {
    planner::Layout l;
    STRATA_REQUIRE(c.ranks % (c.pp * c.tp) == 0, config, "--pp ", c.pp, " x --tp ", c.tp,
                   " does not divide --ranks ", c.ranks);
    l.mesh = {c.dp > 0 ? c.dp : c.ranks / (c.pp * c.tp), c.pp, c.tp};
    l.micro_batches = c.micro > 0 ? c.micro : planner::default_micro_batches(c.pp);
    l.schedule = parse_schedule(c.schedule);
    l.zero = c.zero;
    l.recompute = c.recompute;
    l.sequence_parallel = c.sequence;
    STRATA_REQUIRE(!c.sequence || c.tp > 1, config,
                   "--sequence-parallel shards the sequence over the tensor-parallel ranks: give "
                   "--tp 2 or more with it");
    const planner::Prediction p = model.predict(l);
    STRATA_REQUIRE(p.rejected.empty(), config, l.str(), ": ", p.rejected);
    print_header("");
    print_row(1, p);
    return exit_ok;
  }
  const std::vector<planner::Prediction> plans = planner::search(model, c.ranks, c.batch, o);
  const double took = seconds_since(t0);
  std::size_t fits = 0;
  for (const auto& p : plans) fits += p.rejected.empty() ? 1 : 0;
  std::printf("# strata-plan: %s, global batch %zu, %d ranks (%d per node) on %s, %s, budget %s "
              "MiB per rank\n# %zu layouts, %zu fit; %.2f s\n",
              r.model.source.c_str(), c.batch, c.ranks, model.ranks_per_node(),
              profile.name.c_str(), c.precision.c_str(), mib(model.memory_budget()).c_str(),
              plans.size(), fits, took);
  print_header("rank");
  for (std::size_t i = 0; i < plans.size() && (c.all || i < c.top); ++i) {
    if (!plans[i].rejected.empty()) break;
    print_row(i + 1, plans[i]);
  }
  // The rejected: every one with --all, else one line per reason.
  std::map<std::string, std::pair<std::size_t, std::string>> reasons;
  for (const auto& p : plans) {
    if (p.rejected.empty()) continue;
    if (c.all) {
      std::printf("      %-48s rejected: %s\n", p.layout.str().c_str(), p.rejected.c_str());
      continue;
    }
    // One line per kind of reason: the message with its numbers left out.
    std::string key;
    for (const char ch : p.rejected)
      if (!std::isdigit(static_cast<unsigned char>(ch))) key += ch;
      else if (key.empty() || key.back() != '#') key += '#';
    auto& entry = reasons[key];
    if (entry.first++ == 0) entry.second = p.layout.str() + ": " + p.rejected;
  }
  for (const auto& [key, entry] : reasons)
    std::printf("# rejected %zu layout(s), e.g. %s\n", entry.first, entry.second.c_str());
  if (fits == 0) {  // name the layout closest to fitting: the least memory of those built
    const planner::Prediction* least = plans.empty() ? nullptr : &plans.front();
    for (const auto& p : plans)
      if (p.memory.total() > 0 &&
          (least->memory.total() == 0 || p.memory.total() < least->memory.total()))
        least = &p;
    STRATA_THROW(config, "no layout of ", c.ranks, " ranks fits",
                 least ? "; the one that needs the least memory is " + least->layout.str() + ": " +
                             least->rejected
                       : std::string());
  }
  std::printf("# best: %s, %.1f samples/s predicted\n", plans.front().layout.str().c_str(),
              plans.front().samples_per_s);
  return exit_ok;
}

}  // namespace
}  // namespace strata::app

int main(int argc, char** argv) {
  using namespace strata::app;
  return program_main<PlanConfig>(
      "strata-plan", argc, argv,
      [](const std::vector<std::string>& a, PlanConfig& c) { return parse(a, c); },
      [](const PlanConfig& c) {  // calibration measures with every core
        return c.calibrate ? static_cast<int>(std::thread::hardware_concurrency()) : 0;
      },
      [](const PlanConfig& c) { return run(c); });
}
