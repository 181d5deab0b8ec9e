// Printer and parser of the JSON form (see json.h and docs/ir-format.md), on top of nlohmann::json.
//
// Before nlohmann sees the text, its nesting depth is checked (the schema needs 5 levels), so hostile input
// cannot exhaust the stack; unknown fields are rejected so that a misspelled field is an error, not a
// silently ignored one.
#include "ir/json.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "ir/serial_util.h"

namespace kiln {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // printing keeps fields in schema order

constexpr std::string_view kFormatName = "kiln-graph";
constexpr int64_t kFormatVersion = 1;
constexpr int kMaxJsonDepth = 32;

// ---- printing ----

OrderedJson float_json(double value) {
  if (std::isfinite(value)) return value;
  return serial::format_float(value);  // "inf", "-inf", "nan"
}

OrderedJson attr_json(const AttrValue& value) {
  switch (attr_kind_of(value)) {
    case AttrKind::int_: return std::get<int64_t>(value);
    case AttrKind::float_: return float_json(std::get<double>(value));
    case AttrKind::string: return std::get<std::string>(value);
    case AttrKind::ints: return std::get<std::vector<int64_t>>(value);
    case AttrKind::floats: {
      OrderedJson list = OrderedJson::array();
      for (double x : std::get<std::vector<double>>(value)) list.push_back(float_json(x));
      return list;
    }
  }
  return nullptr;
}

OrderedJson value_json(const Value& value) {
  return OrderedJson{{"name", value.name}, {"dtype", dtype_name(value.type.dtype)}, {"shape", value.type.shape}};
}

std::string dump(const OrderedJson& j) { return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace); }

// ---- parsing ----

// Deepest nesting of arrays and objects, ignoring brackets inside strings; stops counting past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string index_path(const std::string& path, size_t index) { return path + "[" + std::to_string(index) + "]"; }
std::string field_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

const char* json_kind(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a float";
    default: return "something else";
  }
}

