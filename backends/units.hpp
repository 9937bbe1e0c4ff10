// Sizes and counts as people read them, the one formatter every program and
// trace of Strata uses: format_bytes(1536) is "1.5 KiB", format_count(2.51e6)
// is "2.51M". A value below the first unit is printed whole ("512 B", "950").
#pragma once

#include <string>

namespace strata {

// Powers of 1024 (B, KiB, MiB, GiB, TiB), one decimal.
std::string format_bytes(double bytes);
// In MiB whatever the size, with `decimals` decimals ("1.80 MiB"): figures
// compared side by side (memory budgets and needs).
std::string format_mib(double bytes, int decimals = 2);
// Powers of 1000 (k, M, G, T), two decimals.
std::string format_count(double n);

}  // namespace strata
