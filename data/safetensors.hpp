// safetensors files: named tensors, as Hugging Face's format stores them
// (the format PyTorch users exchange weights in).
//
// Layout (little-endian):
//   u64 N                      the length of the header
//   N bytes of JSON            {"name": {"dtype": "F32", "shape": [2, 3],
//                               "data_offsets": [begin, end]}, ...,
//                               "__metadata__": {"key": "value", ...}}
//                              (optional metadata: strings only), padded
//                              with spaces
//   the data                   each tensor's bytes in [begin, end) of it,
//                              row-major, little-endian
//
// The reader checks everything a damaged or hostile file could get wrong,
// and throws a `data` error naming the file and the tensor: a file shorter
// than 8 bytes or than its header, a header that is not a JSON object, an
// entry without a known dtype, a shape or offsets that are not
// non-negative integers, offsets whose length disagrees with the shape and
// dtype, that leave the data, overlap, or leave bytes no tensor uses (the
// format's rule), a duplicated name, metadata that is not strings. Values
// of every dtype below convert to and from float (16-bit: round to nearest
// even; integers: exact below 2^24).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::safetensors {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
// "F32" and so on; throws data naming `where` for an unknown name.
DType parse_dtype(const std::string& name, const std::string& where);
const char* to_string(DType t);
std::size_t size_of(DType t);

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::uint64_t> shape;
  std::string bytes;  // the raw little-endian data
  std::uint64_t numel() const;
  // The values as float / double (converted from the dtype).
  std::vector<float> to_float() const;
  std::vector<double> to_double() const;
};

// A tensor of `dtype` holding `values` (rounded to the dtype), row-major.
Tensor make_tensor(const std::string& name, std::vector<std::uint64_t> shape, const float* values,
                   DType dtype);
Tensor make_tensor(const std::string& name, std::vector<std::uint64_t> shape,
                   const std::vector<double>& values, DType dtype);

struct File {
  std::map<std::string, std::string> metadata;
  std::vector<Tensor> tensors;  // in the order of their data
  const Tensor* find(const std::string& name) const;  // nullptr: none
};

// The file's contents; `what` names it in errors (a path).
File parse(const std::string& contents, const std::string& what);
// Reads and parses a file; a data error when it cannot be read.
File read(const std::string& path);
// The bytes of a file holding f (tensors stored in the order given; names
// must be unique and not "__metadata__").
std::string serialize(const File& f);
// Writes f to `path` atomically (a temporary file renamed into place);
// a runtime error naming the path when it cannot, the old file left alone.
void write(const std::string& path, const File& f);

}  // namespace strata::safetensors
