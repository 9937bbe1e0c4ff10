// Synthetic data, train/test splitting and feature standardisation.
#include "data/dataset.hpp"

#include "backends/error.hpp"
#include "backends/random.hpp"

#include <algorithm>
#include <cmath>

namespace strata::data {

Dataset make_synthetic(std::size_t samples, std::size_t features, CsvTask task,
                       std::size_t classes_or_width, std::uint64_t seed) {
  STRATA_REQUIRE(samples > 0, config, "synthetic data: the number of samples must be positive");
  STRATA_REQUIRE(features > 0, config, "synthetic data: the number of features must be positive");
  STRATA_REQUIRE(classes_or_width > 0, config, "synthetic data: the number of ",
                 task == CsvTask::classification ? "classes" : "targets", " must be positive");

  // Inputs on stream_synthetic, labels or targets on the next stream, each
  // indexed by element: the values depend on nothing but the arguments.
  const std::uint64_t xs = random::stream_synthetic;
  const std::uint64_t ys = random::stream_synthetic + 1;
  Dataset d;
  d.name = "synthetic";
  d.features = features;
  d.x.resize(samples * features);
  for (std::size_t i = 0; i < d.x.size(); ++i)
    d.x[i] = static_cast<float>(random::normal(seed, xs, i));
  if (task == CsvTask::classification) {
    d.classes = classes_or_width;
    d.labels.resize(samples);
    for (std::size_t i = 0; i < samples; ++i)
      d.labels[i] = static_cast<std::int32_t>(random::below(seed, ys, i, classes_or_width));
  } else {
    d.target_width = classes_or_width;
    d.targets.resize(samples * classes_or_width);
    for (std::size_t i = 0; i < d.targets.size(); ++i)
      d.targets[i] = static_cast<float>(random::normal(seed, ys, i));
  }
  return d;
}

std::string shape_str(const Dataset& d) {
  if (d.shape.empty()) return "{" + std::to_string(d.features) + "}";
  std::string s = "{";
  for (std::size_t i = 0; i < d.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(d.shape[i]);
  return s + "}";
}

void set_shape(Dataset& d, const std::vector<std::size_t>& shape, const std::string& option) {
  std::size_t n = 1;
  std::string text;
  for (std::size_t v : shape) {
    STRATA_REQUIRE(v > 0 && n <= (std::size_t(1) << 40) / v, config, option,
                   ": every dimension must be positive (and the product below 2^40)");
    n *= v;
    text += (text.empty() ? "" : ",") + std::to_string(v);
  }
  STRATA_REQUIRE(!shape.empty() && n == d.features, config, option, " ", text, " has ", n,
                 " values per sample but ", d.name, " has ", d.features);
  d.shape = shape;
}

Split split_tail(Dataset all, double fraction) {
  STRATA_REQUIRE(fraction >= 0.0 && fraction < 1.0, config, "test fraction ", fraction,
                 " is not in [0, 1)");
  const std::size_t n = all.size();
  std::size_t n_test = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(n)));
  if (fraction > 0.0) n_test = std::max<std::size_t>(n_test, 1);
  STRATA_REQUIRE(n_test < n || n == 0, config, "'", all.name, "': a test fraction of ", fraction,
                 " of ", n, " samples leaves no training samples");
  const std::size_t n_train = n - n_test;

  Split s;
  Dataset& t = s.test;
  t.name = all.name + " (test split)";
  t.features = all.features;
  t.shape = all.shape;
  t.zero = all.zero;
  t.classes = all.classes;
  t.label_width = all.label_width;
  t.target_width = all.target_width;
  t.x.assign(all.x.begin() + static_cast<std::ptrdiff_t>(n_train * all.features), all.x.end());
  all.x.resize(n_train * all.features);
  if (all.is_classification()) {
    const std::size_t w = all.label_width;
    t.labels.assign(all.labels.begin() + static_cast<std::ptrdiff_t>(n_train * w), all.labels.end());
    all.labels.resize(n_train * w);
  } else {
    const std::size_t w = all.target_width;
    t.targets.assign(all.targets.begin() + static_cast<std::ptrdiff_t>(n_train * w),
                     all.targets.end());
    all.targets.resize(n_train * w);
  }
  s.train = std::move(all);
  s.train.name += " (train split)";
  return s;
}

Normalizer Normalizer::fit(const Dataset& d, bool per_feature) {
  const std::size_t n = d.size();
  const std::size_t f = d.features;
  STRATA_REQUIRE(n > 0, data, "'", d.name, "': cannot fit a normalizer to no samples");
  const std::size_t groups = per_feature ? f : 1;
  // Two passes in double: mean, then variance about the mean.
  std::vector<double> sum(groups, 0.0), sq(groups, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = d.x.data() + i * f;
    for (std::size_t j = 0; j < f; ++j) sum[per_feature ? j : 0] += row[j];
  }
  const double count = static_cast<double>(per_feature ? n : n * f);
  for (double& s : sum) s /= count;
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = d.x.data() + i * f;
    for (std::size_t j = 0; j < f; ++j) {
      const double c = row[j] - sum[per_feature ? j : 0];
      sq[per_feature ? j : 0] += c * c;
    }
  }
  Normalizer z;
  z.mean.resize(groups);
  z.inv_std.resize(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    const double sd = std::sqrt(sq[g] / count);
    z.mean[g] = static_cast<float>(sum[g]);
    // A constant feature is only centred.
    z.inv_std[g] = sd > 0.0 && std::isfinite(1.0 / sd) ? static_cast<float>(1.0 / sd) : 1.0f;
  }
  return z;
}

void Normalizer::apply(Dataset& d) const {
  STRATA_REQUIRE(!mean.empty() && mean.size() == inv_std.size(), config,
                 "normalizer is not fitted");
  const std::size_t f = d.features;
  if (mean.size() == 1) {
    const float m = mean[0], s = inv_std[0];
    for (float& v : d.x) v = (v - m) * s;
    d.zero = (0.0f - m) * s;
    return;
  }
  STRATA_REQUIRE(mean.size() == f, config, "normalizer fitted to ", mean.size(),
                 " features cannot be applied to '", d.name, "' with ", f, " features");
  const std::size_t n = d.size();
  for (std::size_t i = 0; i < n; ++i) {
    float* row = d.x.data() + i * f;
    for (std::size_t j = 0; j < f; ++j) row[j] = (row[j] - mean[j]) * inv_std[j];
  }
}

}  // namespace strata::data
