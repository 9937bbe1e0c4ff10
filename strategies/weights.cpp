#include "strategies/weights.hpp"

#include "backends/host_error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>

namespace strata {

namespace {
std::vector<std::uint64_t> dims_of(const Shape& s) {
  std::vector<std::uint64_t> d;
  for (std::size_t x : s.dims()) d.push_back(x);
  return d;
}

// The shape a buffer has in PyTorch: a single integer is a scalar.
std::vector<std::uint64_t> buffer_dims(const BufferInfo& b) {
  if (b.integer && b.size == 1) return {};
  return {b.size};
}

std::string text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a, b, c and 4 more"
std::string listed(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 8;
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += " and " + std::to_string(names.size() - kShown) + " more";
  return s;
}

// The names under which the file may hold parameter `name`: itself and the
// weights tied to it.
std::vector<std::string> aliases(const ModelTable& model, const std::string& name) {
  std::vector<std::string> a{name};
  for (const auto& [tied, to] : model.ties)
    if (to == name) a.push_back(tied);
  return a;
}
}  // namespace

safetensors::File export_weights(const ModelTable& model, const Weights& w, safetensors::DType dtype) {
  safetensors::File f;
  f.metadata["format"] = "pt";
  f.metadata["producer"] = "strata";
  for (const ParamInfo& p : model.params) {
    STRATA_REQUIRE(p.offset + p.shape.numel() <= w.params.size(), config, "export: parameter '",
                   p.name, "' lies past the ", w.params.size(), " values given");
    for (const std::string& name : aliases(model, p.name))
      f.tensors.push_back(safetensors::make_tensor(name, dims_of(p.shape), w.params.data() + p.offset, dtype));
  }
  for (const BufferInfo& b : model.buffers) {
    if (!b.state_dict) continue;
    const auto it = w.buffers.find(b.name);
    STRATA_REQUIRE(it != w.buffers.end() && it->second.size() == b.size, config,
                   "export: no values for buffer '", b.name, "'");
    f.tensors.push_back(safetensors::make_tensor(b.name, buffer_dims(b), it->second,
                                                 b.integer ? safetensors::DType::I64 : dtype));
  }
  return f;
}

ImportReport import_weights(const safetensors::File& f, const std::string& path,
                            const ModelTable& model, Weights& w, bool strict,
                            const std::string& lenient_option) {
  const std::string where = "safetensors file '" + path + "'";
  ImportReport r;
  Weights out = w;
  std::set<std::string> used;
  // The tensor the file holds for a parameter (under its name or a tied one).
  auto lookup = [&](const std::string& name) -> const safetensors::Tensor* {
    const safetensors::Tensor* found = nullptr;
    for (const std::string& a : aliases(model, name)) {
      const safetensors::Tensor* t = f.find(a);
      if (!t) continue;
      used.insert(a);
      if (!found) {
        found = t;
        continue;
      }
      STRATA_REQUIRE(t->shape == found->shape, data, where, ": tensors '", found->name, "' and '",
                     t->name, "' are one tied weight in this model, but their shapes differ (",
                     text(found->shape), ", ", text(t->shape), ")");
      // The same bits (NaN included) when stored alike, else the same values.
      const bool same = t->dtype == found->dtype ? t->bytes == found->bytes
                                                 : t->to_double() == found->to_double();
      STRATA_REQUIRE(same, data, where, ": tensors '", found->name, "' and '", t->name,
                     "' are one tied weight in this model, but their values differ");
    }
    return found;
  };
  for (const ParamInfo& p : model.params) {
    const auto dims = dims_of(p.shape);
    const safetensors::Tensor* t = lookup(p.name);
    if (!t) {
      r.missing.push_back(p.name + " " + text(dims));
      continue;
    }
    if (t->shape != dims) {
      r.mismatched.push_back(t->name + ": file " + text(t->shape) + ", model " + text(dims));
      continue;
    }
    const std::vector<float> v = t->to_float();
    std::copy(v.begin(), v.end(), out.params.begin() + static_cast<std::ptrdiff_t>(p.offset));
    ++r.loaded;
  }
  for (const BufferInfo& b : model.buffers) {
    if (!b.state_dict) continue;
    const safetensors::Tensor* t = f.find(b.name);
    const auto dims = buffer_dims(b);
    if (!t) {
      r.missing.push_back(b.name + " " + text(dims));
      continue;
    }
    used.insert(b.name);
    const bool fits = t->shape == dims || (b.size == 1 && t->numel() == 1 && t->shape.size() <= 1);
    if (!fits) {
      r.mismatched.push_back(t->name + ": file " + text(t->shape) + ", model " + text(dims));
      continue;
    }
    out.buffers[b.name] = t->to_double();
    ++r.loaded;
  }
  for (const safetensors::Tensor& t : f.tensors)
    if (!used.count(t.name)) r.unexpected.push_back(t.name + " " + text(t.shape));
  if (strict && !r.complete()) {
    std::string what;
    auto add = [&](const std::vector<std::string>& v, const char* kind) {
      if (v.empty()) return;
      what += (what.empty() ? "" : "; ") + std::to_string(v.size()) + " " + kind + ": " + listed(v);
    };
    add(r.missing, "of the model's tensors missing");
    add(r.unexpected, "unexpected (not in the model)");
    add(r.mismatched, "of another shape");
    STRATA_THROW(data, where, " does not match the model: ", what, " (", lenient_option,
                 " loads the tensors that match and reports the rest)");
  }
  w = std::move(out);
  return r;
}

std::map<std::string, std::string> normalization_metadata(const data::Normalizer& n) {
  if (n.mean.empty()) return {};
  return {{"strata.input_mean", nlohmann::json(n.mean).dump()},
          {"strata.input_inv_std", nlohmann::json(n.inv_std).dump()}};
}

safetensors::DType parse_weight_dtype(const std::string& name, const std::string& option) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "f32" || n == "fp32" || n == "float32") return safetensors::DType::F32;
  if (n == "bf16" || n == "bfloat16") return safetensors::DType::BF16;
  if (n == "f16" || n == "fp16" || n == "float16") return safetensors::DType::F16;
  if (n == "f64" || n == "fp64" || n == "float64") return safetensors::DType::F64;
  STRATA_THROW(config, option, ": unknown dtype '", name, "' (expected f32, bf16, f16 or f64)");
}

}  // namespace strata
