#include "util/format.h"

#include <fmt/format.h>

namespace kiln {
namespace {

std::string scaled(double v, const char* const* units, int count, const char* suffix) {
  int i = 0;
  while (i + 1 < count && v >= 1000.0) {
    v /= 1000.0;
    ++i;
  }
  return fmt::format("{:.{}f} {}{}", v, v >= 100 ? 1 : v >= 10 ? 2 : 3, units[i], suffix);
}

}  // namespace

std::string format_count(double n) {
  static const char* const kUnits[] = {"", "K", "M", "B", "T"};
  return scaled(n, kUnits, 5, "");
}

std::string format_flops(double flops) {
  static const char* const kUnits[] = {"", "K", "M", "G", "T", "P"};
  return scaled(flops, kUnits, 6, "FLOP");
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"", "K", "M", "G", "T"};
  return scaled(bytes, kUnits, 5, "B");
}

}  // namespace kiln
