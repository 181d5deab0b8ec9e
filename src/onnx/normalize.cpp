// Normalizing matchers: exporters write composites as primitives (LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div,
// RMSNorm, GELU from erf or tanh, attention as MatMul/Softmax/MatMul, RoPE as slices and products). Each
// matcher looks at a freshly added IR node and, when the values feeding it compute a kiln composite, adds
// that composite and returns its value; the primitives it bypasses become dead and the import drops them.
// They read only the IR (ops, producers, constant values), never ONNX names, and they check every shape
// they rely on, so a near miss keeps the primitives (correct, only less fused).
#include <algorithm>
#include <fmt/format.h>

#include <cmath>

#include "ir/ops/op_util.h"
#include "onnx/importer.h"

namespace kiln::onnx {
namespace {

// A float32 constant read back as the decimal it was written as (1e-6, not 9.99999997e-07).
double clean_f32(double x) {
  const double decimal = std::strtod(fmt::format("{:.7g}", x).c_str(), nullptr);
  return static_cast<float>(decimal) == static_cast<float>(x) ? decimal : x;
}

bool near(double a, double b, double rel = 1e-4) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

class Matcher {
 public:
  explicit Matcher(Importer& im) : im_(im), g_(im.graph) {}

  const Node* node(ValueId v, Op op) const {
    const Node* n = im_.producer(v);
    return n && n->op == op ? n : nullptr;
  }
  const TensorType& type(ValueId v) const { return g_.value(v).type; }
  int64_t rank(ValueId v) const { return static_cast<int64_t>(type(v).shape.size()); }
  std::optional<double> scalar(ValueId v) const { return im_.scalar_value(v); }

  // A reduction over the last axis only, keeping it.
  bool is_last_axis_mean(const Node* n) const {
    if (!n || n->op != Op::reduce_mean || n->attrs.get_int("keepdims", 0) != 1) return false;
    const std::vector<int64_t> axes = n->attrs.get_ints("axes");
    return axes.size() == 1 && ops::normalize_axis(axes[0], rank(n->inputs[0])) == rank(n->inputs[0]) - 1;
  }
  // v = x * x or x ** 2: returns x.
  std::optional<ValueId> square_of(ValueId v) const {
    if (const Node* n = node(v, Op::pow); n && scalar(n->inputs[1]) == 2.0) return n->inputs[0];
    if (const Node* n = node(v, Op::mul); n && n->inputs[0] == n->inputs[1]) return n->inputs[0];
    return std::nullopt;
  }
  // v = mean(x^2 over the last axis) + eps: returns (x, eps).
  std::optional<std::pair<ValueId, double>> mean_square_plus_eps(ValueId v) const {
    if (const Node* mean = im_.producer(v); is_last_axis_mean(mean)) {  // no epsilon at all
      if (auto x = square_of(mean->inputs[0])) return std::make_pair(*x, 0.0);
    }
    const Node* add = node(v, Op::add);
    if (!add) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const auto eps = scalar(add->inputs[1 - i]);
      const Node* mean = im_.producer(add->inputs[i]);
      if (!eps || !is_last_axis_mean(mean)) continue;
      if (auto x = square_of(mean->inputs[0])) return std::make_pair(*x, *eps);
    }
    return std::nullopt;
  }
  // v = 1 / sqrt(a) in any of its spellings: returns a.
  std::optional<ValueId> inverse_sqrt_of(ValueId v) const {
    if (const Node* n = node(v, Op::rsqrt)) return n->inputs[0];
    if (const Node* n = node(v, Op::reciprocal)) {
      if (const Node* s = node(n->inputs[0], Op::sqrt)) return s->inputs[0];
    }
    if (const Node* n = node(v, Op::div); n && scalar(n->inputs[0]) == 1.0) {
      if (const Node* s = node(n->inputs[1], Op::sqrt)) return s->inputs[0];
    }
    if (const Node* n = node(v, Op::pow); n && scalar(n->inputs[1]) == -0.5) return n->inputs[0];
    return std::nullopt;
  }
  // The normalized value and the denominator's argument of v = a / sqrt(d) or a * (1/sqrt(d)).
  std::optional<std::pair<ValueId, ValueId>> divided_by_sqrt(ValueId v) const {
    if (const Node* n = node(v, Op::div)) {
      if (const Node* s = node(n->inputs[1], Op::sqrt)) return std::make_pair(n->inputs[0], s->inputs[0]);
    }
    if (const Node* n = node(v, Op::mul)) {
      for (int i = 0; i < 2; ++i) {
        if (auto d = inverse_sqrt_of(n->inputs[1 - i])) return std::make_pair(n->inputs[i], *d);
      }
    }
    return std::nullopt;
  }
  // Two values that are the same, or the same op on the same inputs (an exporter's duplicate).
  bool same(ValueId a, ValueId b) const {
    if (a == b) return true;
    const Node* na = im_.producer(a);
    const Node* nb = im_.producer(b);
    return na && nb && na->op == nb->op && na->inputs == nb->inputs && na->attrs == nb->attrs && na->outputs.size() == 1;
  }

