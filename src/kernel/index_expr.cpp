#include "kernel/index_expr.h"

#include <algorithm>
#include <map>

namespace kiln::kernel {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

std::string atom_key(const IndexAtom& a) {
  switch (a.kind) {
    case IndexAtom::Kind::var: return "v" + std::to_string(a.var);
    case IndexAtom::Kind::div: return "(" + index_key(*a.inner) + ")/" + std::to_string(a.divisor);
    case IndexAtom::Kind::mod: return "(" + index_key(*a.inner) + ")%" + std::to_string(a.divisor);
  }
  return "?";
}

// Merges equal atoms and drops zero coefficients; terms sorted by atom key so equal forms compare equal.
// Recombines what a reshape split apart: c*d*(X / d) + c*(X % d) is c*X for every integer X (the identity of
// floor division), so a view that splits an axis and merges it back indexes as the plain variable again.
IndexExpr normalize(IndexExpr e) {
  for (;;) {
    std::map<std::string, IndexTerm> merged;
    for (IndexTerm& t : e.terms) {
      const std::string k = atom_key(t.atom);
      auto it = merged.find(k);
      if (it == merged.end()) {
        merged.emplace(k, std::move(t));
      } else {
        it->second.coefficient += t.coefficient;
      }
    }
    e.terms.clear();
    for (auto& [k, t] : merged) {
      if (t.coefficient != 0) e.terms.push_back(std::move(t));
    }
    bool recombined = false;
    for (size_t i = 0; i < e.terms.size() && !recombined; ++i) {
      const IndexTerm& m = e.terms[i];
      if (m.atom.kind != IndexAtom::Kind::mod) continue;
      for (size_t j = 0; j < e.terms.size(); ++j) {
        const IndexTerm& q = e.terms[j];
        if (q.atom.kind != IndexAtom::Kind::div || q.atom.divisor != m.atom.divisor ||
            q.coefficient != m.coefficient * m.atom.divisor || index_key(*q.atom.inner) != index_key(*m.atom.inner)) {
          continue;
        }
        const int64_t c = m.coefficient;
        const IndexExpr inner = *m.atom.inner;
        std::vector<IndexTerm> rest;
        for (size_t t = 0; t < e.terms.size(); ++t) {
          if (t != i && t != j) rest.push_back(e.terms[t]);
        }
        e.terms = std::move(rest);
        e.constant += c * inner.constant;
        for (const IndexTerm& t : inner.terms) e.terms.push_back({c * t.coefficient, t.atom});
        recombined = true;
        break;
      }
    }
    if (!recombined) return e;
  }
}

IndexRange atom_range(const IndexAtom& a, const VarExtents& extents) {
  switch (a.kind) {
    case IndexAtom::Kind::var: return {0, std::max<int64_t>(extents(a.var) - 1, 0)};
    case IndexAtom::Kind::div: {
      const IndexRange r = index_range(*a.inner, extents);
      return {floor_div(r.lo, a.divisor), floor_div(r.hi, a.divisor)};
    }
    case IndexAtom::Kind::mod: {
      const IndexRange r = index_range(*a.inner, extents);
      if (r.lo >= 0 && r.hi < a.divisor) return r;
      return {0, a.divisor - 1};
    }
  }
  return {0, 0};
}

// Splits `a` into the part whose coefficients `divisor` divides (returned scaled down, with the constant's
// quotient) and the remainder (the other terms plus the constant's remainder).
void split_by(const IndexExpr& a, int64_t divisor, IndexExpr& quotient, IndexExpr& remainder) {
  quotient = IndexExpr::of_constant(floor_div(a.constant, divisor));
  remainder = IndexExpr::of_constant(floor_mod(a.constant, divisor));
  for (const IndexTerm& t : a.terms) {
    if (t.coefficient % divisor == 0) {
      quotient.terms.push_back({t.coefficient / divisor, t.atom});
    } else {
      remainder.terms.push_back(t);
    }
  }
}

}  // namespace

IndexExpr IndexExpr::of_constant(int64_t value) {
  IndexExpr e;
  e.constant = value;
  return e;
}

IndexExpr IndexExpr::of_var(int var) {
  IndexExpr e;
  IndexAtom a;
  a.kind = IndexAtom::Kind::var;
  a.var = var;
  e.terms.push_back({1, a});
  return e;
}

bool IndexExpr::is_var(int var) const {
  return constant == 0 && terms.size() == 1 && terms[0].coefficient == 1 &&
         terms[0].atom.kind == IndexAtom::Kind::var && terms[0].atom.var == var;
}

IndexExpr index_add(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr e = a;
  e.constant += b.constant;
  e.terms.insert(e.terms.end(), b.terms.begin(), b.terms.end());
  return normalize(std::move(e));
}

IndexExpr index_scale(const IndexExpr& a, int64_t factor) {
  if (factor == 0) return IndexExpr::of_constant(0);
  IndexExpr e = a;
  e.constant *= factor;
  for (IndexTerm& t : e.terms) t.coefficient *= factor;
  return e;
}

IndexRange index_range(const IndexExpr& e, const VarExtents& extents) {
  IndexRange r{e.constant, e.constant};
  for (const IndexTerm& t : e.terms) {
    const IndexRange a = atom_range(t.atom, extents);
    if (t.coefficient >= 0) {
      r.lo += t.coefficient * a.lo;
      r.hi += t.coefficient * a.hi;
    } else {
      r.lo += t.coefficient * a.hi;
      r.hi += t.coefficient * a.lo;
    }
  }
  return r;
}

