// The importer's driver: parses the ModelProto, decodes initializers (raw, typed or external data), binds
// graph inputs and their symbolic dimensions, lowers the nodes in order and cleans up the graph (dead nodes
// and constants nothing reads).
#include "onnx/import.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "onnx/importer.h"
#include "onnx/node_view.h"
#include "passes/dce.h"

namespace kiln::onnx {
namespace {

constexpr int64_t kMaxFileBytes = int64_t{1} << 31;  // protobuf's own limit is 2 GiB

Error parse_error(const std::string& message) { return make_error(ErrorCode::parse_error, message); }

}  // namespace

std::optional<DType> onnx_elem_dtype(int32_t elem_type) {
  switch (elem_type) {
    case ::onnx::TensorProto::FLOAT: return DType::f32;
    case ::onnx::TensorProto::FLOAT16: return DType::f16;
    case ::onnx::TensorProto::BFLOAT16: return DType::bf16;
    case ::onnx::TensorProto::INT32: return DType::i32;
    case ::onnx::TensorProto::INT64: return DType::i64;
    case ::onnx::TensorProto::BOOL: return DType::boolean;
    case 17: return DType::f8e4m3;  // FLOAT8E4M3FN (opset 19; not in onnx 1.12's enum)
    case 19: return DType::f8e5m2;  // FLOAT8E5M2
    default: return std::nullopt;
  }
}

namespace {
std::optional<DType> onnx_dtype(int32_t elem_type) { return onnx_elem_dtype(elem_type); }

std::string onnx_dtype_name(int32_t elem_type) {
  if (::onnx::TensorProto_DataType_IsValid(elem_type)) {
    return ::onnx::TensorProto_DataType_Name(static_cast<::onnx::TensorProto_DataType>(elem_type));
  }
  return "type " + std::to_string(elem_type);
}

// Element type -> (kiln dtype, bytes per element in raw_data) for constants; narrow integers widen to i32.
struct ConstantLayout {
  DType dtype;
  int raw_bytes;
  bool is_signed = true;
  bool is_double = false;
};
std::optional<ConstantLayout> constant_layout(int32_t elem_type) {
  using T = ::onnx::TensorProto;
  switch (elem_type) {
    case T::INT8: return ConstantLayout{DType::i32, 1};
    case T::UINT8: return ConstantLayout{DType::i32, 1, false};
    case T::INT16: return ConstantLayout{DType::i32, 2};
    case T::UINT16: return ConstantLayout{DType::i32, 2, false};
    case T::UINT32: return ConstantLayout{DType::i64, 4, false};
    case T::UINT64: return ConstantLayout{DType::i64, 8, false};
    case T::DOUBLE: return ConstantLayout{DType::f32, 8, true, true};
    default: break;
  }
  if (auto d = onnx_dtype(elem_type)) return ConstantLayout{*d, static_cast<int>(dtype_size(*d))};
  return std::nullopt;
}

Result<std::string> read_external(const ::onnx::TensorProto& t, const std::string& base_dir, int64_t want_bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& entry : t.external_data()) {
    auto number = [&](int64_t* out) -> Status {
      try {
        size_t used = 0;
        *out = std::stoll(entry.value(), &used);
        if (used != entry.value().size() || *out < 0) throw std::invalid_argument("bad");
      } catch (const std::exception&) {
        return parse_error("external data " + entry.key() + " '" + entry.value() + "' is not a byte count");
      }
      return ok_status();
    };
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      KILN_TRY(number(&offset));
    } else if (entry.key() == "length") {
      KILN_TRY(number(&length));
    }
  }
  if (location.empty()) return parse_error("external data without a location");
  const std::filesystem::path rel(location);
  if (rel.is_absolute() || location.find("..") != std::string::npos) {
    return parse_error("external data location '" + location + "' must be a relative path inside the model's folder");
  }
  if (base_dir.empty()) return make_error(ErrorCode::io_error, "external data '" + location + "' but no model folder");
  const std::string path = (std::filesystem::path(base_dir) / rel).string();
  if (length >= 0 && length != want_bytes) {
    return parse_error("external data '" + path + "' gives length " + std::to_string(length) + ", the tensor needs " +
                       std::to_string(want_bytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot open external data file '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<int64_t>(in.tellg());
  if (size < 0 || offset > size || want_bytes > size - offset) {
    return make_error(ErrorCode::io_error, "external data file '" + path + "' has " + std::to_string(size) +
                                               " bytes; the tensor needs " + std::to_string(want_bytes) +
                                               " at offset " + std::to_string(offset));
  }
  std::string data(static_cast<size_t>(want_bytes), '\0');
  in.seekg(offset);
  in.read(data.data(), want_bytes);
  if (!in) return make_error(ErrorCode::io_error, "cannot read external data file '" + path + "'");
  return data;
}

}  // namespace

Result<Tensor> decode_tensor(const ::onnx::TensorProto& t, const std::string& base_dir) {
  const std::string what = "tensor '" + t.name() + "'";
  auto layout = constant_layout(t.data_type());
  if (!layout) {
    return make_error(ErrorCode::unsupported, what + " has element type " + onnx_dtype_name(t.data_type()) +
                                                  ", which kiln does not support");
  }
  if (t.has_segment()) return make_error(ErrorCode::unsupported, what + " is segmented");
  Shape shape;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return parse_error(what + " has a negative dimension");
    if (d != 0 && numel > (int64_t{1} << 40) / d) return parse_error(what + " is too large");
    numel *= d;
    shape.push_back(d);
  }
  if (shape.size() > 16) return parse_error(what + " has rank above 16");
  const int64_t bytes = numel * layout->raw_bytes;
  std::string external;
  const std::string* raw = nullptr;
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
    auto read = read_external(t, base_dir, bytes);
    if (!read.ok()) return with_context(read.error(), what);
    external = std::move(*read);
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
    if (static_cast<int64_t>(raw->size()) != bytes) {
      return parse_error(what + " has " + std::to_string(raw->size()) + " bytes of raw data, its shape " +
                         shape_to_string(shape) + " needs " + std::to_string(bytes));
    }
  }
  // Typed fields: which one holds the data, and how many values it has.
  using T = ::onnx::TensorProto;
  int64_t have = 0;
  if (!raw) {
    switch (t.data_type()) {
      case T::FLOAT: have = t.float_data_size(); break;
      case T::DOUBLE: have = t.double_data_size(); break;
      case T::INT64: have = t.int64_data_size(); break;
      case T::UINT32: case T::UINT64: have = t.uint64_data_size(); break;
      default: have = t.int32_data_size(); break;  // int32, narrow ints, bool, f16/bf16/fp8 bit patterns
    }
    if (have != numel) {
      return parse_error(what + " holds " + std::to_string(have) + " values, its shape " + shape_to_string(shape) +
                         " needs " + std::to_string(numel));
    }
  }
  Tensor out(layout->dtype, shape);
  const bool same_bytes = raw && layout->raw_bytes == static_cast<int>(dtype_size(layout->dtype)) &&
                          !layout->is_double && layout->is_signed;
  if (same_bytes) {
    if (bytes > 0) std::memcpy(out.data(), raw->data(), static_cast<size_t>(bytes));
    return out;
  }
  for (int64_t i = 0; i < numel; ++i) {
    if (raw) {
      const char* p = raw->data() + i * layout->raw_bytes;
      if (layout->is_double) {
        double v;
        std::memcpy(&v, p, 8);
        out.set(i, v);
        continue;
      }
      uint64_t u = 0;
      std::memcpy(&u, p, static_cast<size_t>(layout->raw_bytes));
      int64_t v = static_cast<int64_t>(u);
      if (layout->is_signed && layout->raw_bytes < 8) {
        const int shift = 64 - 8 * layout->raw_bytes;
        v = static_cast<int64_t>(u << shift) >> shift;
      }
      out.set_int(i, v);
      continue;
    }
    switch (t.data_type()) {
      case T::FLOAT: out.set(i, t.float_data(static_cast<int>(i))); break;
      case T::DOUBLE: out.set(i, t.double_data(static_cast<int>(i))); break;
      case T::INT64: out.set_int(i, t.int64_data(static_cast<int>(i))); break;
      case T::UINT32: case T::UINT64:
        out.set_int(i, static_cast<int64_t>(t.uint64_data(static_cast<int>(i)))); break;
      case T::FLOAT16: case T::BFLOAT16: case 17: case 19: {
        const auto bits = static_cast<uint32_t>(t.int32_data(static_cast<int>(i)));
        const size_t es = dtype_size(out.dtype());
        std::memcpy(out.data() + i * static_cast<int64_t>(es), &bits, es);  // little-endian low bytes
        break;
      }
      default: out.set_int(i, t.int32_data(static_cast<int>(i))); break;
    }
  }
  return out;
}