  // Factors of a product through mul nodes and division by constants: the scalar coefficient and the rest.
  struct Product {
    double coefficient = 1;
    std::vector<ValueId> factors;
  };
  void flatten(ValueId v, Product& p, int depth) const {
    if (auto c = scalar(v)) {
      p.coefficient *= *c;
      return;
    }
    if (depth < 4) {
      if (const Node* n = node(v, Op::mul)) {
        flatten(n->inputs[0], p, depth + 1);
        flatten(n->inputs[1], p, depth + 1);
        return;
      }
      if (const Node* n = node(v, Op::div); n && scalar(n->inputs[1])) {
        flatten(n->inputs[0], p, depth + 1);
        p.coefficient /= *scalar(n->inputs[1]);
        return;
      }
      if (const Node* n = node(v, Op::neg)) {
        flatten(n->inputs[0], p, depth + 1);
        p.coefficient = -p.coefficient;
        return;
      }
    }
    p.factors.push_back(v);
  }
  Product product(ValueId v) const {
    Product p;
    flatten(v, p, 0);
    return p;
  }

  Result<ValueId> add(Op op, std::vector<ValueId> inputs, Attrs attrs = {}) {
    return im_.add_node1(op, std::move(inputs), std::move(attrs));
  }
  // The result replaces `root` only when it has root's exact type.
  std::optional<ValueId> accept(const Result<ValueId>& r, ValueId root) const {
    if (!r.ok() || type(*r) != type(root)) return std::nullopt;
    return *r;
  }
  // A per-channel [D] weight from a constant value with D elements, or nullopt.
  std::optional<ValueId> channel_weight(ValueId v, int64_t d) {
    if (const Node* f = node(v, Op::full); f && type(v).shape == Shape{d}) return v;
    const Tensor* t = im_.weight_data(v);
    if (!t || t->numel() != d || !dtype_is_float(t->dtype())) return std::nullopt;
    if (t->shape() == Shape{d}) return v;
    auto m = im_.materialize(Sym::constant(t->with_shape({d}), g_.value(v).name));
    if (!m.ok()) return std::nullopt;
    return *m;
  }

  // ---- the matchers ----

  // (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) -> layernorm(x)
  std::optional<ValueId> layernorm_core(ValueId root) {
    auto parts = divided_by_sqrt(root);
    if (!parts) return std::nullopt;
    const Node* centered = node(parts->first, Op::sub);
    if (!centered || !is_last_axis_mean(im_.producer(centered->inputs[1]))) return std::nullopt;
    const ValueId x = centered->inputs[0];
    if (im_.producer(centered->inputs[1])->inputs[0] != x) return std::nullopt;
    auto var = mean_square_plus_eps(parts->second);
    if (!var || !same(var->first, parts->first)) return std::nullopt;
    return accept(add(Op::layernorm, {x}, {{"eps", clean_f32(var->second)}}), root);
  }

  // x / sqrt(mean(x^2) + eps) or x * rsqrt(...) -> rmsnorm(x)
  std::optional<ValueId> rmsnorm_core(ValueId root) {
    auto parts = divided_by_sqrt(root);
    if (!parts) return std::nullopt;
    auto ms = mean_square_plus_eps(parts->second);
    if (!ms || ms->first != parts->first) return std::nullopt;
    return accept(add(Op::rmsnorm, {parts->first}, {{"eps", clean_f32(ms->second)}}), root);
  }

