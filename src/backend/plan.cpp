#include "backend/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <queue>
#include <set>

#include "backend/lanes.h"
#include "backend/memory_plan.h"
#include "kernel/emit.h"
#include "passes/staging.h"

namespace kiln::backend {

bool is_library_op(Op op) {
  // pack_scales is a load-time layout change of weight scales: a host op on every backend.
  return op_has_trait(op, kTraitMatmul) || op_has_trait(op, kTraitAttention) || op == Op::gather ||
         op == Op::pack_scales;
}

namespace {

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

uint64_t tensor_content_hash(const Tensor& t) {
  const auto dtype = static_cast<uint8_t>(t.dtype());
  uint64_t h = fnv1a(kFnvBasis, &dtype, 1);
  for (int64_t d : t.shape()) h = fnv1a(h, &d, sizeof d);
  return fnv1a(h, t.data(), t.byte_size());
}

// Units (a fused group, or a node outside any group) in a topological order; ties go to the earliest node.
Result<std::vector<std::vector<NodeId>>> ordered_units(const Graph& g) {
  const auto node_count = static_cast<NodeId>(g.nodes().size());
  std::map<int32_t, std::vector<NodeId>> groups;
  for (NodeId id = 0; id < node_count; ++id) {
    if (g.node(id).group >= 0) groups[g.node(id).group].push_back(id);
  }
  std::vector<int> unit_of(g.nodes().size());
  std::vector<std::vector<NodeId>> units;
  std::map<int32_t, int> unit_of_group;
  for (NodeId id = 0; id < node_count; ++id) {
    const int32_t grp = g.node(id).group;
    if (grp >= 0 && unit_of_group.count(grp)) {
      unit_of[id] = unit_of_group[grp];
      continue;
    }
    unit_of[id] = static_cast<int>(units.size());
    units.push_back(grp >= 0 ? groups[grp] : std::vector<NodeId>{id});
    if (grp >= 0) unit_of_group[grp] = unit_of[id];
  }
  std::vector<std::set<int>> succ(units.size());
  std::vector<int> indegree(units.size(), 0);
  for (NodeId id = 0; id < node_count; ++id) {
    for (ValueId v : g.node(id).inputs) {
      const NodeId p = g.value(v).producer;
      if (p < 0 || unit_of[p] == unit_of[id]) continue;
      if (succ[unit_of[p]].insert(unit_of[id]).second) ++indegree[unit_of[id]];
    }
  }
  std::priority_queue<std::pair<NodeId, int>, std::vector<std::pair<NodeId, int>>, std::greater<>> ready;
  for (size_t u = 0; u < units.size(); ++u) {
    if (indegree[u] == 0) ready.push({units[u][0], static_cast<int>(u)});
  }
  std::vector<std::vector<NodeId>> order;
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    order.push_back(units[u]);
    for (int s : succ[u]) {
      if (--indegree[s] == 0) ready.push({units[s][0], s});
    }
  }
  if (order.size() != units.size()) {
    return make_error(ErrorCode::verify_error, "plan: the fused groups of graph " + g.name + " form a cycle");
  }
  return order;
}

// Where a view group's output lives: `byte_offset` bytes into the buffer of `base` (never itself a view),
// densely, or pitched (rows of `row` elements, `pitch` apart: a column window, or a concat piece in place).
struct AliasOf {
  ValueId base;
  int64_t byte_offset;
  int64_t row = 0, pitch = 0;
  bool operator==(const AliasOf&) const = default;
};

constexpr int64_t kPitchAlign = 16;  // bytes: where a pitched window may start and how its rows may be spaced

// Who reads each value (node and operand index), and which values are graph inputs and outputs.
struct ValueUses {
  std::vector<std::vector<std::pair<NodeId, int>>> readers;
  std::set<ValueId> inputs, outputs;

  explicit ValueUses(const Graph& g) : readers(g.values().size()) {
    for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
      for (size_t i = 0; i < g.node(id).inputs.size(); ++i) readers[g.node(id).inputs[i]].push_back({id, static_cast<int>(i)});
    }
    for (const GraphInput& in : g.inputs()) inputs.insert(in.value);
    for (const GraphOutput& o : g.outputs()) outputs.insert(o.value);
  }
};

// Whether node `id` is a library call the backend runs with operand `operand` (an input, or -1: the output)
// pitched in rows of `row` elements `pitch` apart.
bool library_takes_pitched(const Graph& g, const Backend& backend, NodeId id, int operand, int64_t row, int64_t pitch) {
  const Node& n = g.node(id);
  std::vector<TensorType> types;
  for (ValueId v : n.inputs) types.push_back(g.value(v).type);
  return n.group < 0 && is_library_op(n.op) && backend.supports(n.op, types, n.attrs).ok() &&
         backend.takes_pitched(n.op, types, n.attrs, operand, row, pitch);
}

// Whether every reader of `v` is a library call that takes it pitched (a column window read in place).
bool read_pitched_by_library(const Graph& g, const ValueUses& uses, const Backend& backend, ValueId v, int64_t row,
                             int64_t pitch) {
  if (uses.outputs.count(v) || uses.readers[v].empty()) return false;
  for (const auto& [id, operand] : uses.readers[v]) {
    if (!library_takes_pitched(g, backend, id, operand, row, pitch)) return false;
  }
  return true;
}

