#include "planner/profile.hpp"

#include "backends/error.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace strata::planner {

namespace {
using json = nlohmann::json;

// j[key] (under `where`, for the message) as a number > 0, or >= 0 when
// zero may be (a fitted latency can be 0).
double number(const json& j, const std::string& where, const char* key, const std::string& file,
              bool zero_too) {
  STRATA_REQUIRE(j.is_object() && j.contains(key), config, file, ": the profile has no '", where,
                 key, "' (", "see planner/profile.hpp for the fields)");
  const json& v = j.at(key);
  STRATA_REQUIRE(v.is_number() && (v.get<double>() > 0 || (zero_too && v.get<double>() == 0)),
                 config, file, ": '", where, key, "' must be a ",
                 zero_too ? "number >= 0" : "positive number", ", got ", v.dump());
  return v.get<double>();
}

double positive(const json& j, const std::string& where, const char* key, const std::string& file) {
  return number(j, where, key, file, false);
}

// Calls f(entry, "key[i].") for every entry of the optional list j[key].
template <class F>
void each_entry(const json& j, const char* key, const std::string& file, const F& f) {
  if (!j.contains(key)) return;
  const json& list = j.at(key);
  STRATA_REQUIRE(list.is_array(), config, file, ": '", key, "' must be a list");
  for (std::size_t i = 0; i < list.size(); ++i)
    f(list[i], std::string(key) + "[" + std::to_string(i) + "].");
}

std::string string_field(const json& e, const std::string& where, const char* key, const std::string& file) {
  STRATA_REQUIRE(e.contains(key) && e.at(key).is_string(), config, file, ": ", where, key,
                 " must be a string");
  return e.at(key).get<std::string>();
}

OptimizerKind optimizer(const json& e, const std::string& where, const std::string& file) {
  STRATA_REQUIRE(e.contains("optimizer") && e.at("optimizer").is_string(), config, file, ": ",
                 where, "optimizer must be a string (sgd, adam or adamw)");
  try {
    return parse_optimizer(e.at("optimizer").get<std::string>());
  } catch (const Error& err) {
    STRATA_THROW(config, file, ": ", where, "optimizer: ", err.message());
  }
}

const json& object(const json& j, const char* key, const std::string& file) {
  STRATA_REQUIRE(j.contains(key) && j.at(key).is_object(), config, file,
                 ": the profile has no object '", key, "' (see planner/profile.hpp)");
  return j.at(key);
}

Link link(const json& j, const char* key, const std::string& file) {
  const json& o = object(j, key, file);
  const std::string where = std::string(key) + ".";
  return {number(o, where, "latency", file, true), positive(o, where, "bandwidth", file)};
}
}  // namespace

MachineProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  STRATA_REQUIRE(in.good(), data, path, ": cannot read the machine profile");
  std::stringstream text;
  text << in.rdbuf();
  return parse_profile(text.str(), path);
}

MachineProfile parse_profile(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    STRATA_THROW(data, path, ": not a JSON machine profile: ", e.what());
  }
  STRATA_REQUIRE(j.is_object() && j.value("format", "") == "strata-machine-profile", data, path,
                 ": not a machine profile (\"format\": \"strata-machine-profile\" is missing)");
  STRATA_REQUIRE(j.value("version", 0) == 1, data, path, ": profile version ",
                 j.value("version", 0), " (this Strata reads version 1)");
  MachineProfile p;
  p.name = j.value("name", path);
  p.source = j.value("source", "");
  const std::string kind = j.value("kind", "");
  STRATA_REQUIRE(kind == "cpu" || kind == "gpu", config, path,
                 ": 'kind' must be \"cpu\" or \"gpu\", got \"", kind, "\"");
  p.gpu = kind == "gpu";
  p.nodes = static_cast<int>(positive(j, "", "nodes", path));
  p.devices_per_node = static_cast<int>(positive(j, "", "devices_per_node", path));
  p.memory_per_node = positive(j, "", "memory_per_node", path);
  const json& g = object(j, "gemm_flops", path);
  p.gemm_flops_fp32 = positive(g, "gemm_flops.", "fp32", path);
  p.gemm_flops_16 = positive(g, "gemm_flops.", "bf16", path);
  p.gemm_half_flops = positive(j, "", "gemm_half_flops", path);
  p.memory_bandwidth = positive(j, "", "memory_bandwidth", path);
  p.launch = positive(j, "", "launch", path);
  p.intra_node = link(j, "intra_node", path);
  p.inter_node = link(j, "inter_node", path);
  if (j.contains("reduce_scatter_allgather"))
    p.reduce_scatter_allgather = link(j, "reduce_scatter_allgather", path);
  STRATA_REQUIRE(!j.contains("measured_gemms"), config, path,
                 ": 'measured_gemms' is from an older strata-plan calibrate (GEMMs, not "
                 "layers): calibrate again");
  each_entry(j, "measured_layers", path, [&](const json& e, const std::string& where) {
    MeasuredLayer m;
    m.layer = string_field(e, where, "layer", path);
    m.samples = static_cast<std::size_t>(positive(e, where, "samples", path));
    m.threads = static_cast<int>(positive(e, where, "threads", path));
    m.ranks = static_cast<int>(positive(e, where, "ranks", path));
    m.forward = positive(e, where, "forward", path);
    m.backward = positive(e, where, "backward", path);
    p.measured_layers.push_back(m);
  });
  each_entry(j, "measured_updates", path, [&](const json& e, const std::string& where) {
    MeasuredUpdate u;
    u.optimizer = optimizer(e, where, path);
    u.threads = static_cast<int>(positive(e, where, "threads", path));
    u.ranks = static_cast<int>(positive(e, where, "ranks", path));
    u.bandwidth = positive(e, where, "bandwidth", path);
    p.measured_updates.push_back(u);
  });
  each_entry(j, "measured_steps", path, [&](const json& e, const std::string& where) {
    MeasuredStep m;
    m.model = string_field(e, where, "model", path);
    m.optimizer = optimizer(e, where, path);
    m.batch = static_cast<std::size_t>(positive(e, where, "batch", path));
    m.threads = static_cast<int>(positive(e, where, "threads", path));
    m.ranks = static_cast<int>(positive(e, where, "ranks", path));
    m.step = positive(e, where, "step", path);
    p.measured_steps.push_back(m);
  });
  return p;
}

