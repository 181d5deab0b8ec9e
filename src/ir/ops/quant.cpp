// FP8 quantization with scales: quantize(x) -> (q, scale) and dequantize(q, scale) -> y, per tensor, per
// token (one scale per row of the last axis) or per block (one scale per tile of the trailing axes, as
// DeepSeek-style block-scaled GEMMs use: [1,128] for activations, [128,128] for weights).
// Reference semantics, per group of elements sharing a scale:
//   amax  = max |x| in double (NaN propagates, as torch.amax and kiln's reduce_amax do, so the composite and
//           its decomposition agree)
//   scale = f32(max(amax, 1e-12) / fmax)          fmax = largest finite value of the FP8 dtype
//   q     = fp8(clamp(x / scale, -fmax, fmax))    NaN stays NaN
//   y     = q * scale, rounded once to the output dtype.
// With block granularity, scale_layout "k_major" stores the scale grid with its last (K-block) axis first, the
// layout cuBLASLt reads 1x128 activation scales in (ir/ops/op_util.h).
// pack_scales(scale) rewrites a weight's scales from the layout a checkpoint stores them in into the layout a
// GEMM library reads (see its section below); it moves values without changing them.
#include <algorithm>
#include <cmath>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::attr_error;
using ops::shape_error;

// Smallest amax a scale is computed from, so that an all-zero group gets a finite, nonzero scale.
constexpr double kMinAmax = 1e-12;

// How a tensor is cut into groups that share one scale. Per axis of the quantized tensor: how many groups lie
// along it (`grid`) and how many elements one group spans (`extent`). The scale tensor is the grid, or with
// `k_major` (scale_layout "k_major", block granularity only) the grid with its last axis moved to the front:
// the k-block-major layout a block-scaled GEMM reads activation scales in (ops::activation_block_scale_shape).
struct QuantGroups {
  Shape scale_shape;
  Shape grid;
  std::vector<int64_t> extent;
  bool k_major = false;
};

// The grid with its last axis first (scale_layout "k_major").
Shape k_major_shape(const Shape& grid) {
  if (grid.empty()) return grid;
  Shape s = {grid.back()};
  s.insert(s.end(), grid.begin(), grid.end() - 1);
  return s;
}

Result<bool> k_major_attr(const Attrs& attrs, const std::string& granularity, const char* op) {
  const std::string layout = attrs.get_string("scale_layout", "row_major");
  if (layout != "row_major" && layout != "k_major") {
    return attr_error(std::string("attribute 'scale_layout' of ") + op +
                      " must be \"row_major\" or \"k_major\", got \"" + layout + "\"");
  }
  if (layout == "k_major" && granularity != "block") {
    return attr_error(std::string("attribute 'scale_layout' \"k_major\" of ") + op +
                      " applies only to granularity \"block\", got \"" + granularity + "\"");
  }
  return layout == "k_major";
}

Result<QuantGroups> quant_groups(const Attrs& attrs, const TensorType& x, const char* op) {
  const std::string granularity = attrs.get_string("granularity", "token");
  const size_t rank = x.shape.size();
  if (granularity != "block" && attrs.has("block")) {
    return attr_error(std::string("attribute 'block' of ") + op + " applies only to granularity \"block\", got \"" +
                      granularity + "\"");
  }
  QuantGroups g;
  KILN_ASSIGN_OR_RETURN(g.k_major, k_major_attr(attrs, granularity, op));
  g.grid.assign(rank, 1);
  g.extent.assign(rank, 1);
  if (granularity == "tensor") {
    for (size_t i = 0; i < rank; ++i) g.extent[i] = std::max<int64_t>(x.shape[i], 1);
    g.scale_shape = {};
    return g;
  }
  if (granularity == "token") {
    if (rank == 0) return shape_error(std::string(op) + " per token needs rank >= 1, got " + type_to_string(x));
    for (size_t i = 0; i + 1 < rank; ++i) g.grid[i] = x.shape[i];
    g.extent.back() = std::max<int64_t>(x.shape.back(), 1);
    g.scale_shape = g.grid;
    return g;
  }
  if (granularity == "block") {
    const std::vector<int64_t> block = attrs.get_ints("block", {1, 128});
    if (block.empty()) return attr_error(std::string("attribute 'block' of ") + op + " must not be empty");
    for (int64_t b : block) {
      if (b < 1) {
        return attr_error(std::string("attribute 'block' of ") + op + " must be positive sizes, got " +
                          shape_to_string(block));
      }
    }
    if (block.size() > rank) {
      return shape_error(std::string(op) + " with block " + shape_to_string(block) +
                         " needs rank >= " + std::to_string(block.size()) + ", got " + type_to_string(x));
    }
    const size_t lead = rank - block.size();
    for (size_t i = 0; i < lead; ++i) g.grid[i] = x.shape[i];
    for (size_t i = 0; i < block.size(); ++i) {
      g.grid[lead + i] = (x.shape[lead + i] + block[i] - 1) / block[i];
      g.extent[lead + i] = block[i];
    }
    g.scale_shape = g.k_major ? k_major_shape(g.grid) : g.grid;
    return g;
  }
  return attr_error(std::string("attribute 'granularity' of ") + op +
                    " must be \"tensor\", \"token\" or \"block\", got \"" + granularity + "\"");
}

