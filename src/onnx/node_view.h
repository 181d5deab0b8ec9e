// NodeView: one ONNX node as its lowering sees it — typed attribute access that rejects attributes the
// lowering does not handle, inputs as symbols, and constant inputs as integer lists. Internal to src/onnx/.
#pragma once

#include <onnx/onnx_pb.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace kiln::onnx {

std::optional<DType> onnx_elem_dtype(int32_t elem_type);

class NodeView {
 public:
  NodeView(Importer& im, const ::onnx::NodeProto& node, const std::vector<Sym>& in) : im(im), node(node), in(in) {}

  Importer& im;
  const ::onnx::NodeProto& node;
  const std::vector<Sym>& in;

  // Every attribute must be in `known`; another one is an unsupported-attribute error.
  Status allow(std::initializer_list<const char*> known) const;
  const ::onnx::AttributeProto* attr(const std::string& name) const;
  Result<int64_t> get_int(const std::string& name, int64_t fallback) const;
  Result<double> get_float(const std::string& name, double fallback) const;
  Result<std::string> get_string(const std::string& name, const std::string& fallback) const;
  Result<std::optional<std::vector<int64_t>>> get_ints(const std::string& name) const;

  bool has(size_t i) const { return i < in.size() && in[i].present(); }
  // Input i, which must be present.
  Result<Sym> input(size_t i) const;
  Result<TensorType> type(size_t i) const;
  // Input i as integers: it must be a constant (shapes, axes, indices fold with static shapes).
  Result<std::vector<int64_t>> ints(size_t i, const char* what) const;
  Result<std::shared_ptr<const Tensor>> constant(size_t i, const char* what) const;
  int outputs() const { return node.output_size(); }
};

Error unsupported(const std::string& message);

// Lowerings, by family (lower_ops.cpp: elementwise, logic, reductions; lower_shapes.cpp: shapes, views,
// constants; lower_layers.cpp: contractions, norms, attention, rope, conv).
using LowerFn = Result<std::vector<Sym>> (*)(NodeView& n);
LowerFn find_layer_lowering(const std::string& op_type);
LowerFn find_shape_lowering(const std::string& op_type);  // lower_shapes.cpp

// Shared lowering helpers.
Result<Sym> reshape_to(Importer& im, const Sym& x, const Shape& shape);
Result<Sym> transpose_to(Importer& im, const Sym& x, std::vector<int64_t> perm);
Result<Sym> binary_op(Importer& im, Op op, const Sym& a, const Sym& b);

}  // namespace kiln::onnx
