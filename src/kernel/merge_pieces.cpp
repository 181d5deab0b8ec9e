// Congruent kernels across a concat along a row axis become one kernel over the concat's rows (kernel_ir.h,
// lower_concat_of_pieces). FLUX's joint attention concatenates the text and image q (and k, v) along the token
// axis: each stream's RMSNorm+RoPE is the same kernel over different rows and different inputs, so one kernel
// over all 4608 rows, loading each row's inputs from its own stream, replaces two kernels and the concat copy.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "kernel/kernel_ir.h"

namespace kiln::kernel {
namespace {

Error not_congruent(const std::string& why) { return make_error(ErrorCode::unsupported, "concat pieces: " + why); }

// Whether the two expressions compute the same thing, apart from what and where a load reads.
bool same_shape(const Expr& a, const Expr& b) {
  if (a.kind != b.kind || a.op != b.op || a.gelu_tanh != b.gelu_tanh || a.dtype != b.dtype || a.stage != b.stage ||
      a.value != b.value || a.operands != b.operands || a.bound != b.bound || a.inline_fallback != b.inline_fallback ||
      a.guarded != b.guarded) {
    return false;
  }
  if (a.kind == ExprKind::load) return true;
  return index_key(a.offset) == index_key(b.offset) && index_key(a.condition) == index_key(b.condition);
}

bool same_stage(const Stage& a, const Stage& b) {
  return a.local_size == b.local_size && a.space == b.space && a.space_vars == b.space_vars && a.expr == b.expr &&
         a.reduce == b.reduce && a.reduce_kind == b.reduce_kind && a.reduce_count == b.reduce_count &&
         a.reduced_axes == b.reduced_axes && index_key(a.target) == index_key(b.target) && a.output == b.output &&
         a.read_later == b.read_later && a.optional == b.optional && a.type.dtype == b.type.dtype;
}

}  // namespace

Result<Kernel> merge_concat_pieces(const std::vector<Kernel>& pieces, int64_t axis, const KernelParam& output,
                                   const std::vector<NodeId>& members, const std::string& name) {
  if (pieces.size() < 2) return not_congruent("fewer than two pieces");
  const Kernel& first = pieces[0];
  if (axis < 0 || static_cast<size_t>(axis) >= first.row_shape.size()) return not_congruent("the concat axis is not a row axis");
  const int row_var = first.row_vars[static_cast<size_t>(axis)];
  if (row_var < 0) return not_congruent("a piece has one row along the concat axis");
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (const Kernel& p : pieces) {
    if (p.outputs.size() != 1) return not_congruent("a piece has more than one output");
    if (p.row_shape.size() != first.row_shape.size() || p.row_vars != first.row_vars || p.vars.size() != first.vars.size() ||
        p.exprs.size() != first.exprs.size() || p.stages.size() != first.stages.size()) {
      return not_congruent("pieces of different structure");
    }
    for (size_t a = 0; a < p.row_shape.size(); ++a) {
      if (static_cast<int64_t>(a) != axis && p.row_shape[a] != first.row_shape[a]) return not_congruent("row shapes differ off the concat axis");
    }
    for (size_t v = 0; v < p.vars.size(); ++v) {
      if (static_cast<int>(v) != row_var && p.vars[v].extent != first.vars[v].extent) return not_congruent("loop extents differ");
    }
    for (size_t e = 0; e < p.exprs.size(); ++e) {
      if (!same_shape(p.exprs[e], first.exprs[e])) return not_congruent(fmt::format("expression {} differs", e));
      // A select on the concat's row variable inside a piece would need its rows shifted too.
      if (p.exprs[e].kind == ExprKind::select && index_mentions(p.exprs[e].condition, row_var)) {
        return not_congruent("a piece selects on the concat's rows");
      }
    }
    for (size_t s = 0; s < p.stages.size(); ++s) {
      if (!same_stage(p.stages[s], first.stages[s])) return not_congruent(fmt::format("stage {} differs", s));
    }
    starts.push_back(total);
    total += p.row_shape[static_cast<size_t>(axis)];
  }
  Kernel k = first;
  k.name = name;
  k.members = members;
  k.row_shape[static_cast<size_t>(axis)] = total;
  k.rows = shape_numel(k.row_shape);
  k.vars[static_cast<size_t>(row_var)].extent = total;
  if (output.type.shape.size() < k.row_shape.size() ||
      !std::equal(k.row_shape.begin(), k.row_shape.end(), output.type.shape.begin())) {
    return not_congruent("the concat's rows are not the pieces' rows joined");
  }
  k.outputs = {output};
  for (Stage& s : k.stages) {
    if (s.type.shape.size() > static_cast<size_t>(axis)) s.type.shape[static_cast<size_t>(axis)] = total;
    if (s.output >= 0) {
      s.value = output.value;
      s.name = output.name;
      s.type = output.type;
    }
  }
  // Inputs: every piece's, each once.
  k.inputs.clear();
  std::map<ValueId, int> param_of;
  std::vector<std::vector<int>> remap(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (const KernelParam& p : pieces[i].inputs) {
      auto [it, added] = param_of.emplace(p.value, static_cast<int>(k.inputs.size()));
      if (added) k.inputs.push_back(p);
      remap[i].push_back(it->second);
    }
  }
  // Each load becomes the choice of its piece's load by the row: piece i's rows start at starts[i], its loads
  // see its own row index (the merged one minus the start), guarded since other rows reach past its tensor.
  const VarExtents extents = [&](int v) { return k.extent(v); };
  const size_t n_exprs = k.exprs.size();
  for (size_t e = 0; e < n_exprs; ++e) {
    if (k.exprs[e].kind != ExprKind::load) continue;
    std::vector<int> loads;
    for (size_t i = 0; i < pieces.size(); ++i) {
      Expr load = pieces[i].exprs[e];
      load.param = remap[i][static_cast<size_t>(load.param)];
      load.offset = index_substitute(load.offset, row_var,
                                     index_add(IndexExpr::of_var(row_var), IndexExpr::of_constant(-starts[i])), extents);
      load.guarded = true;
      loads.push_back(static_cast<int>(k.exprs.size()));
      k.exprs.push_back(load);
    }
    // select(row < starts[1]: piece 0, select(row < starts[2]: piece 1, ...)), built from the last piece up.
    int chosen = loads.back();
    for (size_t i = pieces.size() - 1; i-- > 0;) {
      Expr select;
      select.kind = ExprKind::select;
      select.condition = IndexExpr::of_var(row_var);
      select.bound = starts[i + 1];
      select.operands = {loads[i], chosen};
      if (i == 0) {
        k.exprs[e] = select;  // in place: every reader of the original load now reads the choice
      } else {
        chosen = static_cast<int>(k.exprs.size());
        k.exprs.push_back(select);
      }
    }
  }
  k.bytes = 0;
  for (const KernelParam& p : k.outputs) k.bytes += static_cast<double>(type_bytes(p.type));
  k.bytes += input_bytes_read(k);
  return k;
}

}  // namespace kiln::kernel