// group[i]: the flat index into the scale tensor of element i of a tensor of shape `shape`.
std::vector<int64_t> group_of_elements(const Shape& shape, const QuantGroups& g) {
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> grid_strides = shape_strides(g.grid);
  if (g.k_major && !g.grid.empty()) {
    // Scale axes are (last grid axis, the others in order): the last grid axis has the outermost stride.
    const std::vector<int64_t> scale_strides = shape_strides(g.scale_shape);
    grid_strides.back() = scale_strides[0];
    for (size_t a = 0; a + 1 < g.grid.size(); ++a) grid_strides[a] = scale_strides[a + 1];
  }
  std::vector<int64_t> group(static_cast<size_t>(n));
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (size_t a = 0; a < shape.size(); ++a) flat += index[a] / g.extent[a] * grid_strides[a];
    group[i] = flat;
    for (int64_t a = static_cast<int64_t>(shape.size()) - 1; a >= 0; --a) {
      if (++index[a] < shape[a]) break;
      index[a] = 0;
    }
  }
  return group;
}

Result<DType> fp8_attr(const Attrs& attrs, const char* op) {
  KILN_ASSIGN_OR_RETURN(DType dtype, ops::dtype_attr(attrs, "dtype", DType::f8e4m3));
  if (dtype != DType::f8e4m3 && dtype != DType::f8e5m2) {
    return attr_error(std::string("attribute 'dtype' of ") + op + " must be \"f8e4m3\" or \"f8e5m2\", got \"" +
                      std::string(dtype_name(dtype)) + "\"");
  }
  return dtype;
}

// ---- quantize(x) -> (q, scale) ----

Result<std::vector<TensorType>> infer_quantize(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  KILN_ASSIGN_OR_RETURN(DType q_dtype, fp8_attr(call.attrs, "quantize"));
  if (!dtype_is_float(x.dtype)) return shape_error("quantize needs a floating input, got " + type_to_string(x));
  KILN_ASSIGN_OR_RETURN(QuantGroups groups, quant_groups(call.attrs, x, "quantize"));
  return std::vector<TensorType>{{q_dtype, x.shape}, {DType::f32, groups.scale_shape}};
}

// Per element: |x|, a compare for the amax, a divide and a clamp.
OpCost cost_quantize(const OpCall& call, std::span<const TensorType> outputs) {
  OpCost cost = ops::streaming_cost(call, outputs, 0.0);
  cost.flops = 4.0 * static_cast<double>(shape_numel(call.inputs[0].shape));
  return cost;
}

Status reference_quantize(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& q = call.outputs[0];
  Tensor& scale = call.outputs[1];
  KILN_ASSIGN_OR_RETURN(const QuantGroups groups,
                        quant_groups(call.attrs, TensorType{x.dtype(), x.shape()}, "quantize"));
  const std::vector<int64_t> group = group_of_elements(x.shape(), groups);
  const double fmax = dtype_max_finite(q.dtype());

  std::vector<double> amax(static_cast<size_t>(scale.numel()), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.get(i);
    double& a = amax[group[i]];
    a = std::isnan(a) || std::isnan(v) ? NAN : std::max(a, std::fabs(v));
  }
  // The scale is stored in f32, so x is divided by the f32 value, not the exact quotient: dequantize then
  // multiplies by exactly the divisor used here.
  std::vector<double> scales(amax.size());
  for (size_t g = 0; g < amax.size(); ++g) {
    const double guarded = std::isnan(amax[g]) ? amax[g] : std::max(amax[g], kMinAmax);
    scales[g] = round_to_dtype(guarded / fmax, DType::f32);
    scale.set(static_cast<int64_t>(g), scales[g]);
  }
  // The clamp is a safety net, as in the kernels this models: rounding the scale to f32 can put x / scale
  // above fmax, but by less than FP8 rounding absorbs, so it only matters for a coarser scale.
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double scaled = x.get(i) / scales[group[i]];
    q.set(i, std::isnan(scaled) ? scaled : std::clamp(scaled, -fmax, fmax));
  }
  return ok_status();
}

