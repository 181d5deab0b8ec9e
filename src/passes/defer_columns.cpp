#include "passes/defer_columns.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/op_class.h"
#include "passes/gemm_rows.h"
#include "passes/graph_copier.h"
#include "passes/value_readers.h"

namespace kiln::passes {
namespace {

constexpr const char* kPass = "defer_late_columns";

// Columns [c0, c1) of the GEMM's output.
struct Columns {
  int64_t c0 = 0, c1 = 0;
};

// A value that is a window of the GEMM's columns, read by at least one node that is not such a view.
struct Window {
  ValueId value = -1;
  Columns cols;
  bool early = false;
};

struct Candidate {
  NodeId gemm = -1;
  std::vector<NodeId> views;      // the views between the GEMM and its readers: dropped
  std::vector<Window> windows;
  std::vector<Columns> early, late;  // column ranges, ascending, merged where they touch
  std::vector<std::string> first_wave;
};

bool is_heavy(Op op) {
  const OpClass c = op_class(op);
  return c == OpClass::matmul || c == OpClass::attention;
}

int64_t last_axis(const Graph& graph, ValueId v) { return static_cast<int64_t>(graph.value(v).type.shape.size()) - 1; }

bool along_last_axis(const Graph& graph, const Node& n) {
  const int64_t axis = n.attrs.get_int("axis", 0);
  const int64_t last = last_axis(graph, n.inputs[0]);
  return axis == last || axis == -1;
}

// Walks the views below `v` (columns [off, off + width) of the GEMM's output) that keep a window of columns;
// records the windows that something else reads. False when a window is a graph output.
bool walk_windows(const Graph& graph, const ValueReaders& readers, ValueId v, int64_t off, Candidate& c) {
  const Shape& shape = graph.value(v).type.shape;
  const int64_t width = shape.back();
  if (readers.is_output(v)) return false;
  bool read_otherwise = false;
  for (NodeId r : readers.of(v)) {
    const Node& n = graph.node(r);
    const bool column_view = (n.op == Op::split && along_last_axis(graph, n)) ||
                             (n.op == Op::slice && along_last_axis(graph, n) && n.attrs.get_int("step", 1) == 1) ||
                             (n.op == Op::reshape && graph.value(n.outputs[0]).type.shape.back() == width);
    if (!column_view) {
      read_otherwise = true;
      continue;
    }
    c.views.push_back(r);  // a view has one input: it is reached once
    int64_t at = off;
    if (n.op == Op::slice) {
      int64_t start = n.attrs.get_int("start", 0);
      if (start < 0) start += width;
      at += std::clamp<int64_t>(start, 0, width);
    }
    for (ValueId out : n.outputs) {
      if (!walk_windows(graph, readers, out, at, c)) return false;
      if (n.op == Op::split) at += graph.value(out).type.shape.back();
    }
  }
  if (read_otherwise) c.windows.push_back({v, {off, off + width}, false});
  return true;
}

// Column ranges ascending, touching ones merged.
std::vector<Columns> merged(std::vector<Columns> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const Columns& a, const Columns& b) { return a.c0 < b.c0; });
  std::vector<Columns> out;
  for (const Columns& r : ranges) {
    if (!out.empty() && r.c0 <= out.back().c1) {
      out.back().c1 = std::max(out.back().c1, r.c1);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

bool overlaps(const std::vector<Columns>& a, const std::vector<Columns>& b) {
  for (const Columns& x : a) {
    for (const Columns& y : b) {
      if (x.c0 < y.c1 && y.c0 < x.c1) return true;
    }
  }
  return false;
}

int64_t width_of(const std::vector<Columns>& ranges) {
  int64_t w = 0;
  for (const Columns& r : ranges) w += r.c1 - r.c0;
  return w;
}

// Per node: whether it is `gemm` or one of its ancestors, and whether it depends on `gemm`.
struct Lineage {
  std::vector<bool> before, after;
};

Lineage lineage_of(const Graph& graph, NodeId gemm) {
  const size_t count = graph.nodes().size();
  Lineage l{std::vector<bool>(count, false), std::vector<bool>(count, false)};
  l.before[static_cast<size_t>(gemm)] = true;
  for (NodeId id = gemm; id >= 0; --id) {
    if (!l.before[static_cast<size_t>(id)]) continue;
    for (ValueId v : graph.node(id).inputs) {
      const NodeId p = graph.value(v).producer;
      if (p >= 0) l.before[static_cast<size_t>(p)] = true;
    }
  }
  for (NodeId id = gemm + 1; id < static_cast<NodeId>(count); ++id) {
    for (ValueId v : graph.node(id).inputs) {
      const NodeId p = graph.value(v).producer;
      if (p >= 0 && (p == gemm || l.after[static_cast<size_t>(p)])) l.after[static_cast<size_t>(id)] = true;
    }
  }
  return l;
}

// Marks each window early or late (defer_columns.h); returns the first wave's heavy ops (empty: nothing to do).
std::vector<NodeId> classify(const Graph& graph, const ValueReaders& readers, NodeId gemm, Candidate& c) {
  const size_t count = graph.nodes().size();
  const Lineage l = lineage_of(graph, gemm);
  // held[n]: a heavy op other than the GEMM and its ancestors comes before n.
  std::vector<bool> held(count, false);
  std::vector<NodeId> wave;
  for (NodeId id = 0; id < static_cast<NodeId>(count); ++id) {
    for (ValueId v : graph.node(id).inputs) {
      const NodeId p = graph.value(v).producer;
      if (p < 0) continue;
      const bool other_heavy = is_heavy(graph.node(p).op) && !l.before[static_cast<size_t>(p)];
      if (other_heavy || held[static_cast<size_t>(p)]) held[static_cast<size_t>(id)] = true;
    }
    if (l.after[static_cast<size_t>(id)] && is_heavy(graph.node(id).op) && !held[static_cast<size_t>(id)]) wave.push_back(id);
  }
  if (wave.empty()) return wave;
  // needed[n]: n is in the first wave or an ancestor of one.
  std::vector<bool> needed(count, false);
  for (NodeId id : wave) needed[static_cast<size_t>(id)] = true;
  for (NodeId id = static_cast<NodeId>(count) - 1; id >= 0; --id) {
    if (!needed[static_cast<size_t>(id)]) continue;
    for (ValueId v : graph.node(id).inputs) {
      const NodeId p = graph.value(v).producer;
      if (p >= 0) needed[static_cast<size_t>(p)] = true;
    }
  }
  for (Window& w : c.windows) {
    for (NodeId r : readers.of(w.value)) {
      const bool view = std::find(c.views.begin(), c.views.end(), r) != c.views.end();
      if (!view && needed[static_cast<size_t>(r)]) w.early = true;
    }
  }
  return wave;
}

std::optional<Candidate> find_candidate(const Graph& graph, const ValueReaders& readers, NodeId id,
                                        std::vector<std::string>& notes) {
  const Node& gemm = graph.node(id);
  if (!is_plain_gemm(gemm)) return std::nullopt;
  const GemmOperands ops = gemm_operands(gemm);
  const TensorType& w = graph.value(gemm.inputs[ops.weight]).type;
  double input_bytes = 0;
  for (size_t i = 0; i < ops.weight; ++i) input_bytes += static_cast<double>(type_bytes(graph.value(gemm.inputs[i]).type));
  if (static_cast<double>(type_bytes(w)) < kWeightBound * input_bytes) return std::nullopt;

  Candidate c;
  c.gemm = id;
  if (!walk_windows(graph, readers, gemm.outputs[0], 0, c)) return std::nullopt;
  const std::vector<NodeId> wave = classify(graph, readers, id, c);
  if (wave.empty()) return std::nullopt;
  std::vector<Columns> early, late;
  for (const Window& win : c.windows) (win.early ? early : late).push_back(win.cols);
  c.early = merged(early);
  c.late = merged(late);
  if (c.early.empty() || c.late.empty() || overlaps(c.early, c.late)) return std::nullopt;
  for (const std::vector<Columns>* set : {&c.early, &c.late}) {
    for (const Columns& r : *set) {
      for (int64_t cut : {r.c0, r.c1}) {
        if (auto why = scale_cut_blocker(graph, gemm, cut)) {
          notes.push_back("not deferred: " + graph.node_label(id) + ": " + *why);
          return std::nullopt;
        }
      }
    }
  }
  for (NodeId n : wave) c.first_wave.push_back(graph.node_label(n));
  return c;
}

class Deferrer {
 public:
  explicit Deferrer(const Graph& source) : source_(source), copier_(source) {}
  GraphCopier& copier() { return copier_; }

  // The early GEMM, then the late one, at the original's place; each window as a view of the one with its columns.
  void emit(const Candidate& c) {
    const Node& gemm = source_.node(c.gemm);
    const std::string stem = source_.value(gemm.outputs[0]).name;
    const ValueId early = gemm_over(gemm, c.early, stem + ".early");
    const ValueId late = gemm_over(gemm, c.late, stem + ".late");
    for (const Window& w : c.windows) {
      const std::vector<Columns>& set = w.early ? c.early : c.late;
      int64_t at = 0;  // where the window's first column lands in its GEMM's output
      for (const Columns& r : set) {
        if (w.cols.c0 >= r.c0 && w.cols.c1 <= r.c1) {
          at += w.cols.c0 - r.c0;
          break;
        }
        at += r.c1 - r.c0;
      }
      const ValueId from = w.early ? early : late;
      const TensorType& want = source_.value(w.value).type;
      const int64_t last = static_cast<int64_t>(copier_.target().value(from).type.shape.size()) - 1;
      // The window keeps its name (its source value is not copied); a reshape back to its shape, where the
      // views dropped had one, takes it.
      const std::string name = source_.value(w.value).name;
      Shape sliced = copier_.target().value(from).type.shape;
      sliced.back() = want.shape.back();
      const bool reshape = sliced != want.shape;
      ValueId v = add(Op::slice, {from},
                      {{"axis", last}, {"start", at}, {"end", at + want.shape.back()}, {"step", int64_t{1}}},
                      {reshape ? copier_.fresh_name(name + ".cols") : name})[0];
      if (reshape) v = add(Op::reshape, {v}, {{"shape", want.shape}}, {name})[0];
      copier_.set_map(w.value, v);
    }
  }

 private:
  // The GEMM over the columns in `ranges`: its along-N operands gathered (slices, joined by a concat).
  ValueId gemm_over(const Node& gemm, const std::vector<Columns>& ranges, const std::string& name) {
    const GemmOperands ops = gemm_operands(gemm);
    const int64_t n = source_.value(gemm.inputs[ops.weight]).type.shape[0];
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < gemm.inputs.size(); ++i) {
      const ValueId v = copier_.map(gemm.inputs[i]);
      if (!ops.along_n(i) || copier_.target().value(v).type.shape.empty()) {
        inputs.push_back(v);
        continue;
      }
      std::vector<ValueId> pieces;
      for (const Columns& r : ranges) pieces.push_back(gemm_rows(copier_, kPass, v, r.c0, r.c1, i == ops.scale ? n : 0));
      inputs.push_back(pieces.size() == 1 ? pieces[0]
                                          : add(Op::concat, pieces, {{"axis", int64_t{0}}},
                                                {copier_.fresh_name(copier_.target().value(v).name + ".gathered")})[0]);
    }
    return add(gemm.op, std::move(inputs), gemm.attrs, {copier_.fresh_name(name)})[0];
  }

  std::vector<ValueId> add(Op op, std::vector<ValueId> inputs, Attrs attrs, std::vector<std::string> names) {
    return copier_.add(kPass, op, std::move(inputs), std::move(attrs), std::move(names));
  }

  const Graph& source_;
  GraphCopier copier_;
};

std::string describe(const std::vector<Columns>& ranges) {
  std::string out;
  for (const Columns& r : ranges) out += fmt::format("{}[{}, {})", out.empty() ? "" : " ", r.c0, r.c1);
  return out;
}

}  // namespace

PassResult defer_late_columns(const Graph& graph) {
  PassReport report{"defer-columns", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const ValueReaders readers(graph);
  Deferrer deferrer(graph);
  std::vector<bool> skip(graph.nodes().size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (skip[static_cast<size_t>(id)]) continue;
    const std::optional<Candidate> c = find_candidate(graph, readers, id, report.notes);
    if (!c) {
      deferrer.copier().copy_node(id);
      continue;
    }
    deferrer.emit(*c);
    for (NodeId v : c->views) skip[static_cast<size_t>(v)] = true;
    report.changed = true;
    ++report.found[fmt::format("{}: late columns into a GEMM of their own", op_name(graph.node(id).op))];
    std::string wave;
    for (const std::string& w : c->first_wave) wave += (wave.empty() ? "" : ", ") + w;
    report.notes.push_back(fmt::format("{}: columns {} ({} of them) before {}; columns {} ({}) in a second GEMM",
                                       graph.node_label(id), describe(c->early), width_of(c->early), wave,
                                       describe(c->late), width_of(c->late)));
  }
  Graph out = deferrer.copier().finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