// The one concat of a views-only unit whose other members are reshapes (and slices, where `slices`); -1 else.
NodeId lone_concat(const Graph& g, const std::vector<NodeId>& members, bool slices) {
  NodeId concat = -1;
  for (NodeId m : members) {
    const Op op = g.node(m).op;
    if (op == Op::concat) {
      if (concat >= 0) return -1;
      concat = m;
    } else if (op != Op::reshape && !(slices && op == Op::slice)) {
      return -1;
    }
  }
  return concat;
}

// A concat along the last axis whose pieces the library ops that produce them write in place, into their
// column windows of the concat's buffer (FLUX's single block: attention and the MLP GEMM into linear2's input).
// The concat group then needs no kernel. `pieces`: each piece producer's output -> its window.
struct InPlaceConcat {
  ValueId concat = -1;
  std::map<ValueId, AliasOf> pieces;
  // The joint form (joint_windows): the pieces lie one after another in the first one's buffer (`base`, of
  // `base_bytes`), and the group's output is a window of that buffer.
  std::optional<AliasOf> output;
  ValueId base = -1;
  int64_t base_bytes = 0;
};

// Which concat groups among `units` can be written in place on `backend`: the group is a concat along the
// last axis (reshapes of its inputs may ride along), every input is the one output of a library op read by
// nothing else, computed in the concat's stage, and the backend writes each op's output pitched.
std::map<size_t, InPlaceConcat> in_place_concats(const Graph& g, const std::vector<std::vector<NodeId>>& units,
                                                 const ValueUses& uses, const std::vector<Binding>& binding,
                                                 const Backend& backend) {
  std::map<size_t, InPlaceConcat> found;
  for (size_t u = 0; u < units.size(); ++u) {
    const std::vector<NodeId>& members = units[u];
    std::set<NodeId> member_set(members.begin(), members.end());
    const NodeId concat = lone_concat(g, members, false);
    if (concat < 0) continue;
    const Node& c = g.node(concat);
    const TensorType& ct = g.value(c.outputs[0]).type;
    const auto rank = static_cast<int64_t>(ct.shape.size());
    const int64_t axis = c.attrs.get_int("axis", 0);
    if (axis != -1 && axis != rank - 1) continue;
    const int64_t width = ct.shape.back();
    const int64_t es = static_cast<int64_t>(dtype_size(ct.dtype));
    InPlaceConcat plan;
    plan.concat = c.outputs[0];
    int64_t column = 0;
    bool ok = (width * es) % kPitchAlign == 0;
    for (ValueId in : c.inputs) {
      // Back through the group's reshapes to the value a producer outside the group writes.
      ValueId piece = in;
      while (member_set.count(g.value(piece).producer) && g.node(g.value(piece).producer).op == Op::reshape) {
        const ValueId before = g.node(g.value(piece).producer).inputs[0];
        ok = ok && uses.readers[piece].size() == 1;
        piece = before;
      }
      const int64_t piece_width = g.value(in).type.shape.back();
      const NodeId producer = g.value(piece).producer;
      ok = ok && !member_set.count(producer) && producer >= 0 && uses.readers[piece].size() == 1 &&
           member_set.count(uses.readers[piece][0].first) && !uses.outputs.count(piece) && !plan.pieces.count(piece) &&
           (column * es) % kPitchAlign == 0 && binding[piece] == binding[plan.concat] &&
           g.node(producer).outputs.size() == 1 && library_takes_pitched(g, backend, producer, -1, piece_width, width);
      if (!ok) break;
      plan.pieces[piece] = AliasOf{plan.concat, column * es, piece_width, width};
      column += piece_width;
    }
    if (ok) found[u] = std::move(plan);
  }
  return found;
}