// ---- dequantize(q, scale) -> y = q * scale ----

Result<std::vector<TensorType>> infer_dequantize(const OpCall& call) {
  const TensorType& q = call.inputs[0];
  const TensorType& scale = call.inputs[1];
  KILN_ASSIGN_OR_RETURN(DType out_dtype, ops::dtype_attr(call.attrs, "dtype", DType::f32));
  if (!dtype_is_float(out_dtype)) {
    return attr_error("attribute 'dtype' of dequantize must be a floating dtype, got \"" +
                      std::string(dtype_name(out_dtype)) + "\"");
  }
  if (q.dtype != DType::f8e4m3 && q.dtype != DType::f8e5m2) {
    return shape_error("dequantize needs an f8e4m3 or f8e5m2 q, got " + type_to_string(q));
  }
  KILN_ASSIGN_OR_RETURN(QuantGroups groups, quant_groups(call.attrs, q, "dequantize"));
  if (scale.shape != groups.scale_shape) {
    return shape_error("dequantize scale must be " + shape_to_string(groups.scale_shape) + " for granularity \"" +
                       call.attrs.get_string("granularity", "token") + "\"" +
                       (groups.k_major ? " (scale_layout \"k_major\")" : "") + " of q " + type_to_string(q) +
                       ", got " + type_to_string(scale));
  }
  if (scale.dtype != DType::f32) return shape_error("dequantize scale must be f32, got " + type_to_string(scale));
  return std::vector<TensorType>{{out_dtype, q.shape}};
}

OpCost cost_dequantize(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 1.0);
}

Status reference_dequantize(const RefCall& call) {
  const Tensor& q = *call.inputs[0];
  const Tensor& scale = *call.inputs[1];
  Tensor& y = call.outputs[0];
  KILN_ASSIGN_OR_RETURN(const QuantGroups groups,
                        quant_groups(call.attrs, TensorType{q.dtype(), q.shape()}, "dequantize"));
  const std::vector<int64_t> group = group_of_elements(q.shape(), groups);
  for (int64_t i = 0; i < q.numel(); ++i) y.set(i, q.get(i) * scale.get(group[i]));
  return ok_status();
}

// ---- pack_scales(scale) -> f32 scales in the layout the GEMM reads ----
//   "vector": [N, 1] or [N] (one scale per output channel, as checkpoints store them) -> f32 [N], the contiguous
//             per-channel vector an outer-vector-scaled GEMM (cuBLASLt OUTER_VEC_32F) reads.
//   "blocks": a 128x128 block grid [N/128, K/128] as checkpoints store it -> f32 [N/128, round_up(K/128, 4)],
//             each row padded with zeros to the alignment the block-scaled GEMM reads (op_util.h).
// Per-tensor scales need no packing: the GEMM reads a scalar as it is.

Result<std::vector<TensorType>> infer_pack_scales(const OpCall& call) {
  const TensorType& s = call.inputs[0];
  if (!dtype_is_float(s.dtype)) return shape_error("pack_scales needs floating scales, got " + type_to_string(s));
  const std::string layout = call.attrs.get_string("layout", "");
  if (layout == "vector") {
    if (s.shape.size() == 1 || (s.shape.size() == 2 && s.shape[1] == 1)) {
      return std::vector<TensorType>{{DType::f32, {s.shape[0]}}};
    }
    return shape_error("pack_scales \"vector\" needs per-channel scales [N, 1] or [N], got " + type_to_string(s));
  }
  if (layout == "blocks") {
    if (s.shape.size() != 2) {
      return shape_error("pack_scales \"blocks\" needs a block grid [N/128, K/128], got " + type_to_string(s));
    }
    const int64_t row = (s.shape[1] + ops::kGemmScaleRowAlign - 1) / ops::kGemmScaleRowAlign * ops::kGemmScaleRowAlign;
    return std::vector<TensorType>{{DType::f32, {s.shape[0], row}}};
  }
  return attr_error("attribute 'layout' of pack_scales must be \"vector\" or \"blocks\", got \"" + layout + "\"");
}

