// Human-readable numbers for reports: 11.90 B, 1.305 TFLOP, 23.8 GB.
#pragma once

#include <string>

namespace kiln {

std::string format_count(double n);                // 11.9 B, 4.61 K
std::string format_flops(double flops);            // 1.305 TFLOP
std::string format_bytes(double bytes);            // 23.80 GB (powers of 1000)

}  // namespace kiln