  // norm(x) * w -> norm(x, w); layernorm(x, w) + b -> layernorm(x, w, b)
  std::optional<ValueId> norm_affine(ValueId root) {
    const Node* n = im_.producer(root);
    if (!n || (n->op != Op::mul && n->op != Op::add)) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const Node* norm = im_.producer(n->inputs[i]);
      if (!norm || (norm->op != Op::layernorm && norm->op != Op::rmsnorm)) continue;
      const size_t want = n->op == Op::mul ? 1 : 2;
      if (norm->inputs.size() != want || (n->op == Op::add && norm->op != Op::layernorm)) continue;
      auto w = channel_weight(n->inputs[1 - i], type(norm->inputs[0]).shape.back());
      if (!w) continue;
      std::vector<ValueId> ins = norm->inputs;
      ins.push_back(*w);
      return accept(add(norm->op, ins, norm->attrs), root);
    }
    return std::nullopt;
  }

  // linear(x, W) + b -> linear(x, W, b)
  std::optional<ValueId> linear_bias(ValueId root) {
    const Node* n = node(root, Op::add);
    if (!n) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const Node* lin = node(n->inputs[i], Op::linear);
      if (!lin || lin->inputs.size() != 2 || lin->attrs.get_string("activation", "none") != "none") continue;
      auto b = channel_weight(n->inputs[1 - i], type(lin->inputs[1]).shape[0]);
      if (!b) continue;
      return accept(add(Op::linear, {lin->inputs[0], lin->inputs[1], *b}), root);
    }
    return std::nullopt;
  }

  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> gelu(x, tanh)
  std::optional<ValueId> gelu_tanh(ValueId root) {
    if (!node(root, Op::mul)) return std::nullopt;
    const Product p = product(root);
    if (p.factors.size() != 2 || !near(p.coefficient, 0.5, 1e-6)) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const ValueId x = p.factors[static_cast<size_t>(i)];
      const Node* plus = node(p.factors[static_cast<size_t>(1 - i)], Op::add);
      if (!plus) continue;
      for (int j = 0; j < 2; ++j) {
        const Node* th = node(plus->inputs[j], Op::tanh);
        if (!th || scalar(plus->inputs[1 - j]) != 1.0) continue;
        const Product t = product(th->inputs[0]);
        if (t.factors.size() != 1 || !near(t.coefficient, std::sqrt(2.0 / M_PI))) continue;
        const Node* inner = node(t.factors[0], Op::add);
        if (!inner) continue;
        for (int k = 0; k < 2; ++k) {
          if (inner->inputs[k] != x) continue;
          const Product cube = product(inner->inputs[1 - k]);
          if (!near(cube.coefficient, 0.044715) || !is_cube(cube.factors, x)) continue;
          return accept(add(Op::gelu, {x}, {{"approximate", std::string("tanh")}}), root);
        }
      }
    }
    return std::nullopt;
  }
  bool is_cube(const std::vector<ValueId>& f, ValueId x) const {
    int power = 0;
    for (ValueId v : f) {
      if (v == x) {
        ++power;
      } else if (const Node* n = node(v, Op::pow); n && n->inputs[0] == x && scalar(n->inputs[1])) {
        const double e = *scalar(n->inputs[1]);
        if (e != 2.0 && e != 3.0) return false;
        power += static_cast<int>(e);
      } else if (auto s = square_of(v); s && *s == x) {
        power += 2;
      } else {
        return false;
      }
    }
    return power == 3;
  }

  // x[..., D] viewed as pairs, rotated by (cos, sin), flattened back -> rope(x, cos, sin, interleaved)
  std::optional<ValueId> rope_interleaved(ValueId root) {
    const Node* flat = node(root, Op::reshape);
    if (!flat) return std::nullopt;
    const Node* cat = node(flat->inputs[0], Op::concat);
    if (!cat || cat->inputs.size() != 2) return std::nullopt;
    const Shape& pairs = type(flat->inputs[0]).shape;  // [..., D/2, 2]
    const int64_t r = static_cast<int64_t>(pairs.size());
    if (r < 2 || pairs.back() != 2 || ops::normalize_axis(cat->attrs.get_int("axis", 0), r) != r - 1) return std::nullopt;
    // Each half: [..., D/2] -> [..., D/2, 1]
    ValueId o[2];
    for (int i = 0; i < 2; ++i) {
      const Node* u = node(cat->inputs[i], Op::reshape);
      if (!u) return std::nullopt;
      o[i] = u->inputs[0];
      Shape expect = type(o[i]).shape;
      expect.push_back(1);
      if (type(cat->inputs[i]).shape != expect) return std::nullopt;
    }
    // o0 = x0*c - x1*s, o1 = x0*s + x1*c
    const Node* sub = node(o[0], Op::sub);
    const Node* sum = node(o[1], Op::add);
    if (!sub || !sum) return std::nullopt;
    auto factors = [&](ValueId v) -> std::optional<std::pair<ValueId, ValueId>> {
      const Node* m = node(v, Op::mul);
      if (!m) return std::nullopt;
      return std::make_pair(m->inputs[0], m->inputs[1]);
    };
    auto a = factors(sub->inputs[0]), b = factors(sub->inputs[1]);
    if (!a || !b) return std::nullopt;
    // The even/odd elements of one [..., D/2, 2] view of x.
    auto element = [&](ValueId v, int64_t which) -> std::optional<ValueId> {
      const Node* drop = node(v, Op::reshape);
      if (!drop) return std::nullopt;
      const Node* sl = node(drop->inputs[0], Op::slice);
      if (!sl || sl->attrs.get_int("start", -1) != which || sl->attrs.get_int("end", -1) != which + 1 ||
          sl->attrs.get_int("step", 1) != 1) {
        return std::nullopt;
      }
      const ValueId view = sl->inputs[0];
      if (ops::normalize_axis(sl->attrs.get_int("axis", 0), rank(view)) != rank(view) - 1 || type(view).shape != pairs) {
        return std::nullopt;
      }
      return view;
    };
    for (int swap_a = 0; swap_a < 2; ++swap_a) {
      for (int swap_b = 0; swap_b < 2; ++swap_b) {
        const ValueId x0 = swap_a ? a->second : a->first, c = swap_a ? a->first : a->second;
        const ValueId x1 = swap_b ? b->second : b->first, s = swap_b ? b->first : b->second;
        auto v0 = element(x0, 0), v1 = element(x1, 1);
        if (!v0 || !v1 || *v0 != *v1) continue;
        // o1 must be x0*s + x1*c, in any order.
        bool o1_ok = false;
        for (int k = 0; k < 2 && !o1_ok; ++k) {
          auto p = factors(sum->inputs[k]), q = factors(sum->inputs[1 - k]);
          auto has = [](const std::optional<std::pair<ValueId, ValueId>>& f, ValueId u, ValueId w) {
            return f && ((f->first == u && f->second == w) || (f->first == w && f->second == u));
          };
          o1_ok = has(p, x0, s) && has(q, x1, c);
        }
        if (!o1_ok) continue;
        const Node* view = node(*v0, Op::reshape);
        if (!view) continue;
        // The flattening reshape may go straight to another view (an exporter folds two reshapes into one).
        const ValueId x = view->inputs[0];
        const Shape out = type(root).shape;
        auto y = add(Op::rope, {x, c, s}, {{"style", std::string("interleaved")}});
        if (y.ok() && type(*y).shape != out) y = add(Op::reshape, {*y}, {{"shape", out}});
        return accept(y, root);
      }
    }
    return std::nullopt;
  }

  // x * cos + cat(-x[..., D/2:], x[..., :D/2]) * sin with cos/sin constants whose halves repeat
  // -> rope(x, cos[..., :D/2], sin[..., :D/2], half)
  std::optional<ValueId> rope_half(ValueId root) {
    const Node* sum = node(root, Op::add);
    if (!sum) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const Node* direct = node(sum->inputs[i], Op::mul);
      const Node* rotated = node(sum->inputs[1 - i], Op::mul);
      if (!direct || !rotated) continue;
      for (int j = 0; j < 2; ++j) {
        for (int k = 0; k < 2; ++k) {
          const ValueId x = direct->inputs[j], cos = direct->inputs[1 - j];
          const ValueId rot = rotated->inputs[k], sin = rotated->inputs[1 - k];
          if (auto y = rope_half_with(root, x, cos, rot, sin)) return y;
        }
      }
    }
    return std::nullopt;
  }
  std::optional<ValueId> rope_half_with(ValueId root, ValueId x, ValueId cos, ValueId rot, ValueId sin) {
    const Node* cat = node(rot, Op::concat);
    if (!cat || cat->inputs.size() != 2 || type(x).shape.empty()) return std::nullopt;
    const int64_t r = rank(x), d = type(x).shape.back();
    if (d % 2 != 0 || ops::normalize_axis(cat->attrs.get_int("axis", 0), r) != r - 1) return std::nullopt;
    const Node* neg = node(cat->inputs[0], Op::neg);
    if (!neg) return std::nullopt;
    auto half = [&](ValueId v, int64_t start) {
      const Node* sl = node(v, Op::slice);
      return sl && sl->inputs[0] == x && ops::normalize_axis(sl->attrs.get_int("axis", 0), r) == r - 1 &&
             sl->attrs.get_int("start", -1) == start && sl->attrs.get_int("end", -1) == start + d / 2 &&
             sl->attrs.get_int("step", 1) == 1;
    };
    if (!half(neg->inputs[0], d / 2) || !half(cat->inputs[1], 0)) return std::nullopt;
    auto halves = [&](ValueId v) -> std::optional<ValueId> {
      const Tensor* t = im_.weight_data(v);
      if (!t || t->shape().empty() || t->shape().back() != d) return std::nullopt;
      Shape hs = t->shape();
      hs.back() = d / 2;
      Tensor h(t->dtype(), hs);
      const int64_t rows = t->numel() / d;
      for (int64_t row = 0; row < rows; ++row) {
        for (int64_t c = 0; c < d / 2; ++c) {
          const double lo = t->get(row * d + c), hi = t->get(row * d + c + d / 2);
          if (lo != hi) return std::nullopt;
          h.set(row * (d / 2) + c, lo);
        }
      }
      auto m = im_.materialize(Sym::constant(std::move(h), g_.value(v).name + ".half"));
      if (!m.ok()) return std::nullopt;
      return *m;
    };
    auto c = halves(cos);
    if (!c) return std::nullopt;
    auto s = halves(sin);
    if (!s) return std::nullopt;
    return accept(add(Op::rope, {x, *c, *s}, {{"style", std::string("half")}}), root);
  }

  // k [B, Hkv, S, D] repeated over groups (reshape, broadcast, reshape to [B, Hkv*r, S, D]) -> k
  ValueId ungroup(ValueId v) const {
    const Node* merge = node(v, Op::reshape);
    if (!merge) return v;
    const Node* expand = node(merge->inputs[0], Op::broadcast);
    if (!expand) return v;
    const Node* split = node(expand->inputs[0], Op::reshape);
    if (!split) return v;
    const Shape& k = type(split->inputs[0]).shape;
    const Shape& s5 = type(expand->inputs[0]).shape;
    const Shape& e5 = type(merge->inputs[0]).shape;
    if (k.size() != 4 || s5 != Shape{k[0], k[1], 1, k[2], k[3]} || e5.size() != 5 || e5[0] != k[0] ||
        e5[1] != k[1] || e5[3] != k[2] || e5[4] != k[3] || type(v).shape != Shape{k[0], k[1] * e5[2], k[2], k[3]}) {
      return v;
    }
    return split->inputs[0];
  }

  // reshape(transpose(reshape(K, [n, a, b]), [0, 2, 1]), lead + [b, a]) (batch dims merged around a 3-D
  // transpose): the value transpose(K, swap last two) would give; returns that transpose's stand-in K^T
  // node only when the graph already has it, else K^T is rebuilt from K as a rank-4 transpose.
  std::optional<ValueId> swapped_through_reshapes(ValueId v) {
    const Node* outer = node(v, Op::reshape);
    if (!outer) return std::nullopt;
    const Node* t = node(outer->inputs[0], Op::transpose);
    if (!t) return std::nullopt;
    const Node* inner = node(t->inputs[0], Op::reshape);
    if (!inner) return std::nullopt;
    const ValueId k = inner->inputs[0];
    const Shape& ks = type(k).shape;
    const Shape& rs = type(t->inputs[0]).shape;
    std::vector<int64_t> perm = t->attrs.get_ints("perm");
    const size_t r = rs.size();
    if (ks.size() < 2 || r < 2 || perm.size() != r || rs[r - 1] != ks.back() || rs[r - 2] != ks[ks.size() - 2]) return std::nullopt;
    for (size_t i = 0; i + 2 < r; ++i) {
      if (perm[i] != static_cast<int64_t>(i)) return std::nullopt;
    }
    if (perm[r - 2] != static_cast<int64_t>(r - 1) || perm[r - 1] != static_cast<int64_t>(r - 2)) return std::nullopt;
    Shape want(ks.begin(), ks.end() - 2);
    want.push_back(ks.back());
    want.push_back(ks[ks.size() - 2]);
    if (type(v).shape != want || ks.size() != 4) return std::nullopt;
    auto kt = add(Op::transpose, {k}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
    if (!kt.ok()) return std::nullopt;
    return *kt;
  }

  // softmax(q k^T * scale [+ mask]) v -> attention(q, k, v[, mask])
  std::optional<ValueId> attention(ValueId root) {
    const Node* pv = node(root, Op::matmul);
    if (!pv || rank(root) != 4) return std::nullopt;
    const ValueId v_in = pv->inputs[1];  // adding nodes below may move the graph's nodes
    const Node* sm = node(pv->inputs[0], Op::softmax);
    if (!sm || ops::normalize_axis(sm->attrs.get_int("axis", -1), 4) != 3) return std::nullopt;
    ValueId scores = sm->inputs[0];
    std::optional<ValueId> mask;
    if (const Node* plus = node(scores, Op::add)) {
      for (int i = 0; i < 2 && !mask; ++i) {
        if (im_.producer(plus->inputs[i]) && im_.producer(plus->inputs[i])->op == Op::matmul) continue;
        const Product p = product(plus->inputs[1 - i]);
        if (p.factors.size() == 1 && node(p.factors[0], Op::matmul)) {
          mask = plus->inputs[i];
          scores = plus->inputs[1 - i];
        }
      }
      if (!mask) return std::nullopt;
    }
    const Product sp = product(scores);
    if (sp.factors.size() != 1) return std::nullopt;
    const Node* qk = node(sp.factors[0], Op::matmul);
    if (!qk) return std::nullopt;
    const Product qp = product(qk->inputs[0]);
    const Product kp = product(qk->inputs[1]);
    if (qp.factors.size() != 1 || kp.factors.size() != 1) return std::nullopt;
    double scale = sp.coefficient * qp.coefficient * kp.coefficient;
    // k^T = transpose(X, perm): k is X transposed by perm with its last two entries swapped.
    ValueId kt_value = kp.factors[0];
    if (auto k3 = swapped_through_reshapes(kt_value)) kt_value = *k3;
    const Node* kt = node(kt_value, Op::transpose);
    if (!kt || rank(kt_value) != 4) return std::nullopt;
    std::vector<int64_t> perm = kt->attrs.get_ints("perm");
    std::swap(perm[2], perm[3]);
    const Product kk = product(kt->inputs[0]);
    if (kk.factors.size() != 1) return std::nullopt;
    scale *= kk.coefficient;
    const ValueId q = qp.factors[0];
    ValueId k = kk.factors[0];
    if (perm != std::vector<int64_t>{0, 1, 2, 3}) {
      auto kv = add(Op::transpose, {k}, {{"perm", perm}});
      if (!kv.ok()) return std::nullopt;
      k = *kv;
    }
    k = ungroup(k);
    const ValueId v = ungroup(v_in);
    if (rank(q) != 4 || rank(k) != 4 || rank(v) != 4) return std::nullopt;
    Attrs attrs;
    const double d = static_cast<double>(type(q).shape[3]);
    if (!near(scale, 1.0 / std::sqrt(d), 1e-6)) attrs.set("scale", scale);
    std::vector<ValueId> ins{q, k, v};
    if (mask) {
      if (is_causal_mask(*mask, type(q).shape[2], type(k).shape[2])) {
        attrs.set("causal", int64_t{1});
      } else {
        ins.push_back(*mask);
      }
    }
    return accept(add(Op::attention, ins, attrs), root);
  }
  bool is_causal_mask(ValueId m, int64_t sq, int64_t sk) const {
    const Tensor* t = im_.weight_data(m);
    if (!t || t->numel() != sq * sk || !dtype_is_float(t->dtype())) return false;
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        const double v = t->get(i * sk + j);
        const bool attend = j <= i + sk - sq;
        if (attend ? v != 0.0 : !(std::isinf(v) && v < 0)) return false;
      }
    }
    return true;
  }

  // x * sigmoid(x) -> silu(x)
  std::optional<ValueId> silu(ValueId root) {
    const Node* n = node(root, Op::mul);
    if (!n) return std::nullopt;
    for (int i = 0; i < 2; ++i) {
      const Node* s = node(n->inputs[1 - i], Op::sigmoid);
      if (s && s->inputs[0] == n->inputs[i]) return accept(add(Op::silu, {n->inputs[i]}), root);
    }
    return std::nullopt;
  }

  // (a * c1) * c2 with c1 * c2 == 1 -> a (what a GELU's 2x and 0.5 leave behind)
  std::optional<ValueId> unit_scale(ValueId root) {
    if (!node(root, Op::mul) && !node(root, Op::div)) return std::nullopt;
    const Product p = product(root);
    if (p.factors.size() != 1 || p.coefficient != 1.0 || type(p.factors[0]) != type(root)) return std::nullopt;
    return p.factors[0];
  }

 private:
  Importer& im_;
  const Graph& g_;
};

}  // namespace