OpCost cost_pack_scales(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 0.0);
}

Status reference_pack_scales(const RefCall& call) {
  const Tensor& s = *call.inputs[0];
  Tensor& out = call.outputs[0];
  if (out.shape() == s.shape() || out.shape().size() == 1) {  // vector, or a grid already aligned
    for (int64_t i = 0; i < s.numel(); ++i) out.set(i, s.get(i));
    return ok_status();
  }
  const int64_t rows = s.shape()[0], cols = s.shape()[1], stride = out.shape()[1];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < stride; ++c) out.set(r * stride + c, c < cols ? s.get(r * cols + c) : 0.0);
  }
  return ok_status();
}

const AttrSpec kPackScalesAttrs[] = {
    {"layout", AttrKind::string, true,
     "\"vector\" ([N,1] -> f32 [N]) or \"blocks\" ([N/128,K/128] -> f32 [N/128, round_up(K/128,4)])"},
};

constexpr std::string_view kGranularityDoc =
    "\"tensor\" (one scale), \"token\" (default; one per row of the last axis) or \"block\"";
constexpr std::string_view kBlockDoc =
    "granularity \"block\" only: tile sizes of the trailing axes (default [1,128]); the scale has "
    "ceil(d/b) entries along each";

constexpr std::string_view kScaleLayoutDoc =
    "granularity \"block\" only: \"row_major\" (default; the scale is the block grid) or \"k_major\" (the "
    "grid's last axis first, [K/128, ...]: the activation layout a block-scaled GEMM reads)";

const AttrSpec kQuantizeAttrs[] = {
    {"dtype", AttrKind::string, false, "\"f8e4m3\" (default) or \"f8e5m2\""},
    {"granularity", AttrKind::string, false, kGranularityDoc},
    {"block", AttrKind::ints, false, kBlockDoc},
    {"scale_layout", AttrKind::string, false, kScaleLayoutDoc},
};
const AttrSpec kDequantizeAttrs[] = {
    {"dtype", AttrKind::string, false, "output dtype, floating (default \"f32\")"},
    {"granularity", AttrKind::string, false, kGranularityDoc},
    {"block", AttrKind::ints, false, kBlockDoc},
    {"scale_layout", AttrKind::string, false, kScaleLayoutDoc},
};

}  // namespace

// Rows: none for one scale per tensor; all but the last axis per token; the axes before the block's axes.
int independent_axes_quant(const OpCall& call, std::span<const TensorType>) {
  const auto rank = static_cast<int>(call.inputs[0].shape.size());
  const std::string granularity = call.attrs.get_string("granularity", "token");
  if (granularity == "tensor") return 0;
  if (granularity == "token") return std::max(0, rank - 1);
  // A k-major scale's leading axis is the K-block axis, not a row axis: no axis is independent in both
  // outputs (so, for one, sink-concat does not concatenate such scales along a row axis).
  if (call.attrs.get_string("scale_layout", "row_major") == "k_major") return 0;
  // Leading block extents of 1 (the 1 of a 1x128 activation block) keep their axes independent.
  const std::vector<int64_t> block = call.attrs.get_ints("block", {1, 128});
  int independent = rank - static_cast<int>(block.size());
  for (size_t i = 0; i < block.size() && block[i] == 1; ++i) ++independent;
  return std::max(0, independent);
}

// clang-format off
const OpDef op_def_quantize{Op::quantize, "quantize", kTraitQuantize | kTraitComposite, 1, 1, kQuantizeAttrs,
                            infer_quantize, cost_quantize, reference_quantize,
                            "x -> (fp8 q, f32 scale) per tensor, token or block; scale = amax / fp8 max",
                            independent_axes_quant};
const OpDef op_def_dequantize{Op::dequantize, "dequantize", kTraitQuantize, 2, 2, kDequantizeAttrs,
                              infer_dequantize, cost_dequantize, reference_dequantize,
                              "q * scale, with the scale layout quantize produces", independent_axes_quant};
const OpDef op_def_pack_scales{Op::pack_scales, "pack_scales", kTraitQuantize, 1, 1, kPackScalesAttrs,
                               infer_pack_scales, cost_pack_scales, reference_pack_scales,
                               "weight scales from checkpoint layout into the layout the GEMM reads"};
// clang-format on

}  // namespace kiln
