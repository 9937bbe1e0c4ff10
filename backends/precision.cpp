#include "backends/precision.hpp"

namespace strata {

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
    if (name == to_string(p)) return p;
  STRATA_THROW(config, "unknown precision '", name, "' (expected fp32, bf16 or fp16)");
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

void round_in_place(const ExecSpace& exec, Precision p, Vector<float> x) {
  if (p == Precision::bf16) round_in_place<bf16>(exec, x);
  else if (p == Precision::fp16) round_in_place<fp16>(exec, x);
}

}  // namespace strata
