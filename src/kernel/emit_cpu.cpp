#include "kernel/emit_cpu.h"

#include <algorithm>
#include <initializer_list>
#include <set>

#include "kernel/schedule.h"

namespace kiln::kernel {
namespace {

// Largest errors against the exact function (double libm), in f32 ulps of the exact value (subnormal spacing
// below the normal range), over every third f32 with the backend's flags: exp 0.98, tanh 1.50, sigmoid 2.40,
// silu 3.39, gelu (tanh) 3.46, gelu (erf) 3.49; CpuMath.SweepAgainstDoubleLibm holds them under 1.5 to 4. The
// coarse forms (sigmoid_c 62, silu_c 117, gelu_tanh_c 217 ulps) are held under 1024 ulps, 2^-14 relative.
// NaN propagates; exp overflows to inf and underflows gradually to 0; at +-inf the others give the reference's
// values (sigmoid 0 / 1, tanh -1 / 1, silu and gelu NaN at -inf like -inf * 0, inf at inf).
//
// Selects are bit masks, not ?: : a ?: with a constant arm lets GCC split the loop body into paths, and under
// -ftrapping-math (the default) a path holding floating-point operations is not if-converted, so the loop
// stays scalar. Polynomials: near-minimax (mpmath chebyfit), coefficients rounded to f32.
const char* kSource = R"(// ---- f32 transcendentals (kernel/emit_cpu.cpp): branch-free, so loops over them vectorize ----
KILN_FN uint32_t kiln_select_bits(int c, uint32_t a, uint32_t b) {  // c ? a : b
  const uint32_t m = 0u - (uint32_t)(c != 0);
  return (a & m) | (b & ~m);
}
KILN_FN float kiln_select(int c, float a, float b) { return kiln_as_float(kiln_select_bits(c, kiln_as_uint(a), kiln_as_uint(b))); }
KILN_FN double kiln_select_d(int c, double a, double b) {
  const uint64_t m = 0ull - (uint64_t)(c != 0);
  return kiln_as_double((kiln_as_u64(a) & m) | (kiln_as_u64(b) & ~m));
}
// e^x = ps1 * s2 with ps1 = e^r 2^h (exact: r = x - n ln2, |r| <= ln2/2, h = n/2, both powers normal) and
// s2 = 2^(n-h), or 0 below the flush point; so m e^x = (m * ps1) * s2 rounds once more than e^x, and only
// its last product rounds into subnormals.
struct kiln_exp_parts { float ps1, s2; };
KILN_FN float kiln_expm1_poly(float r) {  // e^r - 1 for |r| <= ln2/2, relatively accurate near 0
  float c = 0x1.a12a34p-13f;
  c = c * r + 0x1.6d4910p-10f;
  c = c * r + 0x1.1110e0p-7f;
  c = c * r + 0x1.5554e4p-5f;
  c = c * r + 0x1.555556p-3f;
  c = c * r + 0x1p-1f;
  return r + r * r * c;
}
KILN_FN float kiln_pow2i(int32_t n) { return kiln_as_float((uint32_t)(n + 127) << 23); }  // n in [-126, 127]
KILN_FN kiln_exp_parts kiln_exp_parts_of(float r, int32_t n, int flush) {
  const int32_t h = n >> 1;
  const kiln_exp_parts e = {(1.0f + kiln_expm1_poly(r)) * kiln_pow2i(h),
                            kiln_as_float(kiln_select_bits(flush, 0u, kiln_as_uint(kiln_pow2i(n - h))))};
  return e;
}
// x in [-160, 89]: n = round(x / ln2) by the 1.5 * 2^23 shifter, r by Cody-Waite (n * ln2_hi is exact).
KILN_FN kiln_exp_parts kiln_exp_reduce(float x, int flush) {
  const float t = x * 0x1.715476p+0f + 0x1.8p23f;
  const float kn = t - 0x1.8p23f;
  const float r = (x - kn * 0x1.62e4p-1f) - kn * 0x1.7f7d1cp-20f;
  return kiln_exp_parts_of(r, (int32_t)(kiln_as_uint(t) - 0x4b400000u), flush);
}
// x is clamped to [-160, 89], beyond which e^x is 0 or inf; NaN passes. _neg: for x <= 0 (or NaN).
KILN_FN kiln_exp_parts kiln_exp_split(float x) {
  const int flush = x < -160.0f;
  return kiln_exp_reduce(kiln_select(flush, -160.0f, kiln_select(x > 89.0f, 89.0f, x)), flush);
}
KILN_FN kiln_exp_parts kiln_exp_split_neg(float x) {
  const int flush = x < -160.0f;
  return kiln_exp_reduce(kiln_select(flush, -160.0f, x), flush);
}
// The same for a double x <= 0 whose rounding to f32 would cost accuracy (gelu: e^z multiplies the
// relative error of z by |z|): the reduction runs in double, the polynomial in f32.
KILN_FN kiln_exp_parts kiln_exp_split_d(double x) {
  const int flush = x < -160.0;
  const double xc = kiln_select_d(flush, -160.0, x);
  const double t = xc * 0x1.71547652b82fep+0 + 0x1.8p52;
  const double kn = t - 0x1.8p52;
  return kiln_exp_parts_of((float)(xc - kn * 0x1.62e42fefa39efp-1), (int32_t)(uint32_t)kiln_as_u64(t), flush);
}
KILN_FN float kiln_exp_times(kiln_exp_parts e, float m) { return (m * e.ps1) * e.s2; }  // m e^x
KILN_FN float kiln_exp(float x) { return kiln_exp_times(kiln_exp_split(x), 1.0f); }
// tanh x: x + x^3 P(x^2) for |x| < 0.625, else t / (t + 2) with t = e^(2|x|) - 1 >= 2.49; |x| >= 9.5 rounds
// to 1.
KILN_FN float kiln_tanh(float x) {
  const float ax = kiln_as_float(kiln_as_uint(x) & 0x7fffffffu);
  const float y = 2.0f * kiln_select(ax > 9.5f, 9.5f, ax);
  const float t = y * 0x1.715476p+0f + 0x1.8p23f;
  const float kn = t - 0x1.8p23f;
  const float r = (y - kn * 0x1.62e4p-1f) - kn * 0x1.7f7d1cp-20f;
  const float s = kiln_pow2i((int32_t)(kiln_as_uint(t) - 0x4b400000u));
  const float em1 = s * kiln_expm1_poly(r) + (s - 1.0f);
  const float x2 = ax * ax;
  float p = 0x1.2c83c0p-9f;
  p = p * x2 - 0x1.116a16p-7f;
  p = p * x2 + 0x1.64a976p-6f;
  p = p * x2 - 0x1.ba08c4p-5f;
  p = p * x2 + 0x1.1110eap-3f;
  p = p * x2 - 0x1.555556p-2f;
  const float th = kiln_select(ax < 0.625f, ax + ax * x2 * p, em1 / (em1 + 2.0f));
  return kiln_as_float(kiln_as_uint(th) | (kiln_as_uint(x) & 0x80000000u));
}
// m * sigmoid(z) = m / (1 + e^-z), for z < 0 as m e^z / (1 + e^z) (m e^z rounded once, so that x sigmoid(x)
// stays accurate where it is tiny). e: the parts of e^-|z|.
KILN_FN float kiln_sigmoid_times_parts(kiln_exp_parts e, int negative, float m) {
  return kiln_select(negative, kiln_exp_times(e, m), m) / (1.0f + e.ps1 * e.s2);
}
KILN_FN float kiln_sigmoid_times(float z, float m) {
  return kiln_sigmoid_times_parts(kiln_exp_split_neg(kiln_as_float(kiln_as_uint(z) | 0x80000000u)), z < 0.0f, m);
}
KILN_FN float kiln_sigmoid(float x) { return kiln_sigmoid_times(x, 1.0f); }
KILN_FN float kiln_silu(float x) { return kiln_sigmoid_times(x, x); }
// 0.5 x (1 + tanh(z / 2)) = x sigmoid(z), z = 2 sqrt(2/pi) (x + 0.044715 x^3) in double.
KILN_FN float kiln_gelu_tanh(float x) {
  const double xd = x;
  const double z = xd * (1.5957691216057308 + 0.071354816272600407 * (xd * xd));
  return kiln_sigmoid_times_parts(kiln_exp_split_d(kiln_as_double(kiln_as_u64(z) | 0x8000000000000000ull)), z < 0.0, x);
}
// Coarse forms, for values only bf16 or fp8 outputs see (coarse_outputs_only): relative error under 2^-14,
// 1/128 of a bf16 ulp, where the result is normal. f32 throughout, one reduction step, a degree-5 Taylor
// polynomial for 2^f; gelu's exponent in f32 (its error grows with |z|, to 2^-15 at the underflow point).
// e^-|z| as parts for t = -|z| log2(e): ps1 = 2^f 2^h, s2 = 2^(n-h) (n = round(t), f = t - n, h = n/2, both
// powers normal), s2 = 0 below t = -150, where m e^-|z| is 0 for any finite m a bf16 or f32 rounds to.
KILN_FN kiln_exp_parts kiln_exp2_neg_c(float t) {
  const int flush = t < -150.0f;
  const float tc = kiln_select(flush, -150.0f, t);
  const float sh = tc + 0x1.8p23f;
  const float kn = sh - 0x1.8p23f;
  const float f = tc - kn;
  float p = 0x1.5d87fep-10f;
  p = p * f + 0x1.3b2ab6p-7f;
  p = p * f + 0x1.c6b08ep-5f;
  p = p * f + 0x1.ebfbe0p-3f;
  p = p * f + 0x1.62e430p-1f;
  p = p * f + 1.0f;
  const int32_t n = (int32_t)(kiln_as_uint(sh) - 0x4b400000u);
  const int32_t h = n >> 1;
  const kiln_exp_parts e = {p * kiln_pow2i(h), kiln_as_float(kiln_select_bits(flush, 0u, kiln_as_uint(kiln_pow2i(n - h))))};
  return e;
}
KILN_FN float kiln_sigmoid_times_c(float z, float m) {  // m sigmoid(z), as kiln_sigmoid_times
  const kiln_exp_parts e = kiln_exp2_neg_c(kiln_as_float(kiln_as_uint(z) | 0x80000000u) * 0x1.715476p+0f);
  return kiln_select(z < 0.0f, (m * e.ps1) * e.s2, m) / (1.0f + e.ps1 * e.s2);
}
KILN_FN float kiln_sigmoid_c(float x) { return kiln_sigmoid_times_c(x, 1.0f); }
KILN_FN float kiln_silu_c(float x) { return kiln_sigmoid_times_c(x, x); }
KILN_FN float kiln_gelu_tanh_c(float x) { return kiln_sigmoid_times_c(x * (0x1.988454p+0f + 0x1.2444f2p-4f * (x * x)), x); }
// x Phi(x), Phi(x) = erfc(-x / sqrt2) / 2. With u = |x| / sqrt2: erfc(u) = e^(-u^2) F(t) / (1 + 2u), F a
// polynomial in t = 2u / (u + 2) (fitted for u <= 13; beyond, e^(-u^2) flushes to 0). u^2 is formed and
// reduced in double (as gelu tanh's exponent), and so is the product, rounded once.
KILN_FN float kiln_gelu_erf(float x) {
  const double ud = (double)kiln_as_float(kiln_as_uint(x) & 0x7fffffffu) * 0.70710678118654752;
  const float u = (float)kiln_select_d(ud > 13.0, 13.0, ud);
  const float t = (u + u) / (u + 2.0f);
  float f = 0x1.6d85a2p-14f;
  f = f * t - 0x1.964b24p-11f;
  f = f * t + 0x1.4e97e0p-9f;
  f = f * t - 0x1.00d32cp-8f;
  f = f * t + 0x1.43837ap-8f;
  f = f * t - 0x1.084eb6p-7f;
  f = f * t - 0x1.56ebf2p-7f;
  f = f * t + 0x1.0e209ap-5f;
  f = f * t + 0x1.ac01dcp-3f;
  f = f * t - 0x1.a4546cp-1f;
  f = f * t + 0x1.be4520p-1f;
  f = f * t + 1.0f;
  const double e = -ud * ud;
  const kiln_exp_parts p = kiln_exp_split_d(e);
  const float tail = (float)((0.5 * (double)x) * (double)f * (double)p.ps1 / (1.0 + 2.0 * ud) * (double)p.s2);  // x erfc(u) / 2
  return kiln_select(kiln_as_uint(x) >> 31, tail, x - kiln_select(e < -160.0, 0.0f, tail));  // -0: tail = -0
}
)";

}  // namespace

