#include "passes/gemm_rows.h"

#include <fmt/format.h>

namespace kiln::passes {
namespace {
constexpr int64_t kScaleBlock = 128;  // rows of one FP8 weight scale block (ir/ops/matmul.cpp)
}  // namespace

GemmOperands gemm_operands(const Node& gemm) {
  if (gemm.op == Op::linear) return {1, std::nullopt, gemm.inputs.size() > 2 ? std::optional<size_t>(2) : std::nullopt};
  return {2, 3, gemm.inputs.size() > 4 ? std::optional<size_t>(4) : std::nullopt};
}

std::optional<std::string> scale_cut_blocker(const Graph& graph, const Node& gemm, int64_t cut) {
  const GemmOperands ops = gemm_operands(gemm);
  if (!ops.scale) return std::nullopt;
  if (gemm.attrs.get_string("ws_layout", "row_major") != "row_major") return std::string("its weight scales are packed");
  const Shape& ws = graph.value(gemm.inputs[*ops.scale]).type.shape;
  const int64_t n = graph.value(gemm.inputs[ops.weight]).type.shape[0];
  if (ws.empty() || ws == Shape{n, 1} || cut % kScaleBlock == 0) return std::nullopt;
  return fmt::format("its 128x128 block scales cannot be cut at column {}", cut);
}

namespace {

// Rows [start, end) of `v`; where `v` is a concat along axis 0 (merge-gemms' load-time join) and the rows lie in
// one of its pieces, of that piece, so that no joined copy is made only to be cut again.
ValueId rows_of(GraphCopier& copier, const char* pass, ValueId v, int64_t start, int64_t end) {
  const Graph& g = copier.target();
  const TensorType& t = g.value(v).type;
  if (start == 0 && end == t.shape[0]) return v;
  const NodeId producer = g.value(v).producer;
  if (producer >= 0 && g.node(producer).op == Op::concat && g.node(producer).attrs.get_int("axis", 0) == 0) {
    int64_t at = 0;
    for (ValueId piece : g.node(producer).inputs) {
      const int64_t rows = g.value(piece).type.shape[0];
      if (start >= at && end <= at + rows) return rows_of(copier, pass, piece, start - at, end - at);
      at += rows;
    }
  }
  const std::string name = copier.fresh_name(fmt::format("{}.rows{}_{}", g.value(v).name, start, end));
  return copier.add(pass, Op::slice, {v}, {{"axis", int64_t{0}}, {"start", start}, {"end", end}, {"step", int64_t{1}}},
                    {name})[0];
}

}  // namespace

ValueId gemm_rows(GraphCopier& copier, const char* pass, ValueId v, int64_t n0, int64_t n1, int64_t n) {
  const TensorType& t = copier.target().value(v).type;
  if (t.shape.empty()) return v;  // a per-tensor scale
  const bool blocks = n > 0 && t.shape != Shape{n, 1};
  const int64_t start = blocks ? n0 / kScaleBlock : n0;
  const int64_t end = blocks ? (n1 + kScaleBlock - 1) / kScaleBlock : n1;
  return rows_of(copier, pass, v, start, end);
}

}  // namespace kiln::passes
