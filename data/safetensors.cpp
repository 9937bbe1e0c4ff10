#include "data/safetensors.hpp"

#include "backends/host_error.hpp"
#include "backends/precision.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors: the data are little-endian; this reader copies them as they are"
#endif

namespace strata::safetensors {

namespace {
struct Name {
  DType type;
  const char* name;
  std::size_t size;
};
constexpr Name kTypes[] = {{DType::F64, "F64", 8}, {DType::F32, "F32", 4},   {DType::F16, "F16", 2},
                           {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
                           {DType::I16, "I16", 2}, {DType::I8, "I8", 1},     {DType::U8, "U8", 1},
                           {DType::BOOL, "BOOL", 1}};

// The largest header the format allows (the reference implementation's limit).
constexpr std::uint64_t kMaxHeader = 100u << 20;

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Value k of raw data of type t, as a double.
double value_at(const std::string& bytes, DType t, std::uint64_t k) {
  const char* p = bytes.data() + k * size_of(t);
  switch (t) {
    case DType::F64: return load<double>(p);
    case DType::F32: return load<float>(p);
    case DType::F16: return detail::fp16_bits_to_float(load<std::uint16_t>(p));
    case DType::BF16: return detail::bf16_bits_to_float(load<std::uint16_t>(p));
    case DType::I64: return static_cast<double>(load<std::int64_t>(p));
    case DType::I32: return load<std::int32_t>(p);
    case DType::I16: return load<std::int16_t>(p);
    case DType::I8: return load<std::int8_t>(p);
    case DType::U8: return load<std::uint8_t>(p);
    case DType::BOOL: return load<std::uint8_t>(p) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

template <class T>
void store(std::string& bytes, std::uint64_t k, T v) {
  std::memcpy(&bytes[k * sizeof v], &v, sizeof v);
}

template <class I>
I to_int(double v) {
  if (!(v >= static_cast<double>(std::numeric_limits<I>::lowest()))) return std::numeric_limits<I>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(std::llround(v));
}

void put(std::string& bytes, DType t, std::uint64_t k, double v) {
  switch (t) {
    case DType::F64: return store(bytes, k, v);
    case DType::F32: return store(bytes, k, static_cast<float>(v));
    case DType::F16: return store(bytes, k, detail::float_to_fp16_bits(static_cast<float>(v)));
    case DType::BF16: return store(bytes, k, detail::float_to_bf16_bits(static_cast<float>(v)));
    case DType::I64: return store(bytes, k, to_int<std::int64_t>(v));
    case DType::I32: return store(bytes, k, to_int<std::int32_t>(v));
    case DType::I16: return store(bytes, k, to_int<std::int16_t>(v));
    case DType::I8: return store(bytes, k, to_int<std::int8_t>(v));
    case DType::U8: return store(bytes, k, to_int<std::uint8_t>(v));
    case DType::BOOL: return store(bytes, k, static_cast<std::uint8_t>(v != 0 ? 1 : 0));
  }
}

// numel of a shape, or false when it overflows 64 bits.
bool count(const std::vector<std::uint64_t>& shape, std::uint64_t& n) {
  n = 1;
  for (std::uint64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / d) return false;
    n *= d;
  }
  return true;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The deepest nesting of objects and arrays in JSON text (strings skipped),
// checked before parsing: a valid header nests 3 deep (the header, an entry,
// its shape), and a hostile one must not make the parser or an error
// message recurse a million levels.
std::size_t nesting(const std::string& text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// A JSON value of the header for a message: at most 60 characters of it.
std::string shown(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A JSON value as a non-negative integer, or false.
bool unsigned_of(const nlohmann::json& j, std::uint64_t& v) {
  if (!j.is_number_unsigned()) return false;
  v = j.get<std::uint64_t>();
  return true;
}
}  // namespace

DType parse_dtype(const std::string& name, const std::string& where) {
  for (const Name& t : kTypes)
    if (name == t.name) return t.type;
  STRATA_THROW(data, where, ": unknown dtype '", name,
               "' (expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)");
}

const char* to_string(DType t) {
  for (const Name& n : kTypes)
    if (n.type == t) return n.name;
  return "?";
}

std::size_t size_of(DType t) {
  for (const Name& n : kTypes)
    if (n.type == t) return n.size;
  return 0;
}

std::uint64_t Tensor::numel() const {
  std::uint64_t n = 0;
  count(shape, n);
  return n;
}

std::vector<float> Tensor::to_float() const {
  std::vector<float> out(numel());
  for (std::uint64_t k = 0; k < out.size(); ++k) out[k] = static_cast<float>(value_at(bytes, dtype, k));
  return out;
}

std::vector<double> Tensor::to_double() const {
  std::vector<double> out(numel());
  for (std::uint64_t k = 0; k < out.size(); ++k) out[k] = value_at(bytes, dtype, k);
  return out;
}

Tensor make_tensor(const std::string& name, std::vector<std::uint64_t> shape, const float* values,
                   DType dtype) {
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const std::uint64_t n = t.numel();
  t.bytes.assign(n * size_of(dtype), '\0');
  for (std::uint64_t k = 0; k < n; ++k) put(t.bytes, dtype, k, values[k]);
  return t;
}

Tensor make_tensor(const std::string& name, std::vector<std::uint64_t> shape,
                   const std::vector<double>& values, DType dtype) {
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const std::uint64_t n = t.numel();
  STRATA_REQUIRE(values.size() == n, config, "safetensors: tensor '", name, "' of shape ",
                 shape_text(t.shape), " given ", values.size(), " values");
  t.bytes.assign(n * size_of(dtype), '\0');
  for (std::uint64_t k = 0; k < n; ++k) put(t.bytes, dtype, k, values[k]);
  return t;
}

const Tensor* File::find(const std::string& name) const {
  for (const Tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

File parse(const std::string& contents, const std::string& what) {
  const std::string where = "safetensors file '" + what + "'";
  STRATA_REQUIRE(contents.size() >= 8, data, where, ": ", contents.size(),
                 " bytes, shorter than the 8-byte header length (not a safetensors file)");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(contents[static_cast<std::size_t>(i)]);
  STRATA_REQUIRE(n <= contents.size() - 8, data, where, ": the header says it is ", n,
                 " bytes long, but the file has ", contents.size() - 8, " bytes after the length "
                 "(truncated, or not a safetensors file)");
  STRATA_REQUIRE(n <= kMaxHeader, data, where, ": a header of ", n, " bytes (the format allows ",
                 kMaxHeader, ")");
  const std::string header = contents.substr(8, n);
  STRATA_REQUIRE(!header.empty() && header[0] == '{', data, where,
                 ": the header does not start with '{' (not a safetensors file)");
  STRATA_REQUIRE(nesting(header) <= 3, data, where, ": the header nests objects or arrays ",
                 nesting(header), " deep (a safetensors header nests 3: header, tensor, shape)");
  // Duplicated names: nlohmann keeps the last; the format has one of each.
  std::string duplicate;
  std::set<std::string> names;
  const nlohmann::json::parser_callback_t seen = [&](int depth, nlohmann::json::parse_event_t e,
                                                    nlohmann::json& parsed) {
    if (depth == 1 && e == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  const nlohmann::json j = nlohmann::json::parse(header, seen, /*allow_exceptions=*/false);
  STRATA_REQUIRE(!j.is_discarded() && j.is_object(), data, where,
                 ": the header is not a JSON object");
  STRATA_REQUIRE(duplicate.empty(), data, where, ": tensor '", duplicate, "' appears twice in the header");
  const std::uint64_t data_size = contents.size() - 8 - n;
  File f;
  struct Span {
    std::uint64_t begin, end;
    std::size_t tensor;
  };
  std::vector<Span> spans;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") {
      STRATA_REQUIRE(e.is_object(), data, where, ": __metadata__ is not an object of strings");
      for (const auto& [k, v] : e.items()) {
        STRATA_REQUIRE(v.is_string(), data, where, ": __metadata__ entry '", k, "' is not a string");
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string at = where + ", tensor '" + name + "'";
    STRATA_REQUIRE(e.is_object(), data, at, ": not an object with dtype, shape and data_offsets");
    STRATA_REQUIRE(e.contains("dtype") && e["dtype"].is_string(), data, at, ": no dtype string");
    Tensor t;
    t.name = name;
    t.dtype = parse_dtype(e["dtype"].get<std::string>(), at);
    STRATA_REQUIRE(e.contains("shape") && e["shape"].is_array(), data, at, ": no shape array");
    for (const auto& d : e["shape"]) {
      std::uint64_t v = 0;
      STRATA_REQUIRE(unsigned_of(d, v), data, at, ": shape ", shown(e["shape"]),
                     " is not a list of non-negative integers");
      t.shape.push_back(v);
    }
    STRATA_REQUIRE(e.contains("data_offsets") && e["data_offsets"].is_array() &&
                       e["data_offsets"].size() == 2,
                   data, at, ": no data_offsets [begin, end]");
    std::uint64_t begin = 0, end = 0, numel = 0;
    STRATA_REQUIRE(unsigned_of(e["data_offsets"][0], begin) && unsigned_of(e["data_offsets"][1], end) &&
                       begin <= end,
                   data, at, ": data_offsets ", shown(e["data_offsets"]),
                   " are not two non-negative integers with begin <= end");
    STRATA_REQUIRE(end <= data_size, data, at, ": data_offsets [", begin, ", ", end,
                   "] reach past the ", data_size, " bytes of data (truncated file?)");
    const bool fits = count(t.shape, numel) && numel <= std::numeric_limits<std::uint64_t>::max() / 8;
    STRATA_REQUIRE(fits && numel * size_of(t.dtype) == end - begin, data, at, ": shape ",
                   shape_text(t.shape), " of ", to_string(t.dtype), " needs ",
                   fits ? std::to_string(numel * size_of(t.dtype)) : std::string("more than 2^64"),
                   " bytes, but data_offsets [", begin, ", ", end, "] hold ", end - begin);
    spans.push_back({begin, end, f.tensors.size()});
    f.tensors.push_back(std::move(t));
  }
  // The tensors tile the data: no overlap, no unused byte.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  const Span* previous = nullptr;
  for (const Span& s : spans) {
    const std::string& name = f.tensors[s.tensor].name;
    STRATA_REQUIRE(s.begin >= at, data, where, ": tensor '", name, "' (bytes [", s.begin, ", ",
                   s.end, ")) overlaps tensor '", previous ? f.tensors[previous->tensor].name : "",
                   "' (bytes up to ", at, ")");
    STRATA_REQUIRE(s.begin == at, data, where, ": bytes [", at, ", ", s.begin,
                   ") of the data belong to no tensor (before tensor '", name, "')");
    at = s.end;
    previous = &s;
  }
  STRATA_REQUIRE(at == data_size, data, where, ": bytes [", at, ", ", data_size,
                 ") of the data belong to no tensor");
  const std::size_t base = 8 + static_cast<std::size_t>(n);
  std::vector<Tensor> ordered;
  for (const Span& s : spans) {
    Tensor& t = f.tensors[s.tensor];
    t.bytes = contents.substr(base + s.begin, s.end - s.begin);
    ordered.push_back(std::move(t));
  }
  f.tensors = std::move(ordered);
  return f;
}

File read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_REQUIRE(in, data, "cannot open safetensors file '", path, "'");
  std::ostringstream s;
  s << in.rdbuf();
  STRATA_REQUIRE(!in.bad(), data, "cannot read safetensors file '", path, "'");
  return parse(s.str(), path);
}

std::string serialize(const File& f) {
  nlohmann::json header = nlohmann::json::object();
  if (!f.metadata.empty()) header["__metadata__"] = f.metadata;
  std::uint64_t at = 0;
  for (const Tensor& t : f.tensors) {
    STRATA_REQUIRE(t.name != "__metadata__" && !header.contains(t.name), config,
                   "safetensors: tensor name '", t.name, "' is reserved or given twice");
    STRATA_REQUIRE(t.bytes.size() == t.numel() * size_of(t.dtype), config, "safetensors: tensor '",
                   t.name, "' of shape ", shape_text(t.shape), " holds ", t.bytes.size(), " bytes");
    header[t.name] = {{"dtype", to_string(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data begins 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + at);
  for (const Tensor& t : f.tensors) out += t.bytes;
  return out;
}

void write(const std::string& path, const File& f) {
  const std::string bytes = serialize(f);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    STRATA_REQUIRE(out, runtime, "cannot write '", tmp, "' (for '", path, "')");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      STRATA_THROW(runtime, "cannot write '", path, "': ", bytes.size(),
                   " bytes did not reach the disk (full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    STRATA_THROW(runtime, "cannot rename '", tmp, "' to '", path, "'");
  }
}

}  // namespace strata::safetensors