// The same column window of several producers' outputs, concatenated along an outer axis (FLUX's double block:
// the v columns of the text and image q/k/v GEMMs, joined along tokens for attention): when those outputs lie one
// after another in one buffer, the concat is a window of it. Found when the group is slices of the last axis
// with equal bounds, reshapes that keep the axes up to the concat's, and the concat; the outputs are whole
// tensors before the concat axis (everything before it has extent 1), produced by steps of the concat's stage
// (not sources), read as dense tensors by anyone; and the group's output is read only by library calls that
// take it pitched.
std::map<size_t, InPlaceConcat> joint_windows(const Graph& g, const std::vector<std::vector<NodeId>>& units,
                                              const ValueUses& uses, const std::vector<Binding>& binding,
                                              const Backend& backend) {
  std::map<size_t, InPlaceConcat> found;
  for (size_t u = 0; u < units.size(); ++u) {
    std::set<NodeId> member_set(units[u].begin(), units[u].end());
    const NodeId concat = lone_concat(g, units[u], true);
    if (concat < 0) continue;
    const Node& c = g.node(concat);
    const ValueId out = c.outputs[0];
    const TensorType& ot = g.value(out).type;
    const auto rank = static_cast<int64_t>(ot.shape.size());
    int64_t axis = c.attrs.get_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank - 1) continue;
    int64_t outer = 1;
    for (int64_t a = 0; a < axis; ++a) outer *= ot.shape[static_cast<size_t>(a)];
    if (outer != 1 || uses.outputs.count(out)) continue;
    const int64_t es = static_cast<int64_t>(dtype_size(ot.dtype));
    InPlaceConcat joint{out, {}, std::nullopt, -1, 0};
    std::optional<std::pair<int64_t, int64_t>> bounds;  // the slice's [start, end) of the last axis
    int64_t width = 0, offset = 0;
    bool ok = true;
    for (ValueId in : c.inputs) {
      ValueId v = in;
      while (ok && member_set.count(g.value(v).producer) && g.node(g.value(v).producer).op == Op::reshape) {
        // The reshape keeps the axes up to the concat's, so rows of the piece stay rows of the source.
        const Shape& to = g.value(v).type.shape;
        const Shape& from = g.value(g.node(g.value(v).producer).inputs[0]).type.shape;
        ok = static_cast<int64_t>(from.size()) > axis &&
             std::equal(to.begin(), to.begin() + axis + 1, from.begin(), from.begin() + axis + 1);
        v = g.node(g.value(v).producer).inputs[0];
      }
      const NodeId slice = g.value(v).producer;
      if (!ok || !member_set.count(slice) || g.node(slice).op != Op::slice) { ok = false; break; }
      const Node& sn = g.node(slice);
      const ValueId piece = sn.inputs[0];
      const Shape& ps = g.value(piece).type.shape;
      const auto prank = static_cast<int64_t>(ps.size());
      int64_t sa = sn.attrs.get_int("axis", 0);
      if (sa < 0) sa += prank;
      const std::pair<int64_t, int64_t> b{sn.attrs.get_int("start", 0), sn.attrs.get_int("end", 0)};
      const NodeId producer = g.value(piece).producer;
      ok = sa == prank - 1 && sn.attrs.get_int("step", 1) == 1 && (!bounds || *bounds == b) &&
           (width == 0 || ps.back() == width) && producer >= 0 && !member_set.count(producer) &&
           !op_has_trait(g.node(producer).op, kTraitSource) && binding[piece] == binding[out] &&
           !uses.inputs.count(piece) && !uses.outputs.count(piece) && !joint.pieces.count(piece) && piece != joint.base &&
           g.value(piece).type.dtype == ot.dtype && prank > axis;
      if (!ok) break;
      bounds = b;
      width = ps.back();
      if (joint.base < 0) joint.base = piece;
      if ((offset * es) % kPitchAlign != 0) { ok = false; break; }
      if (piece != joint.base) joint.pieces[piece] = AliasOf{joint.base, offset * es};
      offset += shape_numel(ps);
    }
    if (!ok || !bounds) continue;
    const int64_t row = bounds->second - bounds->first;
    if ((bounds->first * es) % kPitchAlign != 0 || (width * es) % kPitchAlign != 0) continue;
    if (!read_pitched_by_library(g, uses, backend, out, row, width)) continue;
    joint.output = AliasOf{joint.base, bounds->first * es, row, width};
    joint.base_bytes = offset * es;
    found[u] = std::move(joint);
  }
  return found;
}

}  // namespace

Graph with_step_outputs(const Graph& g) {
  Graph out = g;
  const ValueUses uses(g);
  for (const Node& n : g.nodes()) {
    if (op_has_trait(n.op, kTraitSource) || op_has_trait(n.op, kTraitView)) continue;
    for (ValueId v : n.outputs) {
      bool leaves = n.group < 0;
      for (const auto& [r, operand] : uses.readers[v]) leaves = leaves || g.node(r).group != n.group;
      if (leaves && !uses.outputs.count(v)) KILN_CHECK(out.add_output("step:" + g.value(v).name, v).ok());
    }
  }
  return out;
}

Plan::~Plan() {
  for (DeviceTensor& t : owned_) backend_.release(t);
}

namespace {

// Lanes, stage by stage (lanes.h): each step's lane, waits and signal, within the stages `bounds` delimits.
// Returns complete_before per step: the first step from which every later step of its stage is ordered after
// it (i + 1 on one lane).
template <typename RootOf>
std::vector<int> assign_lanes(std::vector<Plan::Step>& steps, const std::array<size_t, 4>& bounds, int lanes,
                              const RootOf& root_of, PlanSummary& summary) {
  std::vector<int> complete_before(steps.size());
  std::map<ValueId, std::vector<int>> writers;  // by root: a concat's pieces are written by several steps
  for (size_t i = 0; i < steps.size(); ++i) {
    for (ValueId v : steps[i].outputs) writers[root_of(v)].push_back(static_cast<int>(i));
  }
  for (int r = 0; r < 3; ++r) {
    const int begin = static_cast<int>(bounds[r]), end = static_cast<int>(bounds[r + 1]);
    std::vector<std::vector<int>> reads(static_cast<size_t>(end - begin));
    for (int i = begin; i < end; ++i) {
      std::vector<int>& into = reads[static_cast<size_t>(i - begin)];
      for (ValueId v : steps[static_cast<size_t>(i)].inputs) {
        auto w = writers.find(root_of(v));
        if (w == writers.end()) continue;
        for (int p : w->second) {
          if (p >= begin && p < i) into.push_back(p - begin);
        }
      }
      std::sort(into.begin(), into.end());
      into.erase(std::unique(into.begin(), into.end()), into.end());
    }
    const LaneSchedule schedule = schedule_lanes(reads, lanes);
    for (int i = begin; i < end; ++i) {
      Plan::Step& s = steps[static_cast<size_t>(i)];
      s.lane = schedule.lane[static_cast<size_t>(i - begin)];
      s.waits.clear();
      for (int p : schedule.waits[static_cast<size_t>(i - begin)]) s.waits.push_back(begin + p);
      s.signals = schedule.signals[static_cast<size_t>(i - begin)];
      complete_before[static_cast<size_t>(i)] = begin + schedule.complete_before[static_cast<size_t>(i - begin)];
    }
    summary.lanes = std::max(summary.lanes, schedule.lanes_used);
    summary.lane_waits += schedule.waits_total;
  }
  return complete_before;
}

}  // namespace