struct InputSpec {
  std::string name;
  TensorType type;
  Binding binding;
  int64_t after_nodes;
  std::string path;
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view source) : source_(source) {}

  Result<Graph> read(const Json& root) {
    if (!root.is_object()) return fail("", "a graph must be a JSON object, got " + std::string(json_kind(root)));
    KILN_TRY(check_fields(root, "", {"format", "version", "name", "inputs", "nodes", "outputs"}));
    KILN_ASSIGN_OR_RETURN(const Json* format, field(root, "", "format"));
    if (!format->is_string() || format->get<std::string>() != kFormatName) {
      return fail("format", "must be \"kiln-graph\"");
    }
    KILN_ASSIGN_OR_RETURN(const Json* version, field(root, "", "version"));
    KILN_ASSIGN_OR_RETURN(int64_t version_number, to_int(*version, "version"));
    if (version_number != kFormatVersion) {
      return make_error(ErrorCode::unsupported, prefix("version") + "version " + std::to_string(version_number) +
                                                    " is not supported (this build reads version 1)");
    }
    if (root.contains("name")) {
      KILN_ASSIGN_OR_RETURN(graph_.name, to_string(root["name"], "name"));
    }
    KILN_ASSIGN_OR_RETURN(const Json* inputs, array_field(root, "", "inputs"));
    KILN_ASSIGN_OR_RETURN(const Json* nodes, array_field(root, "", "nodes"));
    KILN_ASSIGN_OR_RETURN(const Json* outputs, array_field(root, "", "outputs"));

    std::vector<InputSpec> input_specs;
    for (size_t i = 0; i < inputs->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(InputSpec spec, read_input((*inputs)[i], index_path("inputs", i), nodes->size()));
      if (!input_specs.empty() && spec.after_nodes < input_specs.back().after_nodes) {
        return fail(field_path(spec.path, "after_nodes"), "must not be less than that of the input before it");
      }
      input_specs.push_back(std::move(spec));
    }
    // Inputs go in before the node they precede, so that value ids come out as they were printed.
    size_t next_input = 0;
    for (size_t i = 0; i <= nodes->size(); ++i) {
      while (next_input < input_specs.size() && input_specs[next_input].after_nodes <= static_cast<int64_t>(i)) {
        KILN_TRY(add_input(input_specs[next_input++]));
      }
      if (i < nodes->size()) KILN_TRY(read_node((*nodes)[i], index_path("nodes", i)));
    }
    for (size_t i = 0; i < outputs->size(); ++i) KILN_TRY(read_output((*outputs)[i], index_path("outputs", i)));
    Status verified = verify_graph(graph_);
    if (!verified.ok()) return with_context(verified.error(), source_);
    return std::move(graph_);
  }

 private:
  std::string prefix(const std::string& path) const { return source_ + ": " + (path.empty() ? "" : path + ": "); }
  Error fail(const std::string& path, const std::string& message, ErrorCode code = ErrorCode::parse_error) const {
    return make_error(code, prefix(path) + message);
  }

  Status check_fields(const Json& object, const std::string& path, std::initializer_list<std::string_view> known) {
    for (const auto& [key, value] : object.items()) {
      bool found = false;
      for (std::string_view k : known) found = found || key == k;
      if (!found) {
        std::string list;
        for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        return fail(field_path(path, key), "unknown field (known: " + list + ")");
      }
    }
    return ok_status();
  }

  Result<const Json*> field(const Json& object, const std::string& path, const std::string& key) {
    auto it = object.find(key);
    if (it == object.end()) return fail(path, "missing field '" + key + "'");
    return &*it;
  }

  Result<const Json*> array_field(const Json& object, const std::string& path, const std::string& key) {
    KILN_ASSIGN_OR_RETURN(const Json* j, field(object, path, key));
    if (!j->is_array()) return fail(field_path(path, key), "must be an array, got " + std::string(json_kind(*j)));
    return j;
  }

  Result<std::string> to_string(const Json& j, const std::string& path) {
    if (!j.is_string()) return fail(path, "must be a string, got " + std::string(json_kind(j)));
    return j.get<std::string>();
  }

  Result<int64_t> to_int(const Json& j, const std::string& path) {
    if (j.is_number_unsigned()) {
      if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return fail(path, "integer is out of the int64 range");
      return static_cast<int64_t>(j.get<uint64_t>());
    }
    if (j.is_number_integer()) return j.get<int64_t>();
    return fail(path, "must be an integer, got " + std::string(json_kind(j)));
  }

  Result<std::string> to_value_name(const Json& j, const std::string& path) {
    KILN_ASSIGN_OR_RETURN(std::string name, to_string(j, path));
    if (!is_valid_value_name(name)) {
      return fail(path, "invalid value name '" + name.substr(0, 40) +
                            "' (1 to 256 characters of A-Z a-z 0-9 _ . : / -, no '%')");
    }
    return name;
  }

  Result<ValueId> to_value_use(const Json& j, const std::string& path) {
    KILN_ASSIGN_OR_RETURN(std::string name, to_string(j, path));
    std::optional<ValueId> id = graph_.find_value(name);
    if (!id) return fail(path, "unknown value %" + name.substr(0, 256));
    return *id;
  }

  Result<TensorType> read_type(const Json& object, const std::string& path) {
    KILN_ASSIGN_OR_RETURN(const Json* dtype_json, field(object, path, "dtype"));
    KILN_ASSIGN_OR_RETURN(std::string dtype_text, to_string(*dtype_json, field_path(path, "dtype")));
    std::optional<DType> dtype = parse_dtype(dtype_text);
    if (!dtype) {
      return fail(field_path(path, "dtype"), "unknown dtype '" + dtype_text.substr(0, 40) +
                                                 "' (known: f32, f16, bf16, f8e4m3, f8e5m2, i32, i64, bool)");
    }
    KILN_ASSIGN_OR_RETURN(const Json* shape_json, array_field(object, path, "shape"));
    const std::string shape_path = field_path(path, "shape");
    if (shape_json->size() > static_cast<size_t>(serial::kMaxRank)) {
      return fail(shape_path, "rank " + std::to_string(shape_json->size()) + " is above the limit of " +
                                  std::to_string(serial::kMaxRank) + " axes");
    }
    TensorType type{*dtype, {}};
    int64_t product = 1;
    for (size_t i = 0; i < shape_json->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(int64_t d, to_int((*shape_json)[i], index_path(shape_path, i)));
      if (d < 0) return fail(index_path(shape_path, i), "negative dimension " + std::to_string(d));
      if (!serial::extend_numel(product, d)) return fail(shape_path, "shape has more than 2^62 elements");
      type.shape.push_back(d);
    }
    return type;
  }

  Result<InputSpec> read_input(const Json& j, const std::string& path, size_t node_count) {
    if (!j.is_object()) return fail(path, "an input must be an object, got " + std::string(json_kind(j)));
    KILN_TRY(check_fields(j, path, {"name", "dtype", "shape", "binding", "after_nodes"}));
    InputSpec spec;
    spec.path = path;
    KILN_ASSIGN_OR_RETURN(const Json* name, field(j, path, "name"));
    KILN_ASSIGN_OR_RETURN(spec.name, to_value_name(*name, field_path(path, "name")));
    KILN_ASSIGN_OR_RETURN(spec.type, read_type(j, path));
    KILN_ASSIGN_OR_RETURN(const Json* binding_json, field(j, path, "binding"));
    KILN_ASSIGN_OR_RETURN(std::string binding_text, to_string(*binding_json, field_path(path, "binding")));
    std::optional<Binding> binding = parse_binding(binding_text);
    if (!binding) {
      return fail(field_path(path, "binding"),
                  "unknown binding '" + binding_text.substr(0, 40) + "' (expected weight, per_step or per_call)");
    }
    spec.binding = *binding;
    spec.after_nodes = 0;
    if (j.contains("after_nodes")) {
      KILN_ASSIGN_OR_RETURN(spec.after_nodes, to_int(j["after_nodes"], field_path(path, "after_nodes")));
      if (spec.after_nodes < 0 || spec.after_nodes > static_cast<int64_t>(node_count)) {
        return fail(field_path(path, "after_nodes"),
                    "must be between 0 and the number of nodes (" + std::to_string(node_count) + ")");
      }
    }
    return spec;
  }

  Status check_new_name(const std::string& name, const std::string& path) {
    auto first = defined_at_.find(name);
    if (first != defined_at_.end()) {
      return fail(path, "value %" + name + " is defined twice (first at " + first->second + ")");
    }
    defined_at_.emplace(name, path);
    return ok_status();
  }

  Status add_input(const InputSpec& spec) {
    KILN_TRY(check_new_name(spec.name, field_path(spec.path, "name")));
    auto added = graph_.add_input(spec.name, spec.type, spec.binding);
    if (!added.ok()) return with_context(added.error(), source_ + ": " + spec.path);
    return ok_status();
  }

  // One float element: a number, or "inf" / "-inf" / "nan".
  Result<double> to_float(const Json& j, const std::string& path) {
    if (j.is_number()) return j.get<double>();
    if (j.is_string()) {
      if (std::optional<double> v = serial::parse_nonfinite(j.get<std::string>())) return *v;
    }
    return fail(path, "must be a number or \"inf\", \"-inf\", \"nan\", got " + std::string(json_kind(j)));
  }

  // JSON value -> attribute. Kinds follow the JSON (integer, float, string, list); where the op's schema asks
  // for a float or float list, the non-finite strings are accepted as floats.
  Result<AttrValue> read_attr(const Json& j, const AttrSpec* spec, const std::string& path) {
    const bool wants_float = spec && spec->kind == AttrKind::float_;
    const bool wants_floats = spec && spec->kind == AttrKind::floats;
    if (j.is_number_integer()) {
      KILN_ASSIGN_OR_RETURN(int64_t v, to_int(j, path));
      return AttrValue(v);
    }
    if (j.is_number_float()) return AttrValue(j.get<double>());
    if (j.is_string()) {
      if (wants_float) {
        if (std::optional<double> v = serial::parse_nonfinite(j.get<std::string>())) return AttrValue(*v);
      }
      return AttrValue(j.get<std::string>());
    }
    if (j.is_array()) {
      bool all_integers = !wants_floats;
      for (const Json& element : j) all_integers = all_integers && element.is_number_integer();
      if (all_integers) {
        std::vector<int64_t> ints;
        for (size_t i = 0; i < j.size(); ++i) {
          KILN_ASSIGN_OR_RETURN(int64_t v, to_int(j[i], index_path(path, i)));
          ints.push_back(v);
        }
        return AttrValue(std::move(ints));
      }
      std::vector<double> floats;
      for (size_t i = 0; i < j.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(double v, to_float(j[i], index_path(path, i)));
        floats.push_back(v);
      }
      return AttrValue(std::move(floats));
    }
    return fail(path, "an attribute must be a number, a string or a list of numbers, got " + std::string(json_kind(j)));
  }

  Status read_node(const Json& j, const std::string& path) {
    if (!j.is_object()) return fail(path, "a node must be an object, got " + std::string(json_kind(j)));
    KILN_TRY(check_fields(j, path, {"op", "inputs", "outputs", "attrs", "group"}));
    KILN_ASSIGN_OR_RETURN(const Json* op_json, field(j, path, "op"));
    KILN_ASSIGN_OR_RETURN(std::string op_text, to_string(*op_json, field_path(path, "op")));
    std::optional<Op> op = find_op(op_text);
    if (!op) {
      return fail(field_path(path, "op"),
                  "unknown op '" + op_text.substr(0, 40) + "' (`kiln ops` lists the known ones)",
                  ErrorCode::unknown_op);
    }
    KILN_ASSIGN_OR_RETURN(const Json* inputs_json, array_field(j, path, "inputs"));
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < inputs_json->size(); ++i) {
      KILN_ASSIGN_OR_RETURN(ValueId id, to_value_use((*inputs_json)[i], index_path(field_path(path, "inputs"), i)));
      inputs.push_back(id);
    }
    KILN_ASSIGN_OR_RETURN(const Json* outputs_json, array_field(j, path, "outputs"));
    const std::string outputs_path = field_path(path, "outputs");
    if (outputs_json->empty()) return fail(outputs_path, "a node must declare at least one output");
    std::vector<std::string> names;
    std::vector<TensorType> types;
    for (size_t i = 0; i < outputs_json->size(); ++i) {
      const Json& out = (*outputs_json)[i];
      const std::string out_path = index_path(outputs_path, i);
      if (!out.is_object()) return fail(out_path, "an output must be an object, got " + std::string(json_kind(out)));
      KILN_TRY(check_fields(out, out_path, {"name", "dtype", "shape"}));
      KILN_ASSIGN_OR_RETURN(const Json* name_json, field(out, out_path, "name"));
      KILN_ASSIGN_OR_RETURN(std::string name, to_value_name(*name_json, field_path(out_path, "name")));
      KILN_TRY(check_new_name(name, field_path(out_path, "name")));
      KILN_ASSIGN_OR_RETURN(TensorType type, read_type(out, out_path));
      names.push_back(std::move(name));
      types.push_back(std::move(type));
    }
    Attrs attrs;
    if (j.contains("attrs")) {
      const Json& attrs_json = j["attrs"];
      const std::string attrs_path = field_path(path, "attrs");
      if (!attrs_json.is_object())
        return fail(attrs_path, "must be an object, got " + std::string(json_kind(attrs_json)));
      for (const auto& [key, value] : attrs_json.items()) {
        const AttrSpec* spec = find_attr_spec(op_def(*op), key);
        KILN_ASSIGN_OR_RETURN(AttrValue attr, read_attr(value, spec, field_path(attrs_path, key)));
        attrs.set(key, std::move(attr));
      }
    }
    int32_t group = -1;
    if (j.contains("group")) {
      const Json& g = j["group"];
      if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() > INT32_MAX) {
        return fail(field_path(path, "group"), "must be a non-negative integer (a fused group id)");
      }
      group = static_cast<int32_t>(g.get<int64_t>());
    }
    serial::coerce_attrs_to_schema(*op, attrs);
    auto added = graph_.add_node_typed(*op, std::move(inputs), std::move(attrs), std::move(names), std::move(types));
    if (!added.ok()) return with_context(added.error(), source_ + ": " + path);
    graph_.set_node_group(static_cast<NodeId>(graph_.nodes().size()) - 1, group);
    return ok_status();
  }

  Status read_output(const Json& j, const std::string& path) {
    if (!j.is_object()) return fail(path, "an output must be an object, got " + std::string(json_kind(j)));
    KILN_TRY(check_fields(j, path, {"name", "value"}));
    KILN_ASSIGN_OR_RETURN(const Json* name_json, field(j, path, "name"));
    KILN_ASSIGN_OR_RETURN(std::string name, to_value_name(*name_json, field_path(path, "name")));
    for (const GraphOutput& o : graph_.outputs()) {
      if (o.name == name) return fail(field_path(path, "name"), "output '" + name + "' is declared twice");
    }
    KILN_ASSIGN_OR_RETURN(const Json* value_json, field(j, path, "value"));
    KILN_ASSIGN_OR_RETURN(ValueId id, to_value_use(*value_json, field_path(path, "value")));
    Status added = graph_.add_output(name, id);
    if (!added.ok()) return with_context(added.error(), source_ + ": " + path);
    return ok_status();
  }

  std::string source_;
  Graph graph_;
  std::unordered_map<std::string, std::string> defined_at_;  // value name -> JSON path of its definition
};

}  // namespace