std::string_view cpu_math_source() { return kSource; }

namespace {
// The dtypes whose rounding hides a coarse form's 2^-14 (1/128 of a bf16 ulp): bf16 and fp8.
bool hides_coarse_error(DType d) { return d == DType::bf16 || d == DType::f8e4m3 || d == DType::f8e5m2; }
}  // namespace

std::vector<bool> coarse_outputs_only(const Kernel& k) {
  const size_t n = k.stages.size();
  std::vector<std::set<int>> reads(n);
  for (size_t j = 0; j < n; ++j) {
    std::vector<int> todo = {k.stages[j].expr};
    std::set<int> seen;
    while (!todo.empty()) {
      const int id = todo.back();
      todo.pop_back();
      if (!seen.insert(id).second) continue;
      const Expr& e = k.exprs[static_cast<size_t>(id)];
      if (e.kind == ExprKind::read_stage) {
        reads[j].insert(e.stage);
        if (e.inline_fallback >= 0) todo.push_back(e.inline_fallback);
      }
      for (int o : e.operands) todo.push_back(o);
    }
  }
  std::vector<bool> coarse(n, false);
  for (size_t i = n; i-- > 0;) {
    const Stage& s = k.stages[i];
    bool ok = s.output < 0 || hides_coarse_error(s.type.dtype);
    for (size_t j = i + 1; j < n && ok; ++j) {
      if (reads[j].count(static_cast<int>(i))) ok = !k.stages[j].reduce && coarse[j];
    }
    coarse[i] = ok;
  }
  return coarse;
}