Result<std::unique_ptr<Plan>> Plan::build(Backend& backend, const Graph& graph, const PlanOptions& options) {
  if (options.per_step_cache_entries < 0) {
    return make_error(ErrorCode::invalid_argument, "plan: per_step_cache_entries must be >= 0, got " +
                                                       std::to_string(options.per_step_cache_entries));
  }
  std::unique_ptr<Plan> plan(new Plan(backend, graph, options));
  const Graph& g = plan->graph_;
  KILN_ASSIGN_OR_RETURN(const std::vector<std::vector<NodeId>> units, ordered_units(g));
  const std::vector<Binding> binding_time = passes::classify_binding_times(g);
  const ValueUses uses(g);
  std::map<size_t, InPlaceConcat> in_place;
  if (options.pitched_windows) {
    in_place = in_place_concats(g, units, uses, binding_time, backend);
    in_place.merge(joint_windows(g, units, uses, binding_time, backend));  // a unit found by both keeps the first form
  }
  std::map<ValueId, AliasOf> piece_windows;
  std::map<ValueId, int64_t> storage_bytes;  // buffers that hold more than their own value (joint windows)
  // Units whose pieces another unit already placed elsewhere, or whose base another unit made a piece, copy.
  for (auto it = in_place.begin(); it != in_place.end();) {
    const InPlaceConcat& c = it->second;
    bool agrees = !piece_windows.count(c.base) && !(storage_bytes.count(c.base) && storage_bytes[c.base] != c.base_bytes);
    for (const auto& [piece, at] : c.pieces) {
      auto known = piece_windows.find(piece);
      agrees = agrees && !storage_bytes.count(piece) && (known == piece_windows.end() || known->second == at);
    }
    if (!agrees) {
      it = in_place.erase(it);
      continue;
    }
    piece_windows.insert(c.pieces.begin(), c.pieces.end());
    if (c.base >= 0) storage_bytes[c.base] = c.base_bytes;
    ++it;
  }
  auto bytes_of_storage = [&](ValueId v) {
    auto it = storage_bytes.find(v);
    return it != storage_bytes.end() ? it->second : static_cast<int64_t>(type_bytes(g.value(v).type));
  };

  // Stage of every value that has storage: graph inputs by binding, step outputs by their step's stage.
  std::vector<Binding> stage_of(g.values().size(), Binding::weight);
  std::vector<bool> has_storage(g.values().size(), false);
  std::map<ValueId, AliasOf> alias_of;
  auto root_of = [&](ValueId v) {
    auto it = alias_of.find(v);
    return it == alias_of.end() ? v : it->second.base;
  };
  auto allocate_now = [&](ValueId v) -> Status {
    const TensorType& type = g.value(v).type;
    const int64_t bytes = bytes_of_storage(v);
    KILN_ASSIGN_OR_RETURN(DeviceTensor t, backend.allocate(bytes == static_cast<int64_t>(type_bytes(type))
                                                               ? type
                                                               : TensorType{type.dtype, {bytes / static_cast<int64_t>(dtype_size(type.dtype))}}));
    plan->owned_.push_back(t);
    t.type = type;
    plan->tensors_[v] = t;
    has_storage[v] = true;
    return ok_status();
  };
  for (const GraphInput& in : g.inputs()) {
    KILN_TRY(allocate_now(in.value));
    stage_of[in.value] = in.binding;
  }
  plan->input_given_.assign(g.inputs().size(), false);

  std::vector<kernel::Kernel> lowered_kernels;  // by kernel_index
  std::vector<kernel::Schedule> schedules;
  auto input_types = [&](const Node& n) {
    std::vector<TensorType> t;
    for (ValueId v : n.inputs) t.push_back(g.value(v).type);
    return t;
  };
  std::vector<Step> steps;  // topological order; sorted into stages below
  for (size_t unit = 0; unit < units.size(); ++unit) {
    const std::vector<NodeId>& members = units[unit];
    const Node& first = g.node(members[0]);
    Step step;
    step.nodes = members;
    step.label = members.size() > 1 ? fmt::format("group {} ({} nodes, first {})", first.group, members.size(),
                                                  g.node_label(members[0]))
                                    : g.node_label(members[0]);
    // A step runs in the latest stage of its nodes and of the steps it reads (a group mixing stages runs late).
    std::set<NodeId> member_set(members.begin(), members.end());
    Binding stage = Binding::weight;
    for (NodeId m : members) {
      for (ValueId v : g.node(m).outputs) stage = std::max(stage, binding_time[v]);
      for (ValueId v : g.node(m).inputs) {
        if (!member_set.count(g.value(v).producer)) stage = std::max(stage, stage_of[root_of(v)]);
      }
    }
    step.stage = stage;
    auto define = [&](ValueId v) {
      has_storage[v] = true;
      stage_of[v] = stage;
      auto window = piece_windows.find(v);
      if (window != piece_windows.end()) {  // a concat piece written in place: the concat's buffer holds it
        alias_of[v] = window->second;
        has_storage[window->second.base] = true;
        stage_of[window->second.base] = stage;
      }
    };
    if (auto it = in_place.find(unit); it != in_place.end()) {  // every piece is already in its window
      if (it->second.output) {  // the joint form: the output is a window of the first piece's buffer
        const ValueId out = it->second.concat;
        alias_of[out] = *it->second.output;
        has_storage[out] = true;
        stage_of[out] = stage_of[it->second.base];
        ++plan->summary_.windows;
      } else {
        ++plan->summary_.in_place_concats;
      }
      continue;
    }
    if (members.size() == 1 && op_has_trait(first.op, kTraitSource)) {
      // Constants: computed once, now. Groups that read them fold the value into their code too.
      Status st = backend.supports(first.op, input_types(first), first.attrs);
      if (!st.ok()) return with_context(st.error(), g.node_label(members[0]));
      std::vector<DeviceTensor> outs;
      for (ValueId v : first.outputs) {
        KILN_TRY(allocate_now(v));
        stage_of[v] = Binding::weight;
        outs.push_back(plan->tensors_[v]);
      }
      KILN_TRY(backend.run_library(first.op, first.attrs, {}, outs));
      ++plan->summary_.constants;
      continue;
    }
    // A group the backend cannot run (a kernel the IR cannot express, a library call at shapes the library
    // refuses) runs on the reference when the options allow, and is noted.
    auto run_on_reference = [&](const std::string& why) {
      plan->summary_.notes.push_back(step.label + " runs on the reference: " + why);
      step.kind = Step::Kind::fallback;
      for (NodeId m : members) {
        for (ValueId v : g.node(m).inputs) {
          if (!member_set.count(g.value(v).producer)) step.inputs.push_back(v);
        }
        for (ValueId v : g.node(m).outputs) {
          define(v);
          step.outputs.push_back(v);
        }
      }
      steps.push_back(step);
      ++plan->summary_.fallbacks;
    };
    if (members.size() == 1 && is_library_op(first.op)) {
      Status st = backend.supports(first.op, input_types(first), first.attrs);
      if (!st.ok() && st.error().code == ErrorCode::unsupported && options.reference_fallback) {
        run_on_reference(st.error().message);
        continue;
      }
      if (!st.ok()) return with_context(st.error(), g.node_label(members[0]));
      step.kind = Step::Kind::library;
      step.inputs = first.inputs;
      step.outputs = first.outputs;
      for (ValueId v : first.outputs) define(v);
      steps.push_back(step);
      ++plan->summary_.library_calls;
      continue;
    }
    auto lowered = kernel::lower_nodes(g, members, fmt::format("k{}", lowered_kernels.size()));
    if (!lowered.ok()) {
      if (!options.reference_fallback) return with_context(lowered.error(), step.label);
      run_on_reference(lowered.error().message);
      continue;
    }
    kernel::Kernel k = std::move(lowered).value();
    const std::vector<int64_t> alias = kernel::alias_offsets(k);
    const bool dense_input = k.inputs.size() == 1 && has_storage[k.inputs[0].value] &&
                             !(alias_of.count(k.inputs[0].value) && alias_of.at(k.inputs[0].value).pitch != 0);
    if (auto window = options.pitched_windows && dense_input && alias.empty() ? kernel::pitched_window(k) : std::nullopt) {
      const ValueId in = k.inputs[0].value, out = k.outputs[0].value;
      const auto es = static_cast<int64_t>(dtype_size(k.outputs[0].type.dtype));
      const AliasOf base = alias_of.count(in) ? alias_of.at(in) : AliasOf{in, 0};
      const int64_t byte_offset = base.byte_offset + window->offset * es;
      if (byte_offset % kPitchAlign == 0 && (window->pitch * es) % kPitchAlign == 0 &&
          read_pitched_by_library(g, uses, backend, out, window->row, window->pitch)) {
        alias_of[out] = AliasOf{base.base, byte_offset, window->row, window->pitch};
        has_storage[out] = true;
        stage_of[out] = stage_of[base.base];
        ++plan->summary_.windows;
        continue;
      }
    }
    if (!alias.empty() && dense_input) {
      const ValueId in = k.inputs[0].value;
      const AliasOf base = alias_of.count(in) ? alias_of.at(in) : AliasOf{in, 0};
      for (size_t i = 0; i < k.outputs.size(); ++i) {
        const auto es = static_cast<int64_t>(dtype_size(k.outputs[i].type.dtype));
        const ValueId out = k.outputs[i].value;
        alias_of[out] = AliasOf{base.base, base.byte_offset + alias[i] * es};
        has_storage[out] = true;
        stage_of[out] = stage_of[base.base];
      }
      ++plan->summary_.aliases;
      continue;
    }
    step.kind = Step::Kind::kernel;
    step.kernel_index = static_cast<int>(lowered_kernels.size());
    for (const kernel::KernelParam& p : k.inputs) step.inputs.push_back(p.value);
    for (const kernel::KernelParam& p : k.outputs) {
      step.outputs.push_back(p.value);
      define(p.value);
    }
    auto chosen = options.schedules.find(kernel::kernel_hash(k));
    schedules.push_back(chosen != options.schedules.end()
                            ? chosen->second
                            : kernel::default_schedule(k, backend.target(), backend.device().compute_units,
                                                       backend.device().cache_bytes));
    lowered_kernels.push_back(std::move(k));
    steps.push_back(step);
    ++plan->summary_.kernels;
  }
  for (const GraphOutput& o : g.outputs()) {
    if (!has_storage[o.value]) {
      return make_error(ErrorCode::verify_error, "plan: output '" + o.name + "' is never computed");
    }
  }

  // Stages in order. A step's stage is at least that of every step it reads, so a stable sort keeps the
  // topological order within and across stages.
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.stage < b.stage; });
  for (const Step& s : steps) {
    if (s.stage == Binding::weight) ++plan->load_end_;
    if (s.stage != Binding::per_call) ++plan->per_step_end_;
  }
  plan->summary_.load_steps = static_cast<int>(plan->load_end_);
  plan->summary_.per_step_steps = static_cast<int>(plan->per_step_end_ - plan->load_end_);
  plan->summary_.per_call_steps = static_cast<int>(steps.size() - plan->per_step_end_);

  // Lanes (lanes.h); complete_before bounds memory reuse below.
  const int lanes = plan->summary_.fallbacks > 0 ? 1 : std::clamp(options.lanes, 1, backend.lanes());
  const std::vector<int> complete_before =
      assign_lanes(steps, {0, plan->load_end_, plan->per_step_end_, steps.size()}, lanes, root_of, plan->summary_);

  // Values that outlive the call: graph outputs (through any view of them).
  std::set<ValueId> kept;
  for (const GraphOutput& o : g.outputs()) kept.insert(root_of(o.value));
  // Per-step results the call stage or an output reads: what the per-step cache keeps.
  std::set<ValueId> cached;
  auto note_per_step_read = [&](ValueId v) {
    const ValueId r = root_of(v);
    if (stage_of[r] == Binding::per_step && !g.is_graph_input(r)) cached.insert(r);
  };
  for (size_t i = plan->per_step_end_; i < steps.size(); ++i) {
    for (ValueId v : steps[i].inputs) note_per_step_read(v);
  }
  for (const GraphOutput& o : g.outputs()) note_per_step_read(o.value);
  plan->cached_values_.assign(cached.begin(), cached.end());

  // Memory: per-call intermediates live from the call step that writes them to the last call step that reads
  // them (or a view of them), or on several lanes until every later step is ordered after those steps;
  // everything else owns its buffer.
  std::vector<ValueId> pooled;
  std::map<ValueId, MemoryRequest> lives;
  for (size_t i = plan->per_step_end_; i < steps.size(); ++i) {
    const int at = static_cast<int>(i - plan->per_step_end_);
    const int until = complete_before[i] - 1 - static_cast<int>(plan->per_step_end_);
    for (ValueId written : steps[i].outputs) {
      const ValueId v = root_of(written);  // a concat piece written in place: the concat's buffer
      auto it = lives.find(v);
      if (it != lives.end()) {
        it->second.last_step = std::max(it->second.last_step, until);
      } else if (options.reuse_memory && !kept.count(v)) {
        lives[v] = MemoryRequest{bytes_of_storage(v), at, until};
        pooled.push_back(v);
      }
    }
    for (ValueId v : steps[i].inputs) {
      auto it = lives.find(root_of(v));
      if (it != lives.end()) it->second.last_step = std::max(it->second.last_step, until);
    }
  }
  std::vector<MemoryRequest> requests;
  for (ValueId v : pooled) requests.push_back(lives.at(v));
  const MemoryPlan memory = plan_memory(requests);
  int64_t owned_bytes = 0;
  for (const DeviceTensor& t : plan->owned_) owned_bytes += static_cast<int64_t>(t.bytes());
  for (const Step& s : steps) {
    for (ValueId written : s.outputs) {
      const ValueId v = root_of(written);
      if (plan->tensors_.count(v) || lives.count(v)) continue;
      KILN_TRY(allocate_now(v));
      owned_bytes += bytes_of_storage(v);
    }
  }
  if (memory.arena_bytes > 0) {
    KILN_ASSIGN_OR_RETURN(DeviceTensor arena,
                          backend.allocate(TensorType{DType::f32, {memory.arena_bytes / 4}}));
    plan->owned_.push_back(arena);
    for (size_t i = 0; i < pooled.size(); ++i) {
      plan->tensors_[pooled[i]] = DeviceTensor{static_cast<std::byte*>(arena.data) + memory.offsets[i],
                                               g.value(pooled[i]).type};
    }
  }
  for (const auto& [v, a] : alias_of) {
    const DeviceTensor& base = plan->tensors_.at(a.base);
    plan->tensors_[v] = DeviceTensor{static_cast<std::byte*>(base.data) + a.byte_offset, g.value(v).type, a.row, a.pitch};
  }
  int64_t intermediate_bytes = 0;
  for (const MemoryRequest& r : requests) intermediate_bytes += r.bytes;
  plan->summary_.intermediate_bytes = intermediate_bytes;
  plan->summary_.arena_bytes = memory.arena_bytes;
  plan->summary_.memory_bytes_without_reuse = owned_bytes + intermediate_bytes;
  plan->summary_.memory_bytes = owned_bytes + memory.arena_bytes;
  plan->steps_ = std::move(steps);

  if (!lowered_kernels.empty()) {
    std::vector<kernel::KernelToEmit> to_emit;
    for (size_t i = 0; i < lowered_kernels.size(); ++i) {
      to_emit.push_back({&lowered_kernels[i], schedules[i], fmt::format("kiln_k{}", i)});
    }
    KILN_ASSIGN_OR_RETURN(kernel::EmittedModule module, kernel::emit_module(to_emit, backend.target()));
    const auto start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(plan->module_, backend.compile(module));
    plan->summary_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    plan->source_ = module.source;
    for (size_t i = 0; i < lowered_kernels.size(); ++i) {
      std::string hash = kernel::kernel_hash(lowered_kernels[i]);
      plan->kernels_.push_back(
          PlanKernel{std::move(lowered_kernels[i]), schedules[i], to_emit[i].entry, std::move(hash)});
    }
  }
  return plan;
}