// floor((Q*d + R) / d) = Q + floor(R / d) for integer Q; floor(R / d) = 0 when 0 <= R < d.
IndexExpr index_div(const IndexExpr& a, int64_t divisor, const VarExtents& extents) {
  if (divisor == 1) return a;
  IndexExpr quotient, remainder;
  split_by(a, divisor, quotient, remainder);
  const IndexRange r = index_range(remainder, extents);
  if (r.lo >= 0 && r.hi < divisor) return normalize(quotient);
  const int64_t whole = r.lo >= 0 ? r.lo / divisor : 0;
  if (whole > 0 && r.hi / divisor == whole) return index_add(quotient, IndexExpr::of_constant(whole));
  IndexAtom atom;
  atom.kind = IndexAtom::Kind::div;
  atom.inner = std::make_shared<const IndexExpr>(normalize(remainder));
  atom.divisor = divisor;
  quotient.terms.push_back({1, atom});
  return normalize(std::move(quotient));
}

// (Q*d + R) mod d = R mod d; = R when 0 <= R < d.
IndexExpr index_mod(const IndexExpr& a, int64_t divisor, const VarExtents& extents) {
  if (divisor == 1) return IndexExpr::of_constant(0);
  IndexExpr quotient, remainder;
  split_by(a, divisor, quotient, remainder);
  const IndexRange r = index_range(remainder, extents);
  if (r.lo >= 0 && r.hi < divisor) return normalize(remainder);
  IndexAtom atom;
  atom.kind = IndexAtom::Kind::mod;
  atom.inner = std::make_shared<const IndexExpr>(normalize(remainder));
  atom.divisor = divisor;
  IndexExpr e;
  e.terms.push_back({1, atom});
  return e;
}

IndexExpr index_substitute(const IndexExpr& e, int var, const IndexExpr& replacement, const VarExtents& extents) {
  IndexExpr out = IndexExpr::of_constant(e.constant);
  for (const IndexTerm& t : e.terms) {
    IndexExpr atom;
    switch (t.atom.kind) {
      case IndexAtom::Kind::var: atom = t.atom.var == var ? replacement : IndexExpr::of_var(t.atom.var); break;
      case IndexAtom::Kind::div:
        atom = index_div(index_substitute(*t.atom.inner, var, replacement, extents), t.atom.divisor, extents);
        break;
      case IndexAtom::Kind::mod:
        atom = index_mod(index_substitute(*t.atom.inner, var, replacement, extents), t.atom.divisor, extents);
        break;
    }
    out = index_add(out, index_scale(atom, t.coefficient));
  }
  return out;
}

std::set<int> index_vars(const IndexExpr& e) {
  std::set<int> vars;
  for (const IndexTerm& t : e.terms) {
    if (t.atom.kind == IndexAtom::Kind::var) vars.insert(t.atom.var);
    if (t.atom.inner) vars.merge(index_vars(*t.atom.inner));
  }
  return vars;
}

bool index_mentions(const IndexExpr& e, int var) {
  for (const IndexTerm& t : e.terms) {
    if (t.atom.kind == IndexAtom::Kind::var && t.atom.var == var) return true;
    if (t.atom.inner && index_mentions(*t.atom.inner, var)) return true;
  }
  return false;
}

int64_t index_eval(const IndexExpr& e, const std::function<int64_t(int var)>& values) {
  int64_t v = e.constant;
  for (const IndexTerm& t : e.terms) {
    int64_t a = 0;
    switch (t.atom.kind) {
      case IndexAtom::Kind::var: a = values(t.atom.var); break;
      case IndexAtom::Kind::div: a = floor_div(index_eval(*t.atom.inner, values), t.atom.divisor); break;
      case IndexAtom::Kind::mod: a = floor_mod(index_eval(*t.atom.inner, values), t.atom.divisor); break;
    }
    v += t.coefficient * a;
  }
  return v;
}

std::string index_to_c(const IndexExpr& e, const std::function<std::string(int var)>& var_name) {
  std::string out;
  for (const IndexTerm& t : e.terms) {
    std::string atom;
    switch (t.atom.kind) {
      case IndexAtom::Kind::var: atom = var_name(t.atom.var); break;
      case IndexAtom::Kind::div: atom = "(" + index_to_c(*t.atom.inner, var_name) + ") / " + std::to_string(t.atom.divisor); break;
      case IndexAtom::Kind::mod: atom = "(" + index_to_c(*t.atom.inner, var_name) + ") % " + std::to_string(t.atom.divisor); break;
    }
    if (t.atom.kind != IndexAtom::Kind::var) atom = "(" + atom + ")";
    std::string term = t.coefficient == 1 ? atom : t.coefficient == -1 ? "-" + atom : std::to_string(t.coefficient) + "*" + atom;
    if (out.empty()) {
      out = term;
    } else if (term[0] == '-') {
      out += " - " + term.substr(1);
    } else {
      out += " + " + term;
    }
  }
  if (out.empty()) return std::to_string(e.constant);
  if (e.constant > 0) out += " + " + std::to_string(e.constant);
  if (e.constant < 0) out += " - " + std::to_string(-e.constant);
  return out;
}

std::string index_key(const IndexExpr& e) {
  std::string k = std::to_string(e.constant);
  for (const IndexTerm& t : e.terms) k += "+" + std::to_string(t.coefficient) + "*" + atom_key(t.atom);
  return k;
}

}  // namespace kiln::kernel
