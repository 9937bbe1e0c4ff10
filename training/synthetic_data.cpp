#include "training/synthetic_data.hpp"

#include "data/text.hpp"
#include "layers/embedding.hpp"

#include <algorithm>

namespace strata {

data::Dataset synthetic_data(const Sequential<float>& model, LossKind loss, std::size_t samples,
                             std::uint64_t seed) {
  const std::size_t in = model.in_features(), out = model.out_features();
  const auto task = loss == LossKind::cross_entropy ? data::CsvTask::classification
                                                    : data::CsvTask::regression;
  const std::size_t vocab = embedding_vocabulary(model.layer(0));
  if (vocab > 0 && task == data::CsvTask::classification && in > 0 && out % in == 0)
    return data::make_synthetic_tokens(samples, in, std::min(vocab, out / in), seed);
  data::Dataset d = data::make_synthetic(samples, in, task, out, seed);
  if (model.shape(0).rank() > 1) d.shape = model.shape(0).dims();
  return d;
}

}  // namespace strata