std::string sanitize_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '/' ||
                    c == '-';
    out += ok ? c : '_';
  }
  if (out.empty()) out = "v";
  if (out.size() > 200) out.resize(200);
  return out;
}

namespace {

// Slices of one value along one axis that tile it exactly (how exporters write chunk) -> one split, the
// form a zoo builder writes. Returns, per node, the group it leads or joins: {leader node, index in group}.
struct SplitGroup {
  std::vector<NodeId> slices;  // in order along the axis
  int64_t axis = 0;
};
std::map<NodeId, std::pair<size_t, size_t>> find_slice_tilings(const Graph& g, std::vector<SplitGroup>& groups) {
  std::map<std::pair<ValueId, int64_t>, std::vector<NodeId>> by_source;
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (n.op != Op::slice || n.attrs.get_int("step", 1) != 1) continue;
    const auto rank = static_cast<int64_t>(g.value(n.inputs[0]).type.shape.size());
    const int64_t axis = n.attrs.get_int("axis", 0);
    by_source[{n.inputs[0], axis < 0 ? axis + rank : axis}].push_back(id);
  }
  std::map<NodeId, std::pair<size_t, size_t>> member;
  for (auto& [key, ids] : by_source) {
    if (ids.size() < 2) continue;
    const int64_t dim = g.value(key.first).type.shape[static_cast<size_t>(key.second)];
    std::sort(ids.begin(), ids.end(), [&](NodeId a, NodeId b) {
      return g.node(a).attrs.get_int("start", 0) < g.node(b).attrs.get_int("start", 0);
    });
    int64_t at = 0;
    bool tiles = true;
    for (NodeId id : ids) {
      const Node& n = g.node(id);
      const int64_t start = n.attrs.get_int("start", 0), end = n.attrs.get_int("end", 0);
      tiles = tiles && start == at && end > start;
      at = end;
    }
    if (!tiles || at != dim) continue;
    groups.push_back({ids, key.second});
    for (size_t i = 0; i < ids.size(); ++i) member[ids[i]] = {groups.size() - 1, i};
  }
  return member;
}