Status Plan::set_inputs(const std::map<std::string, Tensor>& inputs) {
  for (size_t i = 0; i < graph_.inputs().size(); ++i) {
    const GraphInput& in = graph_.inputs()[i];
    const Value& v = graph_.value(in.value);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) {
      if (input_given_[i]) continue;
      return make_error(ErrorCode::invalid_argument, "plan: graph input %" + v.name + " (" + type_to_string(v.type) +
                                                         ") is not given");
    }
    // Weights and per-step values given again unchanged cost a hash, not a copy (nor a reload).
    if (in.binding != Binding::per_call) {
      const uint64_t hash = tensor_content_hash(it->second);
      auto known = input_hash_.find(in.value);
      if (input_given_[i] && known != input_hash_.end() && known->second == hash) continue;
      input_hash_[in.value] = hash;
    }
    KILN_TRY(backend_.copy_to_device(it->second, tensors_.at(in.value)));
    input_given_[i] = true;
    if (in.binding == Binding::weight) load_pending_ = true;
  }
  return ok_status();
}

uint64_t Plan::per_step_key() const {
  uint64_t h = kFnvBasis;
  for (const GraphInput& in : graph_.inputs()) {
    if (in.binding != Binding::per_step) continue;
    auto it = input_hash_.find(in.value);
    const uint64_t hash = it == input_hash_.end() ? 0 : it->second;
    h = fnv1a(h, &hash, sizeof hash);
  }
  return h;
}

