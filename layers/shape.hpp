// The per-sample shape of an activation: rank 1 to 4, e.g. {784}, {C, H, W},
// {T, C}. Storage is always one contiguous row of shape.numel() values per
// sample (batch first), so a shape only says how a layer views its row.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace strata {

class Shape {
 public:
  static constexpr std::size_t max_rank = 4;
  static constexpr std::size_t max_numel = std::size_t(1) << 40;  // per sample

  Shape() = default;
  Shape(std::initializer_list<std::size_t> dims);
  explicit Shape(const std::vector<std::size_t>& dims);  // throws config for rank 0 or > 4

  std::size_t rank() const { return rank_; }
  std::size_t operator[](std::size_t i) const { return dims_[i]; }
  std::size_t back() const { return dims_[rank_ - 1]; }
  std::size_t numel() const;
  std::vector<std::size_t> dims() const { return {dims_.begin(), dims_.begin() + rank_}; }
  // The same shape with the last dimension replaced.
  Shape with_back(std::size_t last) const;
  // "{1, 28, 28}"
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.rank_ == b.rank_ && a.dims_ == b.dims_;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::array<std::size_t, max_rank> dims_{};
  std::size_t rank_ = 0;
};

}  // namespace strata
