// Shared helpers of the graph serializers: see serial_util.h.
#include "ir/serial_util.h"

#include <charconv>
#include <cmath>

namespace kiln::serial {

bool extend_numel(int64_t& product, int64_t dim) {
  const int64_t d = dim == 0 ? 1 : dim;
  if (d < 0 || d > kMaxNumel / product) return false;
  product *= d;
  return true;
}

std::optional<std::string> shape_problem(const Shape& shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return "rank " + std::to_string(shape.size()) + " is above the limit of " + std::to_string(kMaxRank);
  }
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d < 0) return "negative dimension " + std::to_string(d);
    if (!extend_numel(product, d)) {
      return "shape " + shape_to_string(shape) + " has more than 2^62 elements";
    }
  }
  return std::nullopt;
}

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  KILN_CHECK(ec == std::errc());
  std::string text(buffer, end);
  // Shortest form of an integral double has neither '.' nor an exponent ("100"); make it read as a float.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::optional<double> parse_nonfinite(std::string_view text) {
  if (text == "inf") return HUGE_VAL;
  if (text == "-inf") return -HUGE_VAL;
  if (text == "nan" || text == "-nan") return std::nan("");
  return std::nullopt;
}

bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  auto continuation = [&](size_t at, unsigned char lo = 0x80, unsigned char hi = 0xbf) {
    if (at >= n) return false;
    const auto c = static_cast<unsigned char>(text[at]);
    return c >= lo && c <= hi;
  };
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      i += 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      if (!continuation(i + 1)) return false;
      i += 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      // E0 needs A0..BF (no overlong forms), ED needs 80..9F (no surrogates).
      const unsigned char lo = c == 0xe0 ? 0xa0 : 0x80;
      const unsigned char hi = c == 0xed ? 0x9f : 0xbf;
      if (!continuation(i + 1, lo, hi) || !continuation(i + 2)) return false;
      i += 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
      // F0 needs 90..BF (no overlong forms), F4 needs 80..8F (nothing past U+10FFFF).
      const unsigned char lo = c == 0xf0 ? 0x90 : 0x80;
      const unsigned char hi = c == 0xf4 ? 0x8f : 0xbf;
      if (!continuation(i + 1, lo, hi) || !continuation(i + 2) || !continuation(i + 3)) return false;
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

void coerce_attrs_to_schema(Op op, Attrs& attrs) {
  const OpDef& def = op_def(op);
  Attrs coerced;
  for (const auto& [name, value] : attrs.entries()) {
    const AttrSpec* spec = find_attr_spec(def, name);
    std::optional<AttrValue> converted = spec ? coerce_attr(value, spec->kind) : std::nullopt;
    coerced.set(name, converted ? std::move(*converted) : value);
  }
  attrs = std::move(coerced);
}

}  // namespace kiln::serial
