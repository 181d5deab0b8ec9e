// Op classes: the coarse families that reports group work by (matmul, attention, norm, elementwise, ...),
// derived from traits so a new op is classified without touching this file.
#pragma once

#include <string_view>

#include "ir/ops.h"

namespace kiln {

enum class OpClass : uint8_t { matmul, attention, quantize, rowwise, reduction, elementwise, view, source };
inline constexpr int kOpClassCount = 8;

OpClass op_class(Op op);
std::string_view op_class_name(OpClass op_class);

}  // namespace kiln
