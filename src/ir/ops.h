// The op registry: every op kiln knows is one entry in one table (op_table.cpp, generated from KILN_OPS
// below). An entry holds the op's attribute schema, shape/dtype inference, cost, reference implementation and
// traits. Passes and codegen read traits, never op names. Adding an op: add it to KILN_OPS, define its
// `OpDef op_def_<name>` in the family file under ir/ops/, add its tests. A missing definition fails the link.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "ir/tensor.h"
#include "util/result.h"

namespace kiln {

// clang-format off
#define KILN_OPS(X)                                                                                      \
  /* elementwise binary, numpy broadcasting (ops/elementwise.cpp) */                                     \
  X(add) X(sub) X(mul) X(div) X(max) X(min) X(pow)                                                       \
  /* elementwise unary (ops/elementwise.cpp) */                                                          \
  X(neg) X(abs) X(exp) X(log) X(sqrt) X(rsqrt) X(reciprocal) X(tanh) X(sigmoid) X(silu) X(gelu)          \
  X(cos) X(sin) X(cast)                                                                                  \
  /* gated activation: silu(x[..., :F]) * x[..., F:] (ops/elementwise.cpp) */                            \
  X(swiglu)                                                                                              \
  /* sources: no inputs (ops/source.cpp) */                                                              \
  X(full) X(arange)                                                                                      \
  /* reductions over axes (ops/reduce.cpp) */                                                            \
  X(reduce_sum) X(reduce_mean) X(reduce_max) X(reduce_amax)                                              \
  /* row-wise composites over the last axis (ops/norm.cpp) */                                            \
  X(layernorm) X(rmsnorm) X(softmax) X(rope)                                                             \
  /* contractions (ops/matmul.cpp, ops/attention.cpp) */                                                 \
  X(matmul) X(linear) X(scaled_linear) X(attention)                                                      \
  /* data movement (ops/view.cpp) */                                                                     \
  X(reshape) X(transpose) X(broadcast) X(concat) X(split) X(slice) X(gather)                             \
  /* FP8 quantization with scales; weight-scale packing into a GEMM's layout (ops/quant.cpp) */          \
  X(quantize) X(dequantize) X(pack_scales)
// clang-format on

enum class Op : uint16_t {
#define KILN_OP_ENUM(name) name,
  KILN_OPS(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};
inline constexpr int kOpCount = 0
#define KILN_OP_COUNT(name) +1
    KILN_OPS(KILN_OP_COUNT)
#undef KILN_OP_COUNT
    ;

// Traits: what passes and codegen may assume about an op. All ops are pure (no side effects).
enum OpTrait : uint32_t {
  kTraitElementwise = 1u << 0,   // output element i depends only on input elements i (after broadcast)
  kTraitReduction = 1u << 1,     // reduces one or more axes
  kTraitRowwise = 1u << 2,       // reads whole rows of the last axis, writes rows of the same length
  kTraitMatmul = 1u << 3,        // a GEMM (library op)
  kTraitAttention = 1u << 4,     // scaled dot-product attention (library or dedicated kernel)
  kTraitView = 1u << 5,          // moves data without arithmetic (reshape, transpose, slice, ...)
  kTraitComposite = 1u << 6,     // decomposes into primitives (layernorm, rmsnorm, softmax, rope, gelu, ...)
  kTraitQuantize = 1u << 7,      // produces or consumes FP8 values with scales
  kTraitSource = 1u << 8,        // no inputs: values from attributes only
  kTraitCommutative = 1u << 9,   // binary op whose operands may be swapped
  kTraitTranscendental = 1u << 10,  // uses exp/log/tanh/... (costlier per element)
};

// One attribute an op accepts. `required` attributes must be present; others have documented defaults.
struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required;
  std::string_view doc;
};

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorType& other) const = default;
};
std::string type_to_string(const TensorType& type);  // "bf16[1,4096,3072]"
size_t type_bytes(const TensorType& type);

// What inference and cost see of a node: its input types and attributes.
struct OpCall {
  std::span<const TensorType> inputs;
  const Attrs& attrs;
};

// Work of one execution: arithmetic operations and the minimum bytes any implementation must move
// (each input read once, each output written once; pure views move nothing).
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

// What the reference implementation sees: input tensors, attributes, and outputs already allocated with the
// inferred types. It computes in double and stores each output rounded to its dtype.
struct RefCall {
  std::span<const Tensor* const> inputs;
  const Attrs& attrs;
  std::span<Tensor> outputs;
};

using InferFn = Result<std::vector<TensorType>> (*)(const OpCall& call);
using CostFn = OpCost (*)(const OpCall& call, std::span<const TensorType> outputs);
using ReferenceFn = Status (*)(const RefCall& call);
// How many leading output axes index independent rows: output element [i0..iL-1, rest] reads only input
// elements of the same leading index (inputs of full rank) or broadcast ones. Fusion groups nodes whose rows
// line up; an op without this function is never fused (library ops, gathers, sources).
using IndependentAxesFn = int (*)(const OpCall& call, std::span<const TensorType> outputs);

struct OpDef {
  Op op;
  std::string_view name;
  uint32_t traits;
  int min_inputs;
  int max_inputs;  // -1: unbounded (concat)
  std::span<const AttrSpec> attrs;
  InferFn infer;
  CostFn cost;
  ReferenceFn reference;
  std::string_view summary;  // one line for `kiln ops` and docs
  IndependentAxesFn independent_axes = nullptr;
};

// One definition per op, each in its family file (external linkage comes from these declarations).
#define KILN_OP_DECLARE(name) extern const OpDef op_def_##name;
KILN_OPS(KILN_OP_DECLARE)
#undef KILN_OP_DECLARE

const OpDef& op_def(Op op);
std::string_view op_name(Op op);
std::optional<Op> find_op(std::string_view name);
std::span<const OpDef* const> all_op_defs();
inline bool op_has_trait(Op op, uint32_t trait) { return (op_def(op).traits & trait) != 0; }

// Checks a node's attributes against its op's schema (unknown names, wrong kinds, missing required ones)
// and its input count, then runs inference. Errors do not name the node; callers add that context.
Result<std::vector<TensorType>> infer_node(Op op, std::span<const TensorType> inputs, const Attrs& attrs);

// Converts an attribute value to the kind the schema asks for when that is lossless (int -> float,
// int list -> float list, empty list -> either). Parsers use it so that "1" and "1.0" mean the same.
std::optional<AttrValue> coerce_attr(const AttrValue& value, AttrKind wanted);
const AttrSpec* find_attr_spec(const OpDef& def, std::string_view name);

}  // namespace kiln