std::vector<bool> rounded_to_bf16_or_fp8(const Kernel& k) {
  const size_t n = k.exprs.size();
  std::vector<int> uses(n, 0), rounding_uses(n, 0);
  for (const Expr& e : k.exprs) {
    const bool narrow = e.kind == ExprKind::round && hides_coarse_error(e.dtype);
    for (int o : e.operands) {
      ++uses[static_cast<size_t>(o)];
      if (narrow) ++rounding_uses[static_cast<size_t>(o)];
    }
    if (e.inline_fallback >= 0) ++uses[static_cast<size_t>(e.inline_fallback)];
  }
  for (const Stage& s : k.stages) ++uses[static_cast<size_t>(s.expr)];
  std::vector<bool> rounded(n, false);
  for (size_t i = 0; i < n; ++i) rounded[i] = uses[i] > 0 && uses[i] == rounding_uses[i];
  return rounded;
}

std::vector<int64_t> row_block_bytes(const Kernel& k) {
  std::vector<int64_t> out(k.inputs.size(), 0);
  std::vector<int64_t> row_stride(k.row_shape.size(), 1);
  for (size_t a = k.row_shape.size(); a-- > 1;) row_stride[a - 1] = row_stride[a] * k.row_shape[a];
  for (size_t p = 0; p < k.inputs.size(); ++p) {
    const int64_t numel = shape_numel(k.inputs[p].type.shape);
    if (k.rows < 2 || numel % k.rows != 0) continue;
    const int64_t per_row = numel / k.rows;
    bool ok = true, loaded = false;
    for (const Expr& e : k.exprs) {
      if (e.kind != ExprKind::load || e.param != static_cast<int>(p)) continue;
      loaded = true;
      for (size_t a = 0; a < k.row_shape.size() && ok; ++a) {
        const int rv = k.row_vars[a];
        if (rv < 0) continue;
        int64_t coefficient = 0;
        for (const IndexTerm& t : e.offset.terms) {
          if (t.atom.kind == IndexAtom::Kind::var && t.atom.var == rv) coefficient += t.coefficient;
          if (t.atom.inner && index_mentions(*t.atom.inner, rv)) ok = false;
        }
        ok = ok && coefficient == per_row * row_stride[a];
      }
    }
    if (ok && loaded) out[p] = per_row * static_cast<int64_t>(dtype_size(k.inputs[p].type.dtype));
  }
  return out;
}

