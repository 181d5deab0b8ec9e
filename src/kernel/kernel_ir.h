// The kernel IR: what one generated kernel computes, independent of how it maps onto threads (that is the
// Schedule, kernel/schedule.h) and of the target language (the emitter's dialect, kernel/emit.h).
//
// A kernel runs over `rows`: the leading `row_shape` axes that every value it keeps (its stages) shares, so
// rows are independent tasks. Per row it runs its stages in order; each stage computes one value of the fused
// group over that row's elements (its local space: the axes after the row axes):
//   * an elementwise stage evaluates an expression per element and keeps it in a row-local buffer (when later
//     stages read it) and/or stores it to a kernel output, converting to the output dtype (fp8 included);
//   * a reduce stage accumulates an expression over its input's local space into the kept elements (sum,
//     mean, max, amax with NaN propagation), which later stages read broadcast back.
// Expressions form a DAG (`exprs`, hash-consed): loads of kernel inputs through index maps (views, strides,
// broadcasts, the RoPE pair partner and concat pieces, all folded into affine index expressions), reads of
// earlier stages, constants, the graph's elementwise ops computed in f32, and rounding to each value's
// storage dtype, so a kernel rounds where the reference executor rounds.
//
// Values that several members read may be cached as optional stages ("row held in a local buffer"); a
// schedule with cache_row = false recomputes them from memory instead ("re-read"). Both are correct.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernel/index_expr.h"

namespace kiln::kernel {

struct KernelParam {
  ValueId value = -1;  // in the graph the kernel was lowered from
  std::string name;
  TensorType type;
};

enum class ExprKind : uint8_t { load, read_stage, constant, unary, binary, round, select };

struct Expr {
  ExprKind kind = ExprKind::constant;
  Op op = Op::add;          // unary / binary: the graph op (add, exp, gelu, ...)
  bool gelu_tanh = false;   // gelu: the tanh approximation
  DType dtype = DType::f32; // round: the storage dtype rounded to; load: the input's dtype
  int param = -1;           // load: kernel input index
  int stage = -1;           // read_stage: the stage read
  IndexExpr offset;         // load: flat element offset in the input; read_stage: offset in the row-local buffer
  bool guarded = false;     // load / read_stage under a select branch: the offset is clamped into range
  double value = 0;         // constant
  std::vector<int> operands;  // unary 1, binary 2, select {then, else}, round 1
  IndexExpr condition;        // select: operands[0] where condition < bound, else operands[1]
  int64_t bound = 0;
  int inline_fallback = -1;   // read_stage of an optional stage: the same element recomputed
};

enum class ReduceKind : uint8_t { sum, mean, max, amax };

struct Stage {
  ValueId value = -1;
  std::string name;
  TensorType type;             // the value's type (whole tensor)
  int64_t local_size = 0;      // elements of the value per row
  Shape space;                 // iteration space per row: the value's local axes, or the reduced input's
  std::vector<int> space_vars; // loop variable per axis of `space` (-1 for an axis of extent 1)
  int expr = -1;               // the element (elementwise) or accumulated term (reduce) at the loop point
  bool reduce = false;
  ReduceKind reduce_kind = ReduceKind::sum;
  int64_t reduce_count = 1;    // elements accumulated per output element (mean divides by it)
  std::vector<bool> reduced_axes;  // reduce: per axis of `space`
  IndexExpr target;            // local offset of the element written at the loop point
  int output = -1;             // kernel output index it is stored to, or -1
  bool read_later = false;     // later stages read it: kept in a row-local buffer
  bool optional = false;       // a cache only (cache_row): may be skipped, its reads recomputed
};

struct Kernel {
  std::string name;
  std::vector<KernelParam> inputs;
  std::vector<KernelParam> outputs;
  Shape row_shape;
  int64_t rows = 1;
  std::vector<int> row_vars;  // per row axis (-1 for extent 1)
  std::vector<IndexVar> vars; // every loop variable, by id
  std::vector<Expr> exprs;
  std::vector<Stage> stages;
  std::vector<NodeId> members;
  double bytes = 0;  // inputs read once + outputs written once

  int64_t extent(int var) const { return vars.at(static_cast<size_t>(var)).extent; }
  // Largest number of elements one row touches in any stage (the row length for schedules).
  int64_t max_row_elements() const;
  bool has_reduction() const;
};

// Lowers graph nodes (a fused group, or one node) to a kernel. The kernel's inputs are the values the
// members read from outside (constants from `full` nodes are folded in), its outputs the member values read
// outside the members or named as graph outputs, in member order. Unsupported members (library ops, integer
// dtypes, composites left undecomposed) are an `unsupported` error naming the node and why.
Result<Kernel> lower_nodes(const Graph& graph, const std::vector<NodeId>& members, const std::string& name);

// A concat along a row axis whose pieces are each computed by other members is first tried as one kernel over
// the concat's rows (merge_concat_pieces): each piece lowered alone, and when all are the same kernel up to
// what their loads read, every load becomes a choice by row of the pieces' loads.
Result<Kernel> merge_concat_pieces(const std::vector<Kernel>& pieces, int64_t axis, const KernelParam& output,
                                   const std::vector<NodeId>& members, const std::string& name);

// Bytes the kernel reads from its inputs: the distinct elements its loads touch (lower.cpp).
double input_bytes_read(const Kernel& kernel);

// Whether `op` can appear inside a generated kernel at all (with floating dtypes).
bool kernel_supports_op(Op op);

// When stage `stage` is a second central moment, the stage m it is taken about: it accumulates (t - m)^2 (mean
// or sum) where t is the term of m, a mean stage, over the same space (layernorm's variance); both are one f32
// value per row over one loop, and m is not an output. Else -1 (moments.cpp). Such a pair can be accumulated in
// one pass over the row (Schedule::moments).
int central_moment_of(const Kernel& kernel, int stage);
bool has_central_moments(const Kernel& kernel);

// Readable dump of the IR (for docs, debugging and tests).
std::string kernel_to_text(const Kernel& kernel);
// Structural hash of what the kernel computes (exprs, stages, shapes, dtypes; not names): equal kernels
// from the 57 identical blocks of a model share one hash.
std::string kernel_hash(const Kernel& kernel);

// When every output of the kernel is its single input read as a contiguous window (a chain of reshapes and
// slices/splits behind unit axes), the element offset of each output in the input; else empty. Such a
// kernel need not run: its outputs can alias the input.
std::vector<int64_t> alias_offsets(const Kernel& kernel);

// When the kernel's one output is its single input read as a column window: the output's elements, in
// order, are rows of `row` contiguous input elements starting `pitch` apart, from element `offset` (a slice
// of the last axis, then reshapes). Such a kernel need not run where its readers take pitched operands.
struct PitchedWindow {
  int64_t offset = 0, row = 0, pitch = 0;
};
std::optional<PitchedWindow> pitched_window(const Kernel& kernel);

}  // namespace kiln::kernel