// Drops dead nodes and weight inputs nothing reads; slices that tile a value become one split.
Result<ImportedModel> finish(Importer& im, int64_t opset) {
  passes::PassResult live = passes::eliminate_dead_code(im.graph);
  const Graph& g = live.graph;
  std::vector<int> uses(g.values().size(), 0);
  for (const Node& n : g.nodes()) {
    for (ValueId v : n.inputs) ++uses[static_cast<size_t>(v)];
  }
  for (const GraphOutput& o : g.outputs()) ++uses[static_cast<size_t>(o.value)];
  ImportedModel model;
  model.opset = opset;
  model.graph.name = g.name;
  std::vector<ValueId> map(g.values().size(), -1);
  for (const GraphInput& in : g.inputs()) {
    const Value& v = g.value(in.value);
    if (in.binding == Binding::weight && uses[static_cast<size_t>(in.value)] == 0) continue;
    KILN_ASSIGN_OR_RETURN(map[static_cast<size_t>(in.value)], model.graph.add_input(v.name, v.type, in.binding));
    if (in.binding == Binding::weight) {
      auto it = im.weights.find(v.name);
      KILN_CHECK(it != im.weights.end(), "weight without data");
      model.weights.emplace(v.name, std::move(it->second));
    }
  }
  std::vector<SplitGroup> groups;
  const auto member = im.options().normalize ? find_slice_tilings(g, groups)
                                             : std::map<NodeId, std::pair<size_t, size_t>>{};
  std::vector<bool> emitted(groups.size(), false);
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (auto m = member.find(id); m != member.end()) {
      const size_t group = m->second.first;
      if (emitted[group]) continue;
      emitted[group] = true;
      std::vector<int64_t> sizes;
      std::vector<std::string> names;
      for (NodeId s : groups[group].slices) {
        const Node& sn = g.node(s);
        sizes.push_back(sn.attrs.get_int("end", 0) - sn.attrs.get_int("start", 0));
        names.push_back(g.value(sn.outputs[0]).name);
      }
      KILN_ASSIGN_OR_RETURN(std::vector<ValueId> outs,
                            model.graph.add_node(Op::split, {map[static_cast<size_t>(n.inputs[0])]},
                                                 {{"axis", groups[group].axis}, {"sizes", sizes}}, names));
      for (size_t i = 0; i < outs.size(); ++i) {
        map[static_cast<size_t>(g.node(groups[group].slices[i]).outputs[0])] = outs[i];
      }
      continue;
    }
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(map[static_cast<size_t>(v)]);
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (ValueId v : n.outputs) {
      names.push_back(g.value(v).name);
      types.push_back(g.value(v).type);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<ValueId> outs, model.graph.add_node_typed(n.op, ins, n.attrs, names, types));
    for (size_t i = 0; i < outs.size(); ++i) map[static_cast<size_t>(n.outputs[i])] = outs[i];
  }
  for (const GraphOutput& o : g.outputs()) KILN_TRY(model.graph.add_output(o.name, map[static_cast<size_t>(o.value)]));
  return model;
}

}  // namespace