Status Plan::run_fallback(const Step& step) {
  for (NodeId id : step.nodes) {
    const Node& n = graph_.node(id);
    std::vector<Tensor> inputs;
    for (ValueId v : n.inputs) {
      KILN_ASSIGN_OR_RETURN(Tensor t, backend_.copy_to_host(tensors_.at(v)));
      inputs.push_back(std::move(t));
    }
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(&t);
    std::vector<Tensor> outputs;
    for (ValueId v : n.outputs) outputs.emplace_back(graph_.value(v).type.dtype, graph_.value(v).type.shape);
    Status st = op_def(n.op).reference(RefCall{ptrs, n.attrs, outputs});
    if (!st.ok()) return with_context(st.error(), graph_.node_label(id));
    for (size_t i = 0; i < n.outputs.size(); ++i) KILN_TRY(backend_.copy_to_device(outputs[i], tensors_.at(n.outputs[i])));
  }
  return ok_status();
}

// Events: step i's is i; the fork's and the joins' come after the steps'.
Status Plan::run_steps(size_t begin, size_t end, bool on_lanes) {
  const int lanes = on_lanes ? summary_.lanes : 1;
  const int fork = static_cast<int>(steps_.size());
  if (lanes > 1) KILN_TRY(backend_.record_event(fork));
  for (int l = 1; l < lanes; ++l) {  // fork: every lane after what came before
    KILN_TRY(backend_.use_lane(l));
    KILN_TRY(backend_.wait_event(fork));
  }
  Status ran = run_steps_on_lanes(begin, end, lanes > 1);
  for (int l = 1; l < lanes; ++l) {  // join: what follows runs after every lane (also after a failure)
    Status st = backend_.use_lane(l);
    if (st.ok()) st = backend_.record_event(fork + l);
    if (st.ok()) st = backend_.use_lane(0);
    if (st.ok()) st = backend_.wait_event(fork + l);
    if (ran.ok() && !st.ok()) ran = st;
  }
  Status back = backend_.use_lane(0);
  if (!ran.ok()) return ran;
  return back;
}

