#include "planner/profile.hpp"

#include "backends/error.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace strata::planner {

namespace {
using json = nlohmann::json;

// j[key] (under `where`, for the message) as a positive number.
double positive(const json& j, const std::string& where, const char* key, const std::string& file) {
  STRATA_REQUIRE(j.is_object() && j.contains(key), config, file, ": the profile has no '", where,
                 key, "' (", "see planner/profile.hpp for the fields)");
  const json& v = j.at(key);
  STRATA_REQUIRE(v.is_number() && v.get<double>() > 0, config, file, ": '", where, key,
                 "' must be a positive number, got ", v.dump());
  return v.get<double>();
}

const json& object(const json& j, const char* key, const std::string& file) {
  STRATA_REQUIRE(j.contains(key) && j.at(key).is_object(), config, file,
                 ": the profile has no object '", key, "' (see planner/profile.hpp)");
  return j.at(key);
}

Link link(const json& j, const char* key, const std::string& file) {
  const json& o = object(j, key, file);
  const std::string where = std::string(key) + ".";
  return {positive(o, where, "latency", file), positive(o, where, "bandwidth", file)};
}
}  // namespace

MachineProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  STRATA_REQUIRE(in.good(), data, path, ": cannot read the machine profile");
  json j;
  try {
    j = json::parse(in, nullptr, true, /*ignore_comments=*/true);
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
  return p;
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
  return j.dump(2) + "\n";
}

void save_profile(const MachineProfile& p, const std::string& path) {
  std::ofstream out(path);
  out << profile_json(p);
  STRATA_REQUIRE(out.good(), runtime, path, ": cannot write the machine profile");
}

}  // namespace strata::planner
