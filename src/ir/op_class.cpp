#include "ir/op_class.h"

namespace kiln {

OpClass op_class(Op op) {
  const uint32_t t = op_def(op).traits;
  // Most specific first: a scaled_linear is a matmul that also quantizes.
  if (t & kTraitMatmul) return OpClass::matmul;
  if (t & kTraitAttention) return OpClass::attention;
  if (t & kTraitQuantize) return OpClass::quantize;
  if (t & kTraitRowwise) return OpClass::rowwise;
  if (t & kTraitReduction) return OpClass::reduction;
  if (t & kTraitElementwise) return OpClass::elementwise;
  if (t & kTraitSource) return OpClass::source;
  return OpClass::view;
}

std::string_view op_class_name(OpClass c) {
  switch (c) {
    case OpClass::matmul: return "matmul";
    case OpClass::attention: return "attention";
    case OpClass::quantize: return "quantize";
    case OpClass::rowwise: return "norm/rowwise";
    case OpClass::reduction: return "reduction";
    case OpClass::elementwise: return "elementwise";
    case OpClass::view: return "view";
    case OpClass::source: return "source";
  }
  return "?";
}

}  // namespace kiln
