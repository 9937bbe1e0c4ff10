#include "layers/shape.hpp"

#include "backends/error.hpp"

namespace strata {

Shape::Shape(std::initializer_list<std::size_t> dims) : Shape(std::vector<std::size_t>(dims)) {}

Shape::Shape(const std::vector<std::size_t>& dims) {
  STRATA_REQUIRE(!dims.empty() && dims.size() <= max_rank, config, "a shape has 1 to ", max_rank,
                 " dimensions, not ", dims.size());
  std::size_t n = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    STRATA_REQUIRE(dims[i] > 0, config, "shape dimension ", i, " is 0");
    STRATA_REQUIRE(n <= max_numel / dims[i], config, "a shape of more than ", max_numel,
                   " values per sample");
    n *= dims[i];
    dims_[i] = dims[i];
  }
  rank_ = dims.size();
}

std::size_t Shape::numel() const {
  std::size_t n = rank_ > 0 ? 1 : 0;
  for (std::size_t i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::with_back(std::size_t last) const {
  Shape s = *this;
  s.dims_[rank_ - 1] = last;
  return s;
}

std::string Shape::str() const {
  std::string s = "{";
  for (std::size_t i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "}";
}

}  // namespace strata
