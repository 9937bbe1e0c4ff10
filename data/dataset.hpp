// Data sets held in host memory, and the readers that fill them.
//
// A Dataset is n samples of `features` floats (row-major) with either class
// labels (classification: one per sample, or one per position of a sample,
// e.g. per token) or a target row per sample (regression). Integer inputs
// (token ids) travel as floats, exact below 2^24.
// Readers throw strata::Error of kind `data` naming the file and the problem,
// and kind `config` for a request that cannot be met (e.g. a model width that
// does not match the data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

struct Dataset {
  std::string name;               // for messages: file name or "synthetic"
  std::size_t features = 0;       // width of one sample
  // The shape of one sample when it has one (images: {channels, height,
  // width}; empty: a flat row of `features`). Its product is `features`.
  std::vector<std::size_t> shape;
  // The value a raw 0 has after normalisation with one scalar mean and
  // deviation (image augmentation pads with it: black stays black); 0 else.
  float zero = 0;
  std::vector<float> x;           // (size(), features) row-major
  // Classification: labels in [0, classes), label_width per sample
  // ((size(), label_width) row-major; > 1: per-position targets).
  std::size_t classes = 0;
  std::size_t label_width = 1;
  std::vector<std::int32_t> labels;
  // Regression: (size(), target_width) row-major.
  std::size_t target_width = 0;
  std::vector<float> targets;

  std::size_t size() const { return features == 0 ? 0 : x.size() / features; }
  bool is_classification() const { return classes > 0; }
};

struct Split {
  Dataset train;
  Dataset test;
};

// Reads an IDX image file (magic 0x00000803, uint8 pixels, any rank >= 2:
// every dimension after the first is flattened into features; the sample
// shape is {1, rows, cols} for rank 3, the dimensions after the first
// otherwise) and an IDX label
// file (magic 0x00000801, uint8). Both may be gzip-compressed or plain. Pixels
// are scaled to [0, 1]. Labels must lie in [0, classes).
Dataset read_idx(const std::string& images_path, const std::string& labels_path,
                 std::size_t classes = 10);

// Default directory of Debian's dataset-fashion-mnist package.
std::string default_fashion_mnist_dir();

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`.
Split load_fashion_mnist(const std::string& dir);

enum class CsvTask {
  classification,  // last column is an integer class label in [0, classes)
  regression,      // last `target_width` columns are targets
};

// Reads a CSV of numbers: one sample per line, comma-separated, an optional
// header line (detected when its first field is not a number), '#' comment
// lines and blank lines ignored. For classification, `classes` == 0 means
// "max label + 1". Every line must have the same number of fields.
Dataset read_csv(const std::string& path, CsvTask task, std::size_t classes = 0,
                 std::size_t target_width = 1);

// The same for CSV text already in memory; `name` names it in messages
// (read_csv reads the file and calls this).
Dataset parse_csv(std::string text, const std::string& name, CsvTask task,
                  std::size_t classes = 0, std::size_t target_width = 1);

// Seeded random data shaped by a model: inputs ~ N(0, 1) of width
// `features`; for classification labels uniform in [0, classes), for
// regression targets ~ N(0, 1) of width `target_width`. The same seed gives
// the same data on every machine.
Dataset make_synthetic(std::size_t samples, std::size_t features, CsvTask task,
                       std::size_t classes_or_width, std::uint64_t seed);

// `shape` as text: "{1, 28, 28}", or "{784}" for a flat sample.
std::string shape_str(const Dataset& d);

// Gives `d` the sample shape `shape` (e.g. --input-shape 3,32,32); its
// product must be the data's width per sample (a `config` error otherwise,
// naming `option` and both).
void set_shape(Dataset& d, const std::vector<std::size_t>& shape, const std::string& option);

// Splits off the last `fraction` of the samples (at least one when fraction >
// 0) as a test set.
Split split_tail(Dataset all, double fraction);

// Per-feature standardisation statistics.
struct Normalizer {
  // Mean and standard deviation over all features and samples (one scalar
  // each: pixel-like data) or per feature.
  std::vector<float> mean, inv_std;
  static Normalizer fit(const Dataset& d, bool per_feature);
  void apply(Dataset& d) const;  // x = (x - mean) * inv_std
};

}  // namespace strata::data