bool onnx_available() { return true; }

Result<ImportedModel> import_onnx_bytes(std::span<const std::byte> bytes, const std::string& base_dir,
                                        const std::string& source, const ImportOptions& options) {
  auto fail = [&](const Error& e) { return with_context(e, source); };
  if (static_cast<int64_t>(bytes.size()) >= kMaxFileBytes) return fail(parse_error("larger than 2 GiB"));
  ::onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return fail(parse_error("not an ONNX model (the protobuf does not parse)"));
  }
  if (!model.has_graph()) return fail(parse_error("the model has no graph"));
  int64_t opset = -1;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (opset < 0) return fail(parse_error("the model imports no default-domain (ai.onnx) opset"));
  if (opset < 7 || opset > 25) {
    return fail(make_error(ErrorCode::unsupported,
                           "opset " + std::to_string(opset) + " is outside what the importer knows (7 to 25)"));
  }
  const ::onnx::GraphProto& gp = model.graph();
  if (gp.sparse_initializer_size() > 0) return fail(make_error(ErrorCode::unsupported, "sparse initializers"));

  Importer im(options, opset);
  im.graph.name = gp.name().empty() ? "onnx" : sanitize_name(gp.name());
  std::map<std::string, Sym> syms;
  for (const auto& init : gp.initializer()) {
    auto t = decode_tensor(init, base_dir);
    if (!t.ok()) return fail(with_context(t.error(), "initializer"));
    Sym s = Sym::constant(std::move(*t), init.name());
    s.initializer = true;
    im.note_initializer(s.tensor->numel());
    syms[init.name()] = std::move(s);
  }
  std::set<std::string> bound_dims;
  for (const auto& in : gp.input()) {
    if (syms.count(in.name())) continue;  // an initializer listed as an input (IR version < 4)
    const std::string what = "graph input '" + in.name() + "'";
    if (!in.type().has_tensor_type()) return fail(make_error(ErrorCode::unsupported, what + " is not a tensor"));
    const auto& tt = in.type().tensor_type();
    auto dtype = onnx_dtype(tt.elem_type());
    if (!dtype) {
      return fail(make_error(ErrorCode::unsupported,
                             what + " has element type " + onnx_dtype_name(tt.elem_type()) + ", which kiln does not support"));
    }
    if (!tt.has_shape()) return fail(make_error(ErrorCode::invalid_argument, what + " has no shape"));
    Shape shape;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) return fail(parse_error(what + " has a negative dimension"));
        shape.push_back(d.dim_value());
        continue;
      }
      const std::string param = d.has_dim_param() ? d.dim_param() : "";
      auto it = options.dims.find(param);
      if (param.empty() || it == options.dims.end()) {
        return fail(make_error(
            ErrorCode::invalid_argument,
            what + " dimension " + std::to_string(i) +
                (param.empty() ? " has no size and no name" : " is symbolic ('" + param + "')") +
                "; bind it at import time" + (param.empty() ? "" : " with --dim " + param + "=N")));
      }
      if (it->second < 0) return fail(make_error(ErrorCode::invalid_argument, "dimension " + param + " is negative"));
      bound_dims.insert(param);
      shape.push_back(it->second);
    }
    const Binding binding = options.per_step.count(in.name()) ? Binding::per_step : Binding::per_call;
    auto v = im.graph.add_input(im.graph.unique_name(sanitize_name(in.name())), TensorType{*dtype, shape}, binding);
    if (!v.ok()) return fail(with_context(v.error(), what));
    syms[in.name()] = Sym::of(*v);
  }
  for (const std::string& name : options.per_step) {
    auto it = syms.find(name);
    if (it == syms.end() || !it->second.is_value()) {
      return fail(make_error(ErrorCode::invalid_argument, "per-step input '" + name + "' is not a graph input"));
    }
  }
  for (const auto& [name, value] : options.dims) {
    (void)value;
    if (!bound_dims.count(name)) {
      return fail(make_error(ErrorCode::invalid_argument,
                             "--dim " + name + " names no symbolic dimension of the model's inputs"));
    }
  }

  for (int index = 0; index < gp.node_size(); ++index) {
    const ::onnx::NodeProto& node = gp.node(index);
    const std::string label = "node '" + (node.name().empty() ? "#" + std::to_string(index) : node.name()) + "' (" +
                              (node.domain().empty() ? "" : node.domain() + ".") + node.op_type() + ", opset " +
                              std::to_string(opset) + ")";
    std::vector<Sym> in;
    for (const std::string& name : node.input()) {
      if (name.empty()) {
        in.emplace_back();
        continue;
      }
      auto it = syms.find(name);
      if (it == syms.end()) return fail(parse_error(label + ": input '" + name + "' is not defined before the node"));
      in.push_back(it->second);
    }
    im.set_stem(sanitize_name(node.output_size() > 0 && !node.output(0).empty() ? node.output(0) : node.op_type()));
    auto out = lower_node(im, node, in);
    if (!out.ok()) return fail(with_context(out.error(), label));
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      if (i >= static_cast<int>(out->size()) || !(*out)[static_cast<size_t>(i)].present()) {
        return fail(make_error(ErrorCode::unsupported, label + ": output " + std::to_string(i) + " ('" +
                                                           node.output(i) + "') is not supported"));
      }
      Sym s = (*out)[static_cast<size_t>(i)];
      if (s.is_constant() && s.name.empty()) s.name = node.output(i);
      syms[node.output(i)] = std::move(s);
    }
  }
  if (gp.output_size() == 0) return fail(parse_error("the graph has no outputs"));
  for (const auto& out : gp.output()) {
    auto it = syms.find(out.name());
    if (it == syms.end()) return fail(parse_error("graph output '" + out.name() + "' is not defined"));
    im.set_stem(sanitize_name(out.name()));
    if (it->second.kind == Sym::Kind::erf) {
      return fail(make_error(ErrorCode::unsupported, "graph output '" + out.name() + "' is an Erf outside a GELU"));
    }
    auto v = im.materialize(it->second);
    if (!v.ok()) return fail(with_context(v.error(), "graph output '" + out.name() + "'"));
    auto added = im.graph.add_output(sanitize_name(out.name()), *v);  // output names: their own namespace
    if (!added.ok()) return fail(with_context(added.error(), "graph output '" + out.name() + "'"));
  }
  auto done = finish(im, opset);
  if (!done.ok()) return fail(done.error());
  return done;
}

Result<ImportedModel> import_onnx_file(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(ErrorCode::io_error, "'" + path + "' is not a readable file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || static_cast<int64_t>(size) >= kMaxFileBytes) {
    return make_error(ErrorCode::io_error, "'" + path + "' cannot be read or is larger than 2 GiB");
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<std::byte> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) return make_error(ErrorCode::io_error, "cannot read '" + path + "'");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return import_onnx_bytes(bytes, dir.empty() ? "." : dir, path, options);
}

}  // namespace kiln::onnx
