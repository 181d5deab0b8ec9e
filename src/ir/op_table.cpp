// The one op table, in KILN_OPS order. Each entry is defined in its family file under ir/ops/.
#include <string>

#include "ir/ops.h"
#include "ir/serial_util.h"

namespace kiln {

namespace {

const OpDef* const kOpTable[] = {
#define KILN_OP_ENTRY(name) &op_def_##name,
    KILN_OPS(KILN_OP_ENTRY)
#undef KILN_OP_ENTRY
};
static_assert(std::size(kOpTable) == static_cast<size_t>(kOpCount));

// Each entry must describe the op at its own index and carry every function.
bool table_is_consistent() {
  for (int i = 0; i < kOpCount; ++i) {
    const OpDef* def = kOpTable[i];
    if (def->op != static_cast<Op>(i) || !def->infer || !def->cost || !def->reference) return false;
  }
  return true;
}

}  // namespace

const OpDef& op_def(Op op) {
  static const bool consistent = table_is_consistent();
  KILN_CHECK(consistent);
  const auto index = static_cast<size_t>(op);
  KILN_CHECK(index < std::size(kOpTable));
  return *kOpTable[index];
}

std::string_view op_name(Op op) { return op_def(op).name; }

std::optional<Op> find_op(std::string_view name) {
  for (int i = 0; i < kOpCount; ++i) {
    if (kOpTable[i]->name == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

std::span<const OpDef* const> all_op_defs() {
  (void)op_def(Op::add);  // runs the consistency check
  return kOpTable;
}

std::string type_to_string(const TensorType& type) {
  return std::string(dtype_name(type.dtype)) + shape_to_string(type.shape);
}

size_t type_bytes(const TensorType& type) {
  return static_cast<size_t>(shape_numel(type.shape)) * dtype_size(type.dtype);
}

const AttrSpec* find_attr_spec(const OpDef& def, std::string_view name) {
  for (const AttrSpec& spec : def.attrs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::optional<AttrValue> coerce_attr(const AttrValue& value, AttrKind wanted) {
  const AttrKind have = attr_kind_of(value);
  if (have == wanted) return value;
  if (have == AttrKind::int_ && wanted == AttrKind::float_) {
    return AttrValue(static_cast<double>(std::get<int64_t>(value)));
  }
  if (have == AttrKind::ints && wanted == AttrKind::floats) {
    std::vector<double> out;
    for (int64_t x : std::get<std::vector<int64_t>>(value)) out.push_back(static_cast<double>(x));
    return AttrValue(std::move(out));
  }
  if (have == AttrKind::floats && wanted == AttrKind::ints && std::get<std::vector<double>>(value).empty()) {
    return AttrValue(std::vector<int64_t>{});
  }
  return std::nullopt;
}

Result<std::vector<TensorType>> infer_node(Op op, std::span<const TensorType> inputs, const Attrs& attrs) {
  const OpDef& def = op_def(op);
  const int n = static_cast<int>(inputs.size());
  if (n < def.min_inputs || (def.max_inputs >= 0 && n > def.max_inputs)) {
    std::string expected = def.max_inputs < 0                ? "at least " + std::to_string(def.min_inputs)
                           : def.min_inputs == def.max_inputs ? std::to_string(def.min_inputs)
                                                              : std::to_string(def.min_inputs) + " to " +
                                                                    std::to_string(def.max_inputs);
    return make_error(ErrorCode::shape_error,
                      std::string(def.name) + " takes " + expected + " inputs, got " + std::to_string(n));
  }
  for (const auto& [name, value] : attrs.entries()) {
    const AttrSpec* spec = find_attr_spec(def, name);
    if (!spec) {
      std::string known;
      for (const AttrSpec& s : def.attrs) known += (known.empty() ? "" : ", ") + std::string(s.name);
      return make_error(ErrorCode::invalid_argument,
                        "unknown attribute '" + name + "' for " + std::string(def.name) +
                            (known.empty() ? " (it takes none)" : " (known: " + known + ")"));
    }
    if (attr_kind_of(value) != spec->kind) {
      return make_error(ErrorCode::invalid_argument, "attribute '" + name + "' of " + std::string(def.name) +
                                                         " must be " + attr_kind_name(spec->kind) + ", got " +
                                                         attr_kind_name(attr_kind_of(value)));
    }
  }
  for (const AttrSpec& spec : def.attrs) {
    if (spec.required && !attrs.has(std::string(spec.name))) {
      return make_error(ErrorCode::invalid_argument,
                        "missing required attribute '" + std::string(spec.name) + "' of " + std::string(def.name));
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int64_t d : inputs[i].shape) {
      if (d < 0) {
        return make_error(ErrorCode::shape_error, "input " + std::to_string(i) + " has a negative dimension " +
                                                      type_to_string(inputs[i]));
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(std::vector<TensorType> outputs, def.infer(OpCall{inputs, attrs}));
  // Inferred shapes obey the limits every parsed shape does, so later shape arithmetic cannot overflow either.
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (auto problem = serial::shape_problem(outputs[i].shape)) {
      return make_error(ErrorCode::shape_error,
                        std::string(def.name) + " output " + std::to_string(i) + ": " + *problem);
    }
  }
  return outputs;
}

}  // namespace kiln
