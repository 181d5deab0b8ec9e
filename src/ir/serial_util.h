// Helpers shared by the two serialized forms of a Graph (ir/text.cpp, ir/json.cpp): the limits every parsed
// shape must respect, exact float spelling, UTF-8 checks and schema-driven attribute coercion. Keeping them
// in one place is what makes the text and JSON forms accept exactly the same graphs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::serial {

// A parsed shape has at most kMaxRank axes, and the product of its dimensions (zeros counted as 1, so that
// every stride fits too) is at most kMaxNumel; both keep shape arithmetic in int64 without overflow. infer_node
// holds every inferred output shape to the same limits.
inline constexpr int kMaxRank = 16;
inline constexpr int64_t kMaxNumel = int64_t{1} << 62;

// Why `shape` breaks the limits above (negative dims included), or nullopt when it is fine.
std::optional<std::string> shape_problem(const Shape& shape);
// Adds one more dimension to a running product (zeros as 1); false when the product would pass kMaxNumel.
bool extend_numel(int64_t& product, int64_t dim);

// Shortest text that reads back to the same double, always recognizable as a float: "1.0", "1e-06",
// "-0.0", "inf", "-inf", "nan" (every NaN is spelled "nan").
std::string format_float(double value);
// The inverse for non-finite spellings: "inf", "-inf", "nan" (and "-nan").
std::optional<double> parse_nonfinite(std::string_view text);

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as JSON requires.
bool is_valid_utf8(std::string_view text);

// Converts each attribute to the kind its op's schema declares where that is lossless (kiln::coerce_attr);
// attributes the schema does not know, or that cannot be converted, are left for infer_node to report.
void coerce_attrs_to_schema(Op op, Attrs& attrs);

}  // namespace kiln::serial
