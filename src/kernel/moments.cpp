// Central moments in the kernel IR (kernel_ir.h, central_moment_of): a reduce stage that accumulates the squared
// deviation of another mean stage's term from that mean. Layernorm's variance is one (decompose.cpp writes
// reduce_mean((x - reduce_mean(x))^2)); the rule is structural, not a list of ops that lower to it.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernel/kernel_ir.h"

namespace kiln::kernel {
namespace {

// The expression an optional stage's read stands for (its value recomputed): what it means, cached or not.
int through_caches(const Kernel& k, int id) {
  while (id >= 0) {
    const Expr& e = k.exprs[static_cast<size_t>(id)];
    if (e.kind != ExprKind::read_stage || e.inline_fallback < 0 || !k.stages[static_cast<size_t>(e.stage)].optional) break;
    id = e.inline_fallback;
  }
  return id;
}

// Whether expressions `a` and `b` compute the same value at corresponding loop points, where `b`'s loop
// variables stand for `a`'s through `rename` (b's variable id -> a's). `compared`: pairs already under
// comparison (a pair met again is equal unless the first meeting finds otherwise, which ends it all), so a
// DAG is walked once, not once per path.
bool same_up_to_vars(const Kernel& k, int a, int b, const std::vector<std::pair<int, int>>& rename,
                     std::set<std::pair<int, int>>& compared) {
  a = through_caches(k, a);
  b = through_caches(k, b);
  if (a == b) return true;
  if (a < 0 || b < 0) return false;
  if (!compared.insert({a, b}).second) return true;
  const Expr& x = k.exprs[static_cast<size_t>(a)];
  const Expr& y = k.exprs[static_cast<size_t>(b)];
  if (x.kind != y.kind || x.op != y.op || x.gelu_tanh != y.gelu_tanh || x.dtype != y.dtype || x.param != y.param ||
      x.stage != y.stage || x.guarded != y.guarded || x.value != y.value || x.bound != y.bound ||
      x.operands.size() != y.operands.size()) {
    return false;
  }
  auto renamed = [&](IndexExpr e) {  // all at once: through fresh ids past the kernel's, so no renaming chains
    const int fresh = static_cast<int>(k.vars.size());
    auto extent = [&](int v) { return v >= fresh ? k.extent(rename[static_cast<size_t>(v - fresh)].second) : k.extent(v); };
    for (size_t i = 0; i < rename.size(); ++i) e = index_substitute(e, rename[i].first, IndexExpr::of_var(fresh + static_cast<int>(i)), extent);
    for (size_t i = 0; i < rename.size(); ++i) e = index_substitute(e, fresh + static_cast<int>(i), IndexExpr::of_var(rename[i].second), extent);
    return index_key(e);
  };
  if (index_key(x.offset) != renamed(y.offset) || index_key(x.condition) != renamed(y.condition)) return false;
  for (size_t o = 0; o < x.operands.size(); ++o) {
    if (!same_up_to_vars(k, x.operands[o], y.operands[o], rename, compared)) return false;
  }
  return same_up_to_vars(k, x.inline_fallback, y.inline_fallback, rename, compared);
}

// One f32 value per row, accumulated over the trailing axes of its space, only one of which has a loop (what
// the CPU emitter's lane reduction takes).
bool row_scalar_reduction(const Stage& s) {
  if (!s.reduce || s.optional || s.local_size != 1 || s.type.dtype != DType::f32) return false;
  int loops = 0;
  bool reduced = false;
  for (size_t a = 0; a < s.space.size(); ++a) {
    if (reduced && !s.reduced_axes[a]) return false;  // not trailing
    reduced = reduced || s.reduced_axes[a];
    if (!s.reduced_axes[a] && s.space_vars[a] >= 0) return false;
    loops += s.space_vars[a] >= 0;
  }
  return loops == 1;
}

}  // namespace

int central_moment_of(const Kernel& k, int stage) {
  const Stage& v = k.stages.at(static_cast<size_t>(stage));
  if (!row_scalar_reduction(v) || (v.reduce_kind != ReduceKind::mean && v.reduce_kind != ReduceKind::sum)) return -1;
  const Expr& square = k.exprs[static_cast<size_t>(through_caches(k, v.expr))];
  if (square.kind != ExprKind::binary || square.op != Op::mul ||
      through_caches(k, square.operands[0]) != through_caches(k, square.operands[1])) {
    return -1;
  }
  const Expr& deviation = k.exprs[static_cast<size_t>(through_caches(k, square.operands[0]))];
  if (deviation.kind != ExprKind::binary || deviation.op != Op::sub) return -1;
  for (int side = 0; side < 2; ++side) {
    const Expr& mean = k.exprs[static_cast<size_t>(through_caches(k, deviation.operands[static_cast<size_t>(1 - side)]))];
    if (mean.kind != ExprKind::read_stage || mean.stage < 0 || mean.stage >= stage) continue;
    const Stage& m = k.stages[static_cast<size_t>(mean.stage)];
    if (!row_scalar_reduction(m) || m.reduce_kind != ReduceKind::mean || m.output >= 0 ||
        m.space != v.space || m.reduced_axes != v.reduced_axes || m.reduce_count != v.reduce_count) {
      continue;
    }
    std::vector<std::pair<int, int>> rename;
    for (size_t a = 0; a < v.space.size(); ++a) {
      if (v.space_vars[a] >= 0 && v.space_vars[a] != m.space_vars[a]) rename.push_back({v.space_vars[a], m.space_vars[a]});
    }
    std::set<std::pair<int, int>> compared;
    if (same_up_to_vars(k, m.expr, deviation.operands[static_cast<size_t>(side)], rename, compared)) return mean.stage;
  }
  return -1;
}

bool has_central_moments(const Kernel& k) {
  for (size_t i = 0; i < k.stages.size(); ++i) {
    if (central_moment_of(k, static_cast<int>(i)) >= 0) return true;
  }
  return false;
}

}  // namespace kiln::kernel