namespace {

// Per kernel input: one of `dtypes`, at most kRowInvariantElements elements, loaded, and by no load that
// depends on the row.
std::vector<bool> small_inputs_read_alike(const Kernel& k, std::initializer_list<DType> dtypes) {
  std::vector<bool> out(k.inputs.size(), false);
  if (k.rows < 2) return out;
  for (size_t p = 0; p < k.inputs.size(); ++p) {
    const TensorType& t = k.inputs[p].type;
    if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end() || shape_numel(t.shape) > kRowInvariantElements) continue;
    bool loaded = false, invariant = true;
    for (const Expr& e : k.exprs) {
      if (e.kind != ExprKind::load || e.param != static_cast<int>(p)) continue;
      loaded = true;
      for (int rv : k.row_vars) invariant = invariant && (rv < 0 || !index_mentions(e.offset, rv));
    }
    out[p] = loaded && invariant;
  }
  return out;
}

}  // namespace

std::vector<bool> row_invariant_inputs(const Kernel& k) { return small_inputs_read_alike(k, {DType::bf16, DType::f16}); }

std::vector<int> tabulated_exprs(const Kernel& k) {
  const size_t n = k.exprs.size();
  // source[id]: the one 16-bit load the value depends on (-1: none, a constant; -2: anything else);
  // costly[id]: a transcendental op on the way from it.
  std::vector<int> source(n, -3);
  std::vector<bool> costly(n, false);
  auto visit = [&](auto&& self, int id) -> int {
    if (source[static_cast<size_t>(id)] != -3) return source[static_cast<size_t>(id)];
    const Expr& e = k.exprs[static_cast<size_t>(id)];
    int src = -2;
    if (e.kind == ExprKind::constant) {
      src = -1;
    } else if (e.kind == ExprKind::load) {
      const DType d = k.inputs[static_cast<size_t>(e.param)].type.dtype;
      src = d == DType::bf16 || d == DType::f16 ? id : -2;
    } else if (e.kind == ExprKind::read_stage && e.inline_fallback >= 0) {  // a row cache: what it holds
      src = self(self, e.inline_fallback);
      costly[static_cast<size_t>(id)] = costly[static_cast<size_t>(e.inline_fallback)];
    } else if (e.kind == ExprKind::unary || e.kind == ExprKind::binary || e.kind == ExprKind::round) {
      src = -1;
      bool cost = (e.kind == ExprKind::unary || e.kind == ExprKind::binary) && op_has_trait(e.op, kTraitTranscendental);
      for (int o : e.operands) {
        const int s = self(self, o);
        cost = cost || costly[static_cast<size_t>(o)];
        if (s == -1) continue;
        src = (src == -1 || src == s) && s >= 0 ? s : -2;
        if (src == -2) break;
      }
      costly[static_cast<size_t>(id)] = cost;
    }
    source[static_cast<size_t>(id)] = src;
    return src;
  };
  std::vector<int> out(n, -1);
  for (size_t id = 0; id < n; ++id) {
    if (visit(visit, static_cast<int>(id)) >= 0 && costly[id]) out[id] = source[id];
  }
  return out;
}