std::optional<ValueId> Importer::normalize(ValueId v) {
  Matcher m(*this);
  const Node* n = producer(v);
  if (!n) return std::nullopt;
  using Fn = std::optional<ValueId> (Matcher::*)(ValueId);
  static const std::vector<std::pair<Op, Fn>> kMatchers = {
      {Op::div, &Matcher::layernorm_core}, {Op::mul, &Matcher::layernorm_core},
      {Op::div, &Matcher::rmsnorm_core},   {Op::mul, &Matcher::rmsnorm_core},
      {Op::mul, &Matcher::norm_affine},    {Op::add, &Matcher::norm_affine},
      {Op::add, &Matcher::linear_bias},    {Op::mul, &Matcher::gelu_tanh},
      {Op::reshape, &Matcher::rope_interleaved}, {Op::add, &Matcher::rope_half},
      {Op::matmul, &Matcher::attention},   {Op::mul, &Matcher::unit_scale},   {Op::mul, &Matcher::silu},
      {Op::div, &Matcher::unit_scale},
  };
  const Op op = n->op;
  for (const auto& [root_op, fn] : kMatchers) {
    if (root_op != op) continue;
    if (auto r = (m.*fn)(v)) return r;
  }
  return std::nullopt;
}

Result<std::optional<Sym>> Importer::gelu_from_erf(const Sym& x, const Sym& erf) {
  // x * (c0 + c1 * erf(u)) with u = b / sqrt(2) and x = a * b: a GELU when c0 == c1, scaled by 2 * c0 * a.
  Matcher m(*this);
  if (!near(erf.erf_offset, erf.erf_scale, 1e-6)) return std::optional<Sym>{};
  const Matcher::Product u = m.product(erf.value);
  if (u.factors.size() != 1 || !near(u.coefficient, 1.0 / std::sqrt(2.0), 1e-6)) return std::optional<Sym>{};
  const ValueId b = u.factors[0];
  const Matcher::Product xp = m.product(x.value);
  if (xp.factors.size() != 1 || xp.factors[0] != b) return std::optional<Sym>{};
  const double factor = 2.0 * erf.erf_offset * xp.coefficient;
  KILN_ASSIGN_OR_RETURN(ValueId g, add_node1(Op::gelu, {b}, {{"approximate", std::string("none")}}));
  if (near(factor, 1.0, 1e-6)) return std::optional<Sym>(Sym::of(g));
  KILN_ASSIGN_OR_RETURN(Sym s, emit1(Op::mul, {Sym::of(g), scalar(factor, graph.value(g).type.dtype)}));
  return std::optional<Sym>(s);
}

}  // namespace kiln::onnx
