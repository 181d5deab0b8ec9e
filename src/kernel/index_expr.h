// Index expressions of the kernel IR: integer affine forms over loop variables, with floor division and
// modulo by positive constants as atoms. Views (reshape, transpose, slice, split, concat, broadcast) become
// index expressions when a fused kernel loads through them; the simplifier folds the div/mod pairs a reshape
// introduces wherever value ranges allow, so `(r * 64 + j) / 64` is `r` and `(2 * (j / 2) + 1) % 2` is `1`.
// All runtime values are non-negative (they index tensors), so C's truncating division is floor division.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kiln::kernel {

// A loop variable: its id and extent (values 0 .. extent-1).
struct IndexVar {
  int id = 0;
  int64_t extent = 1;
};

struct IndexExpr;
// One atom of an affine form: a variable, or floor(inner / divisor), or inner mod divisor.
struct IndexAtom {
  enum class Kind { var, div, mod } kind = Kind::var;
  int var = 0;
  std::shared_ptr<const IndexExpr> inner;
  int64_t divisor = 1;
};

struct IndexTerm {
  int64_t coefficient = 0;
  IndexAtom atom;
};

// constant + sum of coefficient * atom.
struct IndexExpr {
  int64_t constant = 0;
  std::vector<IndexTerm> terms;

  static IndexExpr of_constant(int64_t value);
  static IndexExpr of_var(int var);
  bool is_constant() const { return terms.empty(); }
  // The expression is exactly the variable `var`.
  bool is_var(int var) const;
};

// Variable extents, by id, for range analysis.
using VarExtents = std::function<int64_t(int var)>;

IndexExpr index_add(const IndexExpr& a, const IndexExpr& b);
IndexExpr index_scale(const IndexExpr& a, int64_t factor);
IndexExpr index_div(const IndexExpr& a, int64_t divisor, const VarExtents& extents);
IndexExpr index_mod(const IndexExpr& a, int64_t divisor, const VarExtents& extents);

// Inclusive bounds of the values the expression can take.
struct IndexRange {
  int64_t lo = 0, hi = 0;
};
IndexRange index_range(const IndexExpr& e, const VarExtents& extents);

// `e` with variable `var` replaced by `replacement`, simplified again (`extents` must cover the variables of
// `replacement`): substituting v = 8*u + j into (2 * (v / 2) + 1) gives 8*u + 2 * (j / 2) + 1.
IndexExpr index_substitute(const IndexExpr& e, int var, const IndexExpr& replacement, const VarExtents& extents);
// Whether `e` mentions variable `var` (also inside a division or modulo); every variable it mentions.
bool index_mentions(const IndexExpr& e, int var);
std::set<int> index_vars(const IndexExpr& e);

int64_t index_eval(const IndexExpr& e, const std::function<int64_t(int var)>& values);
// C source for the expression; `var_name` spells a variable.
std::string index_to_c(const IndexExpr& e, const std::function<std::string(int var)>& var_name);
// A canonical text, used to hash-cons kernel expressions.
std::string index_key(const IndexExpr& e);

}  // namespace kiln::kernel
