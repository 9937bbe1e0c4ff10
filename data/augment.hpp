// Random image augmentation for training batches, as torchvision's
// RandomCrop(size, padding=P) followed by RandomHorizontalFlip(): each sample
// is padded by P pixels on every side with `fill`, cut back to its size at a
// random offset, and mirrored left to right with probability 1/2.
//
// The random numbers of a sample are a pure function of (seed, epoch, the
// sample's index in the data set): a sample looks the same whichever rank,
// batch position or thread gathers it, so any number of data-parallel ranks
// (and a resumed run) trains on the same augmented data.
//
//   Augment a{.crop_pad = 2, .flip = true, .fill = mean_of_black};
//   a.check(dataset);                      // images only: names the shape
//   a.apply(src, dst, shape, seed, epoch, sample);
#pragma once

#include "data/dataset.hpp"

#include <cstddef>
#include <cstdint>

namespace strata::data {

struct Augment {
  std::size_t crop_pad = 0;  // 0: no random crop
  bool flip = false;         // random horizontal flip
  float fill = 0;            // the value of the padding (after normalisation)

  bool active() const { return crop_pad > 0 || flip; }
  // Throws a `config` error naming the options when `d` has no image shape
  // {channels, height, width} or the padding is not below the image size.
  void check(const Dataset& d) const;
  // dst = the augmented sample `sample` of epoch `epoch`; src and dst hold
  // c x h x w values (shape = d.shape), and do not overlap.
  template <class T>
  void apply(const float* src, T* dst, const std::vector<std::size_t>& shape, std::uint64_t seed,
             std::size_t epoch, std::size_t sample) const;
};

}  // namespace strata::data
