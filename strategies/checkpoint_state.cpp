#include "strategies/checkpoint_state.hpp"

#include "backends/error.hpp"

#include <nlohmann/json.hpp>

namespace strata {

checkpoint::State checkpoint_state(const std::string& config, const Position& p,
                                   const Snapshot& snap, const ModelTable& model) {
  checkpoint::State s;
  s.config = config;
  nlohmann::json params = nlohmann::json::array();
  for (const auto& t : model.params) params.push_back({t.name, t.shape.dims()});
  nlohmann::json state{{"format", 2},
                       {"step", p.step},
                       {"epoch", p.epoch},
                       {"index", p.index},
                       {"optimizer_steps", snap.optimizer_steps},
                       {"parameters", params},
                       {"buffers", snap.buffers}};
  if (snap.scaler)
    state["loss_scaler"] = {{"scale", snap.scaler->scale},
                            {"good_steps", snap.scaler->good_steps},
                            {"skipped", snap.scaler->skipped}};
  s.state = state.dump();
  return s;
}

namespace {

std::string shape_text(const std::vector<std::size_t>& dims) {
  std::string s = "{";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "}";
}

// The model's flat vectors from the checkpoint's, tensor by tensor by name.
// stored: [name, shape] per tensor in the checkpoint's order.
void reorder_by_name(const std::string& file, const nlohmann::json& stored,
                     const ModelTable& model, Snapshot& s) {
  struct Piece {
    std::size_t offset = 0;
    std::vector<std::size_t> dims;
  };
  for (const auto* v : {&s.opt0, &s.opt1})
    STRATA_REQUIRE(v->empty() || v->size() == s.params.size(), data, "checkpoint '", file,
                   "': optimizer state of ", v->size(), " values for ", s.params.size(), " parameters");
  std::map<std::string, Piece> have;
  std::size_t at = 0;
  for (const auto& t : stored) {
    Piece p{at, t.at(1).get<std::vector<std::size_t>>()};
    std::size_t n = 1;
    for (std::size_t d : p.dims) {
      STRATA_REQUIRE(d > 0 && n <= s.params.size() / d, data, "checkpoint '", file,
                     "': tensor ", t.at(0).dump(), " has a shape beyond the values it holds");
      n *= d;
    }
    const std::string name = t.at(0).get<std::string>();
    STRATA_REQUIRE(have.count(name) == 0, data, "checkpoint '", file, "': tensor '", name,
                   "' is listed twice");
    STRATA_REQUIRE(at + n <= s.params.size(), data, "checkpoint '", file, "': tensor '", name,
                   "' lies beyond the ", s.params.size(), " values it holds");
    have[name] = p;
    at += n;
  }
  STRATA_REQUIRE(at == s.params.size(), data, "checkpoint '", file, "': its parameter table covers ",
                 at, " values but it holds ", s.params.size());
  std::vector<float> params, opt0, opt1;
  std::size_t used = 0;
  for (const auto& t : model.params) {
    const auto it = have.find(t.name);
    STRATA_REQUIRE(it != have.end(), config, "checkpoint '", file, "' has no tensor '", t.name,
                   "' of shape ", t.shape.str(),
                   " (it was written by another model, or before the layer was renamed)");
    STRATA_REQUIRE(it->second.dims == t.shape.dims(), config, "checkpoint '", file, "': tensor '",
                   t.name, "' has shape ", shape_text(it->second.dims), " but this model's has ",
                   t.shape.str());
    const auto first = static_cast<std::ptrdiff_t>(it->second.offset);
    const auto last = first + static_cast<std::ptrdiff_t>(t.shape.numel());
    params.insert(params.end(), s.params.begin() + first, s.params.begin() + last);
    if (!s.opt0.empty()) opt0.insert(opt0.end(), s.opt0.begin() + first, s.opt0.begin() + last);
    if (!s.opt1.empty()) opt1.insert(opt1.end(), s.opt1.begin() + first, s.opt1.begin() + last);
    ++used;
  }
  if (used != have.size())
    for (const auto& entry : have) {
      bool known = false;
      for (const auto& t : model.params) known = known || t.name == entry.first;
      STRATA_REQUIRE(known, config, "checkpoint '", file, "' holds tensor '", entry.first,
                     "', which this model does not have (a checkpoint of another model?)");
    }
  s.params = std::move(params);
  s.opt0 = std::move(opt0);
  s.opt1 = std::move(opt1);
}

}  // namespace

std::pair<Snapshot, Position> read_checkpoint(const std::string& file, const std::string& config,
                                              const ModelTable& model) {
  const auto ck = checkpoint::load(file);
  nlohmann::json have, st;
  try {
    have = nlohmann::json::parse(ck.config);
    st = nlohmann::json::parse(ck.state);
  } catch (const std::exception&) {
    STRATA_THROW(data, "checkpoint '", file, "': unreadable config or state section");
  }
  const bool format1 = !st.contains("parameters");
  STRATA_REQUIRE(!format1 || model.mlp, config, "checkpoint '", file,
                 "' was written by Strata 0.1 (checkpoint format 1, before named parameters) for "
                 "an MLP of --layers; only that MLP (--layers ",
                 have.contains("layers") ? have["layers"].dump() : "?", ") can resume it");
  const auto want = nlohmann::json::parse(config);
  for (auto it = want.begin(); it != want.end(); ++it)
    STRATA_REQUIRE(have.contains(it.key()) && have[it.key()] == it.value(), config,
                   "checkpoint '", file, "' was written with ", it.key(), " = ",
                   have.contains(it.key()) ? have[it.key()].dump() : "nothing",
                   " but this run has ", it.key(), " = ", it.value().dump());
  Snapshot s;
  s.params = ck.params;
  s.opt0 = ck.opt0;
  s.opt1 = ck.opt1;
  Position p;
  try {
    p.step = st.at("step");
    p.epoch = st.at("epoch");
    p.index = st.at("index");
    s.optimizer_steps = st.at("optimizer_steps");
    if (st.contains("loss_scaler")) {
      const auto& ls = st.at("loss_scaler");
      s.scaler = DynamicLossScaler::State{ls.at("scale").get<double>(),
                                          ls.at("good_steps").get<std::int64_t>(),
                                          ls.at("skipped").get<std::int64_t>()};
    }
    if (format1) {
      // Dropout counters by position: the MLP's buffers are exactly those.
      const auto calls = st.at("dropout_calls").get<std::vector<std::uint64_t>>();
      STRATA_REQUIRE(calls.size() == model.buffers.size(), config, "checkpoint '", file, "': ",
                     calls.size(), " dropout layers, this model has ", model.buffers.size());
      for (std::size_t k = 0; k < calls.size(); ++k)
        s.buffers[model.buffers[k].name] = {static_cast<double>(calls[k])};
    } else {
      s.buffers = st.at("buffers").get<std::map<std::string, std::vector<double>>>();
      reorder_by_name(file, st.at("parameters"), model, s);
    }
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(data, "checkpoint '", file, "': bad state section (", e.what(), ")");
  }
  std::size_t n = 0;
  for (const auto& t : model.params) n += t.shape.numel();
  for (const auto* v : {&s.params, &s.opt0, &s.opt1})
    STRATA_REQUIRE(v->size() == n || (v != &s.params && v->empty()), config, "checkpoint '", file,
                   "': ", v == &s.params ? "params" : "optimizer state", " has ", v->size(),
                   " values but this model needs ", n, " (a checkpoint of another model?)");
  for (const auto& b : model.buffers) {
    const auto it = s.buffers.find(b.name);
    STRATA_REQUIRE(it != s.buffers.end(), config, "checkpoint '", file, "' has no buffer '", b.name,
                   "' (it was written by another model, or before the layer was renamed)");
    STRATA_REQUIRE(it->second.size() == b.size, config, "checkpoint '", file, "': buffer '",
                   b.name, "' has ", it->second.size(), " values, this model's ", b.size);
  }
  STRATA_REQUIRE(s.buffers.size() == model.buffers.size(), config, "checkpoint '", file, "' holds ",
                 s.buffers.size(), " buffers, this model has ", model.buffers.size());
  return {s, p};
}

}  // namespace strata
