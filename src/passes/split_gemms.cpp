#include "passes/split_gemms.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "passes/gemm_rows.h"
#include "passes/graph_copier.h"
#include "passes/value_readers.h"

namespace kiln::passes {
namespace {

constexpr const char* kPass = "split_gemms_by_epilogue";

// A run of consecutive split pieces that want the same epilogue: [begin, end) of the pieces, [n0, n1) of N.
struct Run {
  size_t begin = 0, end = 0;
  int64_t n0 = 0, n1 = 0;
  bool gelu = false;
};

struct Candidate {
  NodeId gemm = -1;
  NodeId split = -1;
  std::vector<Run> runs;
};

bool is_tanh_gelu(const Node& n) { return n.op == Op::gelu && n.attrs.get_string("approximate", "none") == "tanh"; }

// Why the weight scales of `gemm` cannot be cut at the runs' boundaries, if they cannot.
std::optional<std::string> scale_blocker(const Graph& graph, const Node& gemm, const std::vector<Run>& runs) {
  for (size_t r = 0; r + 1 < runs.size(); ++r) {
    if (auto why = scale_cut_blocker(graph, gemm, runs[r].n1)) return why;
  }
  return std::nullopt;
}

std::optional<Candidate> find_candidate(const Graph& graph, const ValueReaders& readers, NodeId id,
                                        std::vector<std::string>& notes) {
  const Node& gemm = graph.node(id);
  if (!is_plain_gemm(gemm)) return std::nullopt;
  const ValueId y = gemm.outputs[0];
  const NodeId split_id = readers.only_reader(y);
  if (split_id < 0) return std::nullopt;
  const Node& split = graph.node(split_id);
  const int64_t rank = static_cast<int64_t>(graph.value(y).type.shape.size());
  const int64_t axis = split.attrs.get_int("axis", 0);
  if (split.op != Op::split || (axis != -1 && axis != rank - 1)) return std::nullopt;

  Candidate c{id, split_id, {}};
  int64_t n = 0;
  for (size_t i = 0; i < split.outputs.size(); ++i) {
    const NodeId reader = readers.only_reader(split.outputs[i]);
    const bool gelu = reader >= 0 && is_tanh_gelu(graph.node(reader));
    const int64_t width = graph.value(split.outputs[i]).type.shape.back();
    if (c.runs.empty() || c.runs.back().gelu != gelu) c.runs.push_back(Run{i, i, n, n, gelu});
    c.runs.back().end = i + 1;
    c.runs.back().n1 = n + width;
    n += width;
  }
  if (c.runs.size() < 2) return std::nullopt;
  if (auto why = scale_blocker(graph, gemm, c.runs)) {
    notes.push_back("not split: " + graph.node_label(id) + " feeds GELU on some columns only, but " + *why);
    return std::nullopt;
  }
  return c;
}

class Splitter {
 public:
  explicit Splitter(const Graph& source) : source_(source), copier_(source) {}
  GraphCopier& copier() { return copier_; }

  // One GEMM per run at the position of the original; the pieces keep their names.
  void emit(const Candidate& c) {
    const Node& gemm = source_.node(c.gemm);
    const Node& split = source_.node(c.split);
    const GemmOperands ops = gemm_operands(gemm);
    const std::string stem = source_.value(gemm.outputs[0]).name;
    const int64_t n = source_.value(gemm.inputs[ops.weight]).type.shape[0];
    for (const Run& run : c.runs) {
      std::vector<ValueId> inputs;
      for (size_t i = 0; i < gemm.inputs.size(); ++i) {
        const ValueId v = copier_.map(gemm.inputs[i]);
        inputs.push_back(ops.along_n(i) ? gemm_rows(copier_, kPass, v, run.n0, run.n1, i == ops.scale ? n : 0) : v);
      }
      const bool one_piece = run.end - run.begin == 1;
      const std::string name = one_piece ? source_.value(split.outputs[run.begin]).name
                                         : fresh_name(fmt::format("{}.cols{}_{}", stem, run.n0, run.n1));
      const ValueId out = add(gemm.op, std::move(inputs), gemm.attrs, {name})[0];
      if (one_piece) {
        copier_.set_map(split.outputs[run.begin], out);
        continue;
      }
      std::vector<int64_t> sizes;
      std::vector<std::string> names;
      for (size_t i = run.begin; i < run.end; ++i) {
        sizes.push_back(source_.value(split.outputs[i]).type.shape.back());
        names.push_back(source_.value(split.outputs[i]).name);
      }
      const std::vector<ValueId> parts = add(Op::split, {out}, {{"axis", int64_t{-1}}, {"sizes", sizes}}, names);
      for (size_t i = run.begin; i < run.end; ++i) copier_.set_map(split.outputs[i], parts[i - run.begin]);
    }
  }

 private:
  std::vector<ValueId> add(Op op, std::vector<ValueId> inputs, Attrs attrs, std::vector<std::string> names) {
    return copier_.add(kPass, op, std::move(inputs), std::move(attrs), std::move(names));
  }
  std::string fresh_name(const std::string& stem) const { return copier_.fresh_name(stem); }

  const Graph& source_;
  GraphCopier copier_;
};

std::string describe_runs(const Candidate& c) {
  std::string out;
  for (const Run& run : c.runs) {
    out += fmt::format("{}N = {}{}", out.empty() ? "" : " + ", run.n1 - run.n0, run.gelu ? " (GELU)" : "");
  }
  return out;
}

}  // namespace

PassResult split_gemms_by_epilogue(const Graph& graph) {
  PassReport report{"split-gemms", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  const ValueReaders readers(graph);
  std::vector<std::optional<Candidate>> at(graph.nodes().size());
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    at[static_cast<size_t>(id)] = find_candidate(graph, readers, id, report.notes);
  }
  Splitter splitter(graph);
  std::vector<bool> skip(graph.nodes().size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (skip[static_cast<size_t>(id)]) continue;
    const std::optional<Candidate>& c = at[static_cast<size_t>(id)];
    if (!c) {
      splitter.copier().copy_node(id);
      continue;
    }
    splitter.emit(*c);
    skip[static_cast<size_t>(c->split)] = true;
    report.changed = true;
    ++report.found[fmt::format("{} into {} GEMMs", op_name(graph.node(id).op), c->runs.size())];
    report.notes.push_back(fmt::format("split {} by epilogue: {}", graph.node_label(id), describe_runs(*c)));
  }
  Graph out = splitter.copier().finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