Status Plan::run_steps_on_lanes(size_t begin, size_t end, bool on_lanes) {
  for (size_t i = begin; i < end; ++i) {
    const Step& step = steps_[i];
    if (on_lanes) {
      KILN_TRY(backend_.use_lane(step.lane));
      for (int p : step.waits) KILN_TRY(backend_.wait_event(p));
    }
    std::vector<DeviceTensor> in, out;
    for (ValueId v : step.inputs) in.push_back(tensors_.at(v));
    for (ValueId v : step.outputs) out.push_back(tensors_.at(v));
    Status st = ok_status();
    switch (step.kind) {
      case Step::Kind::kernel: st = backend_.launch(*module_, step.kernel_index, in, out); break;
      case Step::Kind::library: {
        const Node& n = graph_.node(step.nodes[0]);
        const auto start = std::chrono::steady_clock::now();
        st = backend_.run_library(n.op, n.attrs, in, out);
        stats_.library_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        break;
      }
      case Step::Kind::fallback: st = run_fallback(step); break;
    }
    if (!st.ok()) return with_context(st.error(), step.label);
    if (on_lanes && step.signals) KILN_TRY(backend_.record_event(static_cast<int>(i)));
  }
  return ok_status();
}

Status Plan::execute_step(size_t index) {
  if (index >= steps_.size()) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("plan: step {} does not exist (the plan has {} steps)", index, steps_.size()));
  }
  return run_steps(index, index + 1, false);
}

