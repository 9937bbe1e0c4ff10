// Where a run's samples come from, as a command line names it (the one
// place that reads these names; strata-train and strata-predict take it):
//   fashion-mnist   the Fashion-MNIST IDX files (data/dataset.hpp)
//   synthetic       generated samples of the model's shapes
//   csv:PATH        numeric features, the last columns the targets (data/csv.hpp)
//   text:PATH       a text file or folder as token windows (data/text.hpp)
//   fortunes        text: the fortunes corpus of the system
#pragma once

#include <string>

namespace strata::data {

enum class SourceKind { fashion_mnist, synthetic, csv, text };

struct DatasetSource {
  SourceKind kind = SourceKind::fashion_mnist;
  std::string path;  // csv and text: the file or folder (fortunes: the system's corpus)
  std::string spec;  // as given ("fortunes", "csv:data.csv", ...)
};

// Throws config naming the value and the choices, or a csv:/text: without a path.
DatasetSource parse_dataset_source(const std::string& spec);

}  // namespace strata::data