bool has_tabulated_exprs(const Kernel& k) {
  for (int src : tabulated_exprs(k)) {
    if (src >= 0) return true;
  }
  return false;
}

std::optional<IndexExpr> pair_offset(const Kernel& k, const IndexExpr& offset, int var) {
  const IndexExpr split = split_vector_var(k, offset, var, 2);
  const VarExtents extents = vector_split_extents(k, var, 2);
  const int lane = vector_lane_var(k);
  const IndexExpr even = index_substitute(split, lane, IndexExpr::of_constant(0), extents);
  const IndexExpr odd = index_substitute(split, lane, IndexExpr::of_constant(1), extents);
  const IndexExpr step = index_add(odd, index_scale(even, -1));
  if (!step.is_constant() || step.constant != 1) return std::nullopt;
  return even;
}

std::optional<IndexExpr> halved(const IndexExpr& e) {
  if (e.constant % 2 != 0) return std::nullopt;
  IndexExpr out = e;
  out.constant /= 2;
  for (IndexTerm& t : out.terms) {
    if (t.coefficient % 2 != 0) return std::nullopt;
    t.coefficient /= 2;
  }
  return out;
}

std::optional<PairPlan> pair_plan(const Kernel& k) {
  // Rows every kernel row reads alike: the 16-bit ones converted once anyway, and small f32 ones (a norm's
  // weight cast at load time), copied once to be read a half at a time.
  const std::vector<bool> invariant = small_inputs_read_alike(k, {DType::bf16, DType::f16, DType::f32});
  // Per input: loaded along a paired loop, loaded otherwise (a converted row is kept in one layout or the other).
  std::vector<bool> paired(k.inputs.size(), false), plain(k.inputs.size(), false);
  bool any = false;
  for (const Stage& s : k.stages) {
    int axis = -1, loops = 0;
    for (size_t a = 0; a < s.space.size(); ++a) {
      if (s.space_vars[a] < 0) continue;
      axis = static_cast<int>(a);
      ++loops;
    }
    if (loops > 1) return std::nullopt;
    const int var = loops == 1 ? s.space_vars[static_cast<size_t>(axis)] : -1;
    if (var >= 0) {
      if (s.space[static_cast<size_t>(axis)] % 2 != 0) return std::nullopt;
      if (s.reduce && !s.reduced_axes[static_cast<size_t>(axis)]) return std::nullopt;
      if (s.output >= 0) {
        if (!index_mentions(s.target, var) || k.outputs[static_cast<size_t>(s.output)].type.dtype != DType::bf16) {
          return std::nullopt;
        }
        if (!pair_offset(k, s.target, var)) return std::nullopt;
      }
      any = true;
    }
    // The loads the stage's value reaches (an optional stage's read may be its recomputation).
    std::set<int> seen;
    std::vector<int> todo = {s.expr};
    while (!todo.empty()) {
      const int id = todo.back();
      todo.pop_back();
      if (id < 0 || !seen.insert(id).second) continue;
      const Expr& e = k.exprs[static_cast<size_t>(id)];
      for (int o : e.operands) todo.push_back(o);
      if (e.kind == ExprKind::read_stage && e.inline_fallback >= 0) todo.push_back(e.inline_fallback);
      if (e.kind != ExprKind::load) continue;
      const size_t p = static_cast<size_t>(e.param);
      if (var < 0 || !index_mentions(e.offset, var)) {
        plain[p] = true;
        continue;
      }
      const std::optional<IndexExpr> even = pair_offset(k, e.offset, var);
      if (!even || e.guarded) return std::nullopt;
      if (invariant[p]) {
        if (!halved(*even) || shape_numel(k.inputs[p].type.shape) % 2 != 0) return std::nullopt;
        paired[p] = true;
      } else if (k.inputs[p].type.dtype != DType::bf16) {
        return std::nullopt;
      }
    }
  }
  if (!any) return std::nullopt;
  PairPlan plan;
  plan.split_rows.assign(k.inputs.size(), false);
  for (size_t p = 0; p < k.inputs.size(); ++p) {
    if (invariant[p] && paired[p] && plain[p]) return std::nullopt;
    plan.split_rows[p] = invariant[p] && paired[p];
  }
  return plan;
}

bool has_pairs(const Kernel& k) { return pair_plan(k).has_value(); }

}  // namespace kiln::kernel