Status Plan::run_per_step_stage() {
  const uint64_t key = per_step_key();
  if (resident_key_ == key) {
    ++stats_.per_step_hits;
    return ok_status();
  }
  for (PerStepEntry& entry : per_step_cache_) {
    if (!entry.valid || entry.key != key) continue;
    for (size_t i = 0; i < cached_values_.size(); ++i) KILN_TRY(backend_.copy(entry.values[i], tensors_.at(cached_values_[i])));
    entry.last_used = ++cache_clock_;
    resident_key_ = key;
    ++stats_.per_step_hits;
    return ok_status();
  }
  ++stats_.per_step_misses;
  resident_key_.reset();
  KILN_TRY(run_steps(load_end_, per_step_end_));
  const auto capacity = static_cast<size_t>(options_.per_step_cache_entries);
  if (capacity == 0) return ok_status();
  resident_key_ = key;
  // One entry is the working buffers themselves; more keep copies, the least recently used replaced.
  if (capacity == 1) return ok_status();
  PerStepEntry* slot = nullptr;
  for (PerStepEntry& entry : per_step_cache_) {
    if (!entry.valid) slot = &entry;
  }
  if (!slot && per_step_cache_.size() < capacity) {
    PerStepEntry& fresh = per_step_cache_.emplace_back();
    for (ValueId v : cached_values_) {
      KILN_ASSIGN_OR_RETURN(DeviceTensor t, backend_.allocate(graph_.value(v).type));
      owned_.push_back(t);
      fresh.values.push_back(t);
    }
    slot = &fresh;
  } else if (!slot) {
    slot = &*std::min_element(per_step_cache_.begin(), per_step_cache_.end(),
                              [](const PerStepEntry& a, const PerStepEntry& b) { return a.last_used < b.last_used; });
  }
  slot->valid = true;
  slot->key = key;
  slot->last_used = ++cache_clock_;
  for (size_t i = 0; i < cached_values_.size(); ++i) KILN_TRY(backend_.copy(tensors_.at(cached_values_[i]), slot->values[i]));
  return ok_status();
}

Status Plan::execute() {
  ++stats_.executes;
  if (load_pending_) {
    KILN_TRY(run_steps(0, load_end_));
    load_pending_ = false;
    ++stats_.load_runs;
    // Per-step results depend on the weights.
    for (PerStepEntry& entry : per_step_cache_) entry.valid = false;
    resident_key_.reset();
  }
  if (per_step_end_ > load_end_) KILN_TRY(run_per_step_stage());
  KILN_TRY(run_steps(per_step_end_, steps_.size()));
  return backend_.synchronize();
}

Result<std::map<std::string, Tensor>> Plan::outputs() {
  std::map<std::string, Tensor> out;
  for (const GraphOutput& o : graph_.outputs()) {
    KILN_ASSIGN_OR_RETURN(Tensor t, backend_.copy_to_host(tensors_.at(o.value)));
    out[o.name] = std::move(t);
  }
  return out;
}

Result<std::map<std::string, Tensor>> Plan::run(const std::map<std::string, Tensor>& inputs) {
  KILN_TRY(set_inputs(inputs));
  KILN_TRY(execute());
  return outputs();
}

}  // namespace kiln::backend
