#include "layers/model_spec.hpp"

// Host-only code (no Kokkos): in CUDA builds the host compiler compiles it
// (CMakeLists.txt), since nvcc cannot parse toml++.
#include "backends/host_error.hpp"

// CUDA's and HIP's headers define __noinline__ as a macro, which toml++'s
// __has_attribute(__noinline__) test cannot take: hidden while toml++ is read.
#pragma push_macro("__noinline__")
#undef __noinline__
#include <toml++/toml.h>
#pragma pop_macro("__noinline__")

#include <fstream>
#include <sstream>

namespace strata {

// ------------------------------------------------------------------ LayerArgs
void LayerArgs::set(const std::string& key, Value v, std::size_t line) {
  values_[key] = std::move(v);
  lines_[key] = line;
  used_[key] = false;
}

std::string LayerArgs::at(const std::string& key) const {
  std::string where = where_;
  const auto it = lines_.find(key);
  if (it != lines_.end() && it->second > 0) {
    const auto colon = where.rfind(':');  // the key's own line
    where = (colon == std::string::npos ? where : where.substr(0, colon)) + ":" +
            std::to_string(it->second);
  }
  return where + ": layer type '" + type_ + "', key '" + key + "'";
}

const LayerArgs::Value* LayerArgs::find(const std::string& key) {
  const auto it = values_.find(key);
  if (it == values_.end()) return nullptr;
  used_[key] = true;
  return &it->second;
}

std::size_t LayerArgs::positive(const std::string& key) {
  const Value* v = find(key);
  if (v == nullptr) {
    std::string others;  // a misspelt key is likely among them
    for (const auto& [k, used] : used_)
      if (!used) others += (others.empty() ? "" : ", ") + k;
    STRATA_THROW(config, where_, ": layer type '", type_, "' needs the key '", key, "'",
                 others.empty() ? std::string() : " (keys given: " + others + ")");
  }
  const auto* i = std::get_if<std::int64_t>(v);
  STRATA_REQUIRE(i != nullptr && *i > 0, config, at(key), ": expected a positive integer");
  return static_cast<std::size_t>(*i);
}

std::size_t LayerArgs::positive(const std::string& key, std::size_t fallback) {
  return has(key) ? positive(key) : fallback;
}

double LayerArgs::number(const std::string& key, double fallback) {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  if (const auto* i = std::get_if<std::int64_t>(v)) return static_cast<double>(*i);
  const auto* d = std::get_if<double>(v);
  STRATA_REQUIRE(d != nullptr, config, at(key), ": expected a number");
  return *d;
}

bool LayerArgs::flag(const std::string& key, bool fallback) {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  const auto* b = std::get_if<bool>(v);
  STRATA_REQUIRE(b != nullptr, config, at(key), ": expected true or false");
  return *b;
}

std::string LayerArgs::text(const std::string& key, const std::string& fallback) {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  const auto* s = std::get_if<std::string>(v);
  STRATA_REQUIRE(s != nullptr, config, at(key), ": expected a string");
  return *s;
}

std::array<std::size_t, 2> LayerArgs::pair(const std::string& key,
                                           std::array<std::size_t, 2> fallback,
                                           std::size_t least) {
  const Value* v = find(key);
  if (v == nullptr) return fallback;
  const std::string expected = "expected an integer >= " + std::to_string(least) +
                               " or an array of two such integers [height, width]";
  Ints values;
  if (const auto* i = std::get_if<std::int64_t>(v)) values = {*i, *i};
  else if (const auto* a = std::get_if<Ints>(v)) values = *a;
  STRATA_REQUIRE(values.size() == 2, config, at(key), ": ", expected);
  for (const auto x : values)
    STRATA_REQUIRE(x >= static_cast<std::int64_t>(least) && x <= (std::int64_t(1) << 31), config,
                   at(key), ": ", expected, ", got ", x);
  return {static_cast<std::size_t>(values[0]), static_cast<std::size_t>(values[1])};
}

void LayerArgs::finish() const {
  for (const auto& [key, used] : used_)
    STRATA_REQUIRE(used, config, at(key), ": unknown option for this layer type");
}

// ------------------------------------------------------------------ files
namespace {

std::size_t line_of(const toml::node& n) { return n.source().begin.line; }

std::string place(const std::string& source, std::size_t line) {
  return line > 0 ? source + ":" + std::to_string(line) : source;
}

std::vector<LayerSpec> parse_layers(const toml::node& node, const std::string& source,
                                    const std::string& where);

LayerSpec parse_layer(const toml::node& node, const std::string& source) {
  const std::string here = place(source, line_of(node));
  const toml::table* t = node.as_table();
  STRATA_REQUIRE(t != nullptr, config, here, ": a layer must be a table (type = \"...\", ...)");
  LayerSpec s;
  const toml::node* type = t->get("type");
  STRATA_REQUIRE(type != nullptr && type->is_string(), config, here,
                 ": every layer needs a key 'type' with a string value, e.g. type = \"linear\"");
  s.type = type->value<std::string>().value();
  s.args = LayerArgs(here, s.type);
  for (const auto& [k, v] : *t) {
    const std::string key(k.str());
    const std::string at = place(source, line_of(v)) + ": layer type '" + s.type + "', key '" + key + "'";
    if (key == "type") continue;
    if (key == "name") {
      STRATA_REQUIRE(v.is_string(), config, at, ": expected a string");
      s.name = v.value<std::string>().value();
      STRATA_REQUIRE(!s.name.empty() && s.name.find('.') == std::string::npos, config, at,
                     ": a name is a non-empty word without '.' (names are joined with '.')");
    } else if (key == "repeat") {
      const auto r = v.value<std::int64_t>();
      STRATA_REQUIRE(v.is_integer() && r && *r > 0 && *r <= kMaxRepeat, config, at,
                     ": expected a positive integer up to ", kMaxRepeat);
      s.repeat = static_cast<std::size_t>(*r);
    } else if (key == "layers") {
      s.layers = parse_layers(v, source, at);
    } else if (v.is_integer()) {
      s.args.set(key, v.value<std::int64_t>().value(), line_of(v));
    } else if (v.is_floating_point()) {
      s.args.set(key, v.value<double>().value(), line_of(v));
    } else if (v.is_boolean()) {
      s.args.set(key, v.value<bool>().value(), line_of(v));
    } else if (v.is_string()) {
      s.args.set(key, v.value<std::string>().value(), line_of(v));
    } else if (const toml::array* a = v.as_array(); a != nullptr && !a->empty() &&
                                                   a->is_homogeneous(toml::node_type::integer)) {
      LayerArgs::Ints ints;
      for (const auto& e : *a) ints.push_back(e.value<std::int64_t>().value());
      s.args.set(key, std::move(ints), line_of(v));
    } else {
      STRATA_THROW(config, at, ": expected a number, a boolean, a string or an array of integers");
    }
  }
  const bool block = s.type == "residual" || s.type == "block";
  STRATA_REQUIRE(block || s.layers.empty(), config, here, ": layer type '", s.type,
                 "' has no inner layers (only \"residual\" and \"block\" do)");
  STRATA_REQUIRE(!block || !s.layers.empty(), config, here, ": a ", s.type,
                 " needs inner layers: layers = [ { type = ... }, ... ]");
  return s;
}

std::vector<LayerSpec> parse_layers(const toml::node& node, const std::string& source,
                                    const std::string& where) {
  const toml::array* a = node.as_array();
  STRATA_REQUIRE(a != nullptr && !a->empty(), config, where,
                 ": expected a non-empty array of layers ([[layers]] tables)");
  std::vector<LayerSpec> layers;
  for (const auto& item : *a) layers.push_back(parse_layer(item, source));
  return layers;
}

// Model files are ASCII outside comments. toml++ 3.3 (Debian 12) classifies
// some non-ASCII characters outside strings by reaching an "unreachable"
// point (undefined behaviour; found by tests/fuzz/fuzz_model.cpp), so they
// are refused before it reads the text. Layer names and types are words;
// comments may hold anything.
void check_ascii(const std::string& text, const std::string& source) {
  std::size_t line = 1;
  bool comment = false;
  char quote = 0;      // inside a string opened by this quote
  bool multi = false;  // a """ or ''' string
  auto at = [&](std::size_t i, char q, std::size_t n) { return text.compare(i, n, std::string(n, q)) == 0; };
  // A UTF-8 byte-order mark may open the file (toml++ skips it).
  const std::size_t start = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (std::size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      comment = false;
      if (quote && !multi) quote = 0;  // a one-line string ends with its line (toml++ reports it)
      continue;
    }
    if (comment) continue;
    STRATA_REQUIRE(static_cast<unsigned char>(c) < 0x80, config, source, ":", line,
                   ": a character that is not ASCII (byte 0x", std::hex,
                   static_cast<int>(static_cast<unsigned char>(c)), std::dec,
                   ") outside a comment: model files are ASCII except in comments");
    if (quote) {
      if (c == '\\' && quote == '"') {
        // An escape: the next character is part of it (checked on the next
        // turn unless it is a quote or a backslash, which are ASCII).
        if (i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) ++i;
      } else if (c == quote && (!multi || at(i, quote, 3))) {
        if (multi) {
          i += 2;  // a closing """ may be preceded by up to two quotes of the content
          for (int k = 0; k < 2 && i + 1 < text.size() && text[i + 1] == quote; ++k) ++i;
        }
        quote = 0;
      }
    } else if (c == '#') {
      comment = true;
    } else if (c == '"' || c == '\'') {
      multi = at(i, c, 3);
      if (multi) i += 2;
      quote = c;
    }
  }
}

}  // namespace

