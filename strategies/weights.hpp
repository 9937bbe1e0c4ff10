// Weights in and out of Strata by the names PyTorch's state_dict uses, as
// safetensors files (data/safetensors.hpp).
//
// Names are the model's parameter names (Sequential::parameters): for the
// MLP of --layers those of PyTorch's nn.Sequential of Linear and activation
// layers ("0.weight", "0.bias", "2.weight", ...), for a model file the paths
// its layer names make ("wte.weight", "h.0.0.attn.qkv.weight"). Layouts are
// PyTorch's: Linear (out, in), Conv2d (out, in / groups, kH, kW), Embedding
// (vocab, dim). Buffers that PyTorch keeps in its state_dict go with them
// (BatchNorm's running_mean and running_var as floats, num_batches_tracked
// as an int64 scalar); Strata's own counters (Dropout's) do not. A tied
// weight (a language model's head on the token embedding) is written under
// both names, as PyTorch's state_dict lists it, and read from either.
#pragma once

#include "data/dataset.hpp"
#include "data/safetensors.hpp"
#include "strategies/checkpoint_state.hpp"

#include <map>
#include <string>
#include <vector>

namespace strata {

// A model's weights in single-rank layout, and its buffers by name.
struct Weights {
  std::vector<float> params;
  std::map<std::string, std::vector<double>> buffers;
};

// The file of a model's weights, every floating-point tensor stored as `dtype`.
safetensors::File export_weights(const ModelTable& model, const Weights& w, safetensors::DType dtype);

// What a file held that the model did not expect, and the reverse.
struct ImportReport {
  std::vector<std::string> missing;     // the model's tensors the file lacks
  std::vector<std::string> unexpected;  // the file's tensors the model lacks
  std::vector<std::string> mismatched;  // "name: file [2, 3], model [3, 2]"
  std::size_t loaded = 0;               // tensors taken from the file
  bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};

// Sets the weights and state_dict buffers that `f` (read from `path`) holds
// into w, which holds the model's current values (its initialisation).
// strict: a data error naming the file and every missing, unexpected or
// mis-shaped tensor, w unchanged; otherwise those are skipped (the model
// keeps its own values) and reported. A file whose two copies of a tied
// weight differ is a data error either way.
// lenient_option: how the caller's user asks for strict = false (the error
// suggests it).
ImportReport import_weights(const safetensors::File& f, const std::string& path,
                            const ModelTable& model, Weights& w, bool strict,
                            const std::string& lenient_option = "--no-strict");

// How inputs were normalised, as a file's metadata: strata.input_mean and
// strata.input_inv_std, JSON lists (the model expects (x - mean) * inv_std);
// empty for no normalisation.
std::map<std::string, std::string> normalization_metadata(const data::Normalizer& n);

// "F32" | "BF16" | "F16" | "F64" (any case; also fp32, bf16, fp16, fp64);
// throws config naming `option` for anything else.
safetensors::DType parse_weight_dtype(const std::string& name, const std::string& option);

}  // namespace strata