std::string print_graph_json(const Graph& graph, int indent) {
  OrderedJson inputs = OrderedJson::array();
  // after_nodes: how many nodes precede the input in creation order (written only when not 0).
  size_t nodes_before = 0;
  for (const GraphInput& input : graph.inputs()) {
    while (nodes_before < graph.nodes().size() && !graph.nodes()[nodes_before].outputs.empty() &&
           graph.nodes()[nodes_before].outputs[0] < input.value) {
      ++nodes_before;
    }
    OrderedJson j = value_json(graph.value(input.value));
    j["binding"] = binding_name(input.binding);
    if (nodes_before > 0) j["after_nodes"] = nodes_before;
    inputs.push_back(std::move(j));
  }
  OrderedJson nodes = OrderedJson::array();
  for (const Node& node : graph.nodes()) {
    OrderedJson j{{"op", op_name(node.op)}, {"inputs", OrderedJson::array()}, {"outputs", OrderedJson::array()}};
    for (ValueId v : node.inputs) j["inputs"].push_back(graph.value(v).name);
    for (ValueId v : node.outputs) j["outputs"].push_back(value_json(graph.value(v)));
    if (!node.attrs.entries().empty()) {
      OrderedJson attrs = OrderedJson::object();
      for (const auto& [name, value] : node.attrs.entries()) attrs[name] = attr_json(value);
      j["attrs"] = std::move(attrs);
    }
    if (node.group >= 0) j["group"] = node.group;
    nodes.push_back(std::move(j));
  }
  OrderedJson outputs = OrderedJson::array();
  for (const GraphOutput& output : graph.outputs()) {
    outputs.push_back(OrderedJson{{"name", output.name}, {"value", graph.value(output.value).name}});
  }
  const OrderedJson header{{"format", kFormatName}, {"version", kFormatVersion}, {"name", graph.name}};
  if (indent < 0) {
    OrderedJson root = header;
    root["inputs"] = std::move(inputs);
    root["nodes"] = std::move(nodes);
    root["outputs"] = std::move(outputs);
    return dump(root) + "\n";
  }
  // One line per header field and per array element.
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string out = "{\n";
  for (const auto& [key, value] : header.items()) out += pad + dump(key) + ": " + dump(value) + ",\n";
  const std::pair<const char*, const OrderedJson*> arrays[] = {
      {"inputs", &inputs}, {"nodes", &nodes}, {"outputs", &outputs}};
  for (size_t a = 0; a < std::size(arrays); ++a) {
    const OrderedJson& list = *arrays[a].second;
    out += pad + "\"" + arrays[a].first + "\": [";
    for (size_t i = 0; i < list.size(); ++i) out += (i ? ",\n" : "\n") + pad + pad + dump(list[i]);
    out += list.empty() ? "]" : "\n" + pad + "]";
    out += a + 1 < std::size(arrays) ? ",\n" : "\n";
  }
  return out + "}\n";
}

Result<Graph> parse_graph_json(std::string_view text, std::string_view source_name) {
  const std::string source(source_name);
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    return make_error(ErrorCode::parse_error, source + ": JSON is nested more than " + std::to_string(kMaxJsonDepth) +
                                                  " levels deep (a graph needs 5)");
  }
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 3: ..."; keep the part after
    // the tag.
    std::string what = e.what();
    const size_t tag_end = what.find("] ");
    if (tag_end != std::string::npos) what = what.substr(tag_end + 2);
    return make_error(ErrorCode::parse_error, source + ": invalid JSON: " + what);
  }
  return JsonReader(source).read(root);
}

}  // namespace kiln