const MeasuredStep* MachineProfile::measured_step(const std::string& model, std::size_t batch,
                                                  OptimizerKind optimizer, int threads,
                                                  int ranks) const {
  for (const MeasuredStep& m : measured_steps)
    if (m.model == model && m.batch == batch && m.optimizer == optimizer && m.threads == threads &&
        m.ranks == ranks)
      return &m;
  return nullptr;
}

double MachineProfile::update_bandwidth(OptimizerKind optimizer, int threads, int ranks) const {
  const MeasuredUpdate* best = nullptr;
  for (const MeasuredUpdate& u : measured_updates)
    if (u.optimizer == optimizer && u.threads == threads && u.ranks <= ranks && (!best || u.ranks > best->ranks)) best = &u;
  return best ? best->bandwidth : 0.0;
}

const MeasuredLayer* MachineProfile::measured(const std::string& layer, std::size_t samples,
                                              int threads, int ranks) const {
  const MeasuredLayer* best = nullptr;
  for (const MeasuredLayer& m : measured_layers)
    if (m.samples == samples && m.threads == threads && m.ranks <= ranks && m.layer == layer &&
        (!best || m.ranks > best->ranks))
      best = &m;
  return best;
}

std::string profile_json(const MachineProfile& p) {
  json j = {{"format", "strata-machine-profile"},
            {"version", 1},
            {"name", p.name},
            {"source", p.source},
            {"kind", p.gpu ? "gpu" : "cpu"},
            {"nodes", p.nodes},
            {"devices_per_node", p.devices_per_node},
            {"memory_per_node", p.memory_per_node},
            {"gemm_flops", {{"fp32", p.gemm_flops_fp32}, {"bf16", p.gemm_flops_16}}},
            {"gemm_half_flops", p.gemm_half_flops},
            {"memory_bandwidth", p.memory_bandwidth},
            {"launch", p.launch},
            {"intra_node", {{"latency", p.intra_node.latency}, {"bandwidth", p.intra_node.bandwidth}}},
            {"inter_node", {{"latency", p.inter_node.latency}, {"bandwidth", p.inter_node.bandwidth}}}};
  if (p.reduce_scatter_allgather.bandwidth > 0)
    j["reduce_scatter_allgather"] = {{"latency", p.reduce_scatter_allgather.latency},
                                     {"bandwidth", p.reduce_scatter_allgather.bandwidth}};
  if (!p.measured_layers.empty()) {
    json list = json::array();
    for (const MeasuredLayer& m : p.measured_layers)
      list.push_back({{"layer", m.layer}, {"samples", m.samples}, {"threads", m.threads},
                      {"ranks", m.ranks}, {"forward", m.forward}, {"backward", m.backward}});
    j["measured_layers"] = list;
  }
  if (!p.measured_updates.empty()) {
    json list = json::array();
    for (const MeasuredUpdate& u : p.measured_updates)
      list.push_back({{"optimizer", to_string(u.optimizer)}, {"threads", u.threads}, {"ranks", u.ranks},
                      {"bandwidth", u.bandwidth}});
    j["measured_updates"] = list;
  }
  if (!p.measured_steps.empty()) {
    json list = json::array();
    for (const MeasuredStep& m : p.measured_steps)
      list.push_back({{"model", m.model}, {"batch", m.batch}, {"optimizer", to_string(m.optimizer)},
                      {"threads", m.threads}, {"ranks", m.ranks}, {"step", m.step}});
    j["measured_steps"] = list;
  }
  return j.dump(2) + "\n";
}

void save_profile(const MachineProfile& p, const std::string& path) {
  std::ofstream out(path);
  out << profile_json(p);
  STRATA_REQUIRE(out.good(), runtime, path, ": cannot write the machine profile");
}

}  // namespace strata::planner