ModelSpec parse_model(const std::string& text, const std::string& source) {
  check_ascii(text, source);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    STRATA_THROW(config, place(source, e.source().begin.line), ": ", e.description());
  }
  ModelSpec m;
  m.source = source;
  bool has_input = false;
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    const std::string at = place(source, line_of(v)) + ": key '" + key + "'";
    if (key == "name") {
      STRATA_REQUIRE(v.is_string(), config, at, ": expected a string");
      m.name = v.value<std::string>().value();
    } else if (key == "input") {
      const toml::array* a = v.as_array();
      std::vector<std::size_t> dims;
      if (a)
        for (const auto& d : *a) {
          const auto i = d.value<std::int64_t>();
          STRATA_REQUIRE(d.is_integer() && i && *i > 0, config, at,
                         ": expected positive integers, e.g. input = [1, 28, 28]");
          dims.push_back(static_cast<std::size_t>(*i));
        }
      STRATA_REQUIRE(a && !dims.empty() && dims.size() <= Shape::max_rank, config, at,
                     ": expected the per-sample input shape, 1 to 4 positive integers, e.g. "
                     "input = [784]");
      m.input = Shape(dims);
      has_input = true;
    } else if (key == "layers") {
      m.layers = parse_layers(v, source, at);
    } else if (key == "sync_batchnorm") {
      STRATA_REQUIRE(v.is_boolean(), config, at, ": expected true or false");
      m.sync_batchnorm = v.value<bool>().value();
    } else {
      STRATA_THROW(config, at, ": unknown key (a model file has name, input, sync_batchnorm and "
                   "[[layers]])");
    }
  }
  STRATA_REQUIRE(has_input, config, source,
                 ": the model needs its per-sample input shape, e.g. input = [784]");
  STRATA_REQUIRE(!m.layers.empty(), config, source,
                 ": the model has no layers (add [[layers]] tables)");
  return m;
}

ModelSpec read_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_REQUIRE(in.good(), config, "model file '", path, "' cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  STRATA_REQUIRE(!in.bad(), config, "model file '", path, "' cannot be read");
  return parse_model(text.str(), path);
}

}  // namespace strata
