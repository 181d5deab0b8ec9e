// Printer and parser of the text form (see text.h and docs/ir-format.md), and load_graph_file.
//
// The parser is a hand-written recursive descent over characters with one byte of lookahead. The grammar has
// no nesting beyond flat lists, so the parse uses constant stack depth whatever the input, and every loop
// consumes input, so it is linear in the input size.
#include "ir/text.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include "ir/json.h"
#include "ir/serial_util.h"

namespace kiln {
namespace {

// ---- printing ----

void append_quoted(std::string& out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;  // printable ASCII, and UTF-8 bytes as they are
        }
    }
  }
  out += '"';
}

void append_type(std::string& out, const TensorType& type) { out += type_to_string(type); }

void append_attr_value(std::string& out, const AttrValue& value) {
  switch (attr_kind_of(value)) {
    case AttrKind::int_: out += std::to_string(std::get<int64_t>(value)); break;
    case AttrKind::float_: out += serial::format_float(std::get<double>(value)); break;
    case AttrKind::string: append_quoted(out, std::get<std::string>(value)); break;
    case AttrKind::ints: {
      out += '[';
      const auto& list = std::get<std::vector<int64_t>>(value);
      for (size_t i = 0; i < list.size(); ++i) out += (i ? "," : "") + std::to_string(list[i]);
      out += ']';
      break;
    }
    case AttrKind::floats: {
      out += '[';
      const auto& list = std::get<std::vector<double>>(value);
      for (size_t i = 0; i < list.size(); ++i) out += (i ? "," : "") + serial::format_float(list[i]);
      out += ']';
      break;
    }
  }
}

void append_input(std::string& out, const Graph& graph, const GraphInput& input) {
  const Value& v = graph.value(input.value);
  out += "  input %" + v.name + ": ";
  append_type(out, v.type);
  out += ' ';
  out += binding_name(input.binding);
  out += '\n';
}

void append_node(std::string& out, const Graph& graph, const Node& node) {
  out += "  ";
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const Value& v = graph.value(node.outputs[i]);
    out += (i ? ", %" : "%") + v.name + ": ";
    append_type(out, v.type);
  }
  out += " = ";
  out += op_name(node.op);
  out += '(';
  for (size_t i = 0; i < node.inputs.size(); ++i) out += (i ? ", %" : "%") + graph.value(node.inputs[i]).name;
  out += ')';
  if (!node.attrs.entries().empty()) {
    out += " {";
    bool first = true;
    for (const auto& [name, value] : node.attrs.entries()) {
      out += first ? "" : ", ";
      first = false;
      out += name + "=";
      append_attr_value(out, value);
    }
    out += '}';
  }
  if (node.group >= 0) out += " @g" + std::to_string(node.group);
  out += '\n';
}

// ---- parsing ----

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '/' || c == '-';
}
bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// At most `limit` characters of `text`, for quoting user input in a message.
std::string clip(std::string_view text, size_t limit = 40) {
  return text.size() <= limit ? std::string(text) : std::string(text.substr(0, limit)) + "...";
}

class TextParser {
 public:
  TextParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Result<Graph> parse() {
    skip_space();
    const size_t start = pos_;
    if (word() != "graph") {
      return error_at(start, ErrorCode::parse_error, "expected 'graph <name> {' at the start of the text");
    }
    skip_space();
    if (peek() == '"') {
      KILN_ASSIGN_OR_RETURN(graph_.name, parse_string());
    } else {
      KILN_ASSIGN_OR_RETURN(graph_.name, parse_name("a graph name"));
    }
    KILN_TRY(expect('{', "after the graph name"));
    while (true) {
      skip_space();
      const size_t start = pos_;
      if (at_end()) return error_here("missing '}' at the end of graph " + clip(graph_.name));
      if (peek() == '}') {
        ++pos_;
        break;
      }
      if (peek() == '%') {
        KILN_TRY(parse_node(start));
        continue;
      }
      const std::string_view keyword = word();
      if (keyword == "input") {
        KILN_TRY(parse_input());
      } else if (keyword == "output") {
        KILN_TRY(parse_output());
      } else {
        pos_ = start;
        return error_here("expected 'input', 'output', a node ('%name: type = op(...)') or '}', found " +
                          describe_here());
      }
    }
    skip_space();
    if (!at_end()) return error_here("unexpected " + describe_here() + " after the closing '}' of the graph");
    Status verified = verify_graph(graph_);
    if (!verified.ok()) return with_context(verified.error(), source_);
    return std::move(graph_);
  }

 private:
  // ---- characters ----
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  void skip_space() {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // A run of [A-Za-z0-9_] at the cursor (keywords, op names, dtypes, bindings, attribute names).
  std::string_view word() {
    const size_t start = pos_;
    while (!at_end() && is_word_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  bool consume(char c) {
    skip_space();
    if (peek() != c) return false;
    ++pos_;
    return true;
  }

  // ---- errors ----
  std::string where(size_t at) const {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return source_ + ":" + std::to_string(line) + ":" + std::to_string(at - line_start + 1);
  }
  Error error_at(size_t at, ErrorCode code, const std::string& message) const {
    return make_error(code, where(at) + ": " + message);
  }
  Error error_here(const std::string& message) const { return error_at(pos_, ErrorCode::parse_error, message); }

  std::string describe_here() const {
    if (at_end()) return "end of input";
    const char c = text_[pos_];
    if (c == '\n') return "end of line";
    if (is_word_char(c)) {
      size_t end = pos_;
      while (end < text_.size() && is_word_char(text_[end])) ++end;
      return "'" + clip(text_.substr(pos_, end - pos_)) + "'";
    }
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 15];
    }
    return std::string("'") + c + "'";
  }

  Status expect(char c, const std::string& context) {
    if (consume(c)) return ok_status();
    return error_here(std::string("expected '") + c + "' " + context + ", found " + describe_here());
  }

  // ---- tokens ----

  // A name of [A-Za-z0-9_.:/-]+ (graph, value and output names).
  Result<std::string> parse_name(const std::string& what) {
    skip_space();
    const size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    return check_name(start, text_.substr(start, pos_ - start), what);
  }

  Result<std::string> check_name(size_t start, std::string_view name, const std::string& what) {
    if (name.empty()) return error_at(start, ErrorCode::parse_error, "expected " + what + ", found " + describe_here());
    if (!is_valid_value_name(name)) {
      return error_at(start, ErrorCode::parse_error, "name '" + clip(name) + "' is longer than 256 characters");
    }
    return std::string(name);
  }

  // '%name' used as an operand: the whole run of name characters.
  Result<ValueId> parse_value_use(const std::string& what) {
    skip_space();
    const size_t start = pos_;
    if (peek() != '%') return error_here("expected " + what + " ('%name'), found " + describe_here());
    ++pos_;
    const size_t name_start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    KILN_ASSIGN_OR_RETURN(std::string name, check_name(name_start, text_.substr(name_start, pos_ - name_start),
                                                       "a value name after '%'"));
    std::optional<ValueId> id = graph_.find_value(name);
    if (!id) return error_at(start, ErrorCode::parse_error, "unknown value %" + name);
    return *id;
  }

  // '%name: type' defining a value. Names may contain ':', so the separator is the last ':' of the run of
  // name characters when the run ends in one ("%onnx::x: f32[2]" defines "onnx::x"), or the last ':' before
  // a dtype directly followed by '[' ("%x:f32[2]").
  Result<std::pair<std::string, TensorType>> parse_value_definition() {
    skip_space();
    const size_t start = pos_;
    if (peek() != '%') return error_here("expected a value definition ('%name: type'), found " + describe_here());
    ++pos_;
    const size_t name_start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    std::string_view run = text_.substr(name_start, pos_ - name_start);
    bool colon_in_run = !run.empty() && run.back() == ':';
    if (colon_in_run) {
      run.remove_suffix(1);
    } else if (const size_t colon = run.rfind(':');
               colon != std::string_view::npos && peek() == '[' && parse_dtype(run.substr(colon + 1))) {
      // "%x:f32[2]" without a space: the run swallowed the dtype; give it back.
      pos_ = name_start + colon + 1;
      run = run.substr(0, colon);
      colon_in_run = true;
    }
    KILN_ASSIGN_OR_RETURN(std::string name, check_name(name_start, run, "a value name after '%'"));
    if (!colon_in_run) {
      KILN_TRY(expect(':', "and a type after %" + clip(name) + " (write '%name: type')"));
    }
    auto first = defined_at_.find(name);
    if (first != defined_at_.end()) {
      return error_at(start, ErrorCode::parse_error,
                      "value %" + name + " is defined twice (first at " + where(first->second) + ")");
    }
    defined_at_.emplace(name, start);
    KILN_ASSIGN_OR_RETURN(TensorType type, parse_type());
    return std::pair{std::move(name), std::move(type)};
  }

  // dtype[d0,d1,...]; "f32[]" is a scalar.
  Result<TensorType> parse_type() {
    skip_space();
    const size_t start = pos_;
    const std::string_view dtype_text = word();
    if (dtype_text.empty()) return error_here("expected a type such as f32[2,3], found " + describe_here());
    std::optional<DType> dtype = parse_dtype(dtype_text);
    if (!dtype) {
      return error_at(
          start, ErrorCode::parse_error,
          "unknown dtype '" + clip(dtype_text) + "' (known: f32, f16, bf16, f8e4m3, f8e5m2, i32, i64, bool)");
    }
    TensorType type{*dtype, {}};
    KILN_TRY(expect('[', "after the dtype (scalars are written f32[])"));
    if (consume(']')) return type;
    int64_t product = 1;
    while (true) {
      skip_space();
      const size_t dim_at = pos_;
      KILN_ASSIGN_OR_RETURN(AttrValue dim, parse_number());
      if (attr_kind_of(dim) != AttrKind::int_) {
        return error_at(dim_at, ErrorCode::parse_error, "a dimension must be an integer");
      }
      const int64_t d = std::get<int64_t>(dim);
      if (d < 0) return error_at(dim_at, ErrorCode::parse_error, "negative dimension " + std::to_string(d));
      if (type.shape.size() == static_cast<size_t>(serial::kMaxRank)) {
        return error_at(dim_at, ErrorCode::parse_error,
                        "rank is above the limit of " + std::to_string(serial::kMaxRank) + " axes");
      }
      if (!serial::extend_numel(product, d)) {
        return error_at(dim_at, ErrorCode::parse_error, "shape has more than 2^62 elements");
      }
      type.shape.push_back(d);
      if (consume(']')) return type;
      KILN_TRY(expect(',', "or ']' in the shape"));
    }
  }

  // An integer (int64) or a float: 3, -1, 1.5, 1e-06, inf, -inf, nan.
  Result<AttrValue> parse_number() {
    skip_space();
    const size_t start = pos_;
    size_t p = pos_;
    if (p < text_.size() && text_[p] == '-') ++p;
    for (std::string_view special : {"inf", "nan"}) {
      if (text_.substr(p, 3) == special && (p + 3 >= text_.size() || !is_word_char(text_[p + 3]))) {
        pos_ = p + 3;
        return AttrValue(*serial::parse_nonfinite(text_.substr(start, pos_ - start)));
      }
    }
    const size_t digits_start = p;
    while (p < text_.size() && is_digit(text_[p])) ++p;
    if (p == digits_start) return error_here("expected a number, found " + describe_here());
    bool is_float = false;
    if (p + 1 < text_.size() && text_[p] == '.' && is_digit(text_[p + 1])) {
      is_float = true;
      ++p;
      while (p < text_.size() && is_digit(text_[p])) ++p;
    }
    if (p < text_.size() && (text_[p] == 'e' || text_[p] == 'E')) {
      size_t q = p + 1;
      if (q < text_.size() && (text_[q] == '+' || text_[q] == '-')) ++q;
      if (q >= text_.size() || !is_digit(text_[q])) {
        pos_ = q;
        return error_at(start, ErrorCode::parse_error,
                        "malformed exponent in number '" + clip(text_.substr(start, q - start)) + "'");
      }
      while (q < text_.size() && is_digit(text_[q])) ++q;
      p = q;
      is_float = true;
    }
    const std::string_view token = text_.substr(start, p - start);
    pos_ = p;
    if (!is_float) {
      int64_t value = 0;
      const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
      if (ec != std::errc() || end != token.data() + token.size()) {
        return error_at(start, ErrorCode::parse_error, "integer " + clip(token) + " is out of the int64 range");
      }
      return AttrValue(value);
    }
    double value = 0;
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (ec != std::errc() || end != token.data() + token.size()) {
      return error_at(start, ErrorCode::parse_error, "number " + clip(token) + " is out of the range of a double");
    }
    return AttrValue(value);
  }

  // "..." with escapes \" \\ \n \t \r \xHH; the result must be UTF-8.
  Result<std::string> parse_string() {
    skip_space();
    const size_t start = pos_;
    if (peek() != '"') return error_here("expected a string, found " + describe_here());
    ++pos_;
    std::string out;
    while (true) {
      if (at_end() || peek() == '\n') return error_at(start, ErrorCode::parse_error, "unterminated string");
      const char c = text_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      const size_t escape_at = pos_ - 1;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'x': {
          int byte = 0;
          for (int k = 0; k < 2; ++k) {
            const char h = peek();
            const int digit = is_digit(h)              ? h - '0'
                              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                       : -1;
            if (digit < 0) return error_at(escape_at, ErrorCode::parse_error, "\\x needs two hex digits");
            byte = byte * 16 + digit;
            ++pos_;
          }
          out += static_cast<char>(byte);
          break;
        }
        default:
          return error_at(escape_at, ErrorCode::parse_error,
                          "unknown escape in string (use \\\" \\\\ \\n \\t \\r or \\xHH)");
      }
    }
    if (!serial::is_valid_utf8(out)) return error_at(start, ErrorCode::parse_error, "string is not valid UTF-8");
    return out;
  }

  // int, float, "string", [numbers...]. A list with a float in it is a float list; [] is an int list until
  // the op's schema says otherwise.
  Result<AttrValue> parse_attr_value() {
    skip_space();
    if (peek() == '"') {
      KILN_ASSIGN_OR_RETURN(std::string s, parse_string());
      return AttrValue(std::move(s));
    }
    const bool bare_word =
        is_word_char(peek()) && !is_digit(peek()) && text_.substr(pos_, 3) != "inf" && text_.substr(pos_, 3) != "nan";
    if (bare_word) {
      return error_here("expected an attribute value (a number, a \"string\" or a [list]), found " + describe_here() +
                        " (strings are quoted)");
    }
    if (peek() != '[') return parse_number();
    ++pos_;
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool any_float = false;
    if (!consume(']')) {
      while (true) {
        skip_space();
        if (peek() == '"' || peek() == '[') return error_here("list elements must be numbers");
        KILN_ASSIGN_OR_RETURN(AttrValue element, parse_number());
        if (attr_kind_of(element) == AttrKind::int_) {
          ints.push_back(std::get<int64_t>(element));
          floats.push_back(static_cast<double>(std::get<int64_t>(element)));
        } else {
          any_float = true;
          floats.push_back(std::get<double>(element));
        }
        if (consume(']')) break;
        KILN_TRY(expect(',', "or ']' in the list"));
      }
    }
    if (any_float) return AttrValue(std::move(floats));
    return AttrValue(std::move(ints));
  }

  Result<Attrs> parse_attrs() {
    Attrs attrs;
    if (consume('}')) return attrs;
    while (true) {
      skip_space();
      const size_t name_at = pos_;
      const std::string name(word());
      if (name.empty()) return error_here("expected an attribute name, found " + describe_here());
      if (attrs.has(name)) return error_at(name_at, ErrorCode::parse_error, "attribute '" + name + "' is given twice");
      KILN_TRY(expect('=', "after attribute '" + name + "'"));
      KILN_ASSIGN_OR_RETURN(AttrValue value, parse_attr_value());
      attrs.set(name, std::move(value));
      if (consume('}')) return attrs;
      KILN_TRY(expect(',', "or '}' between attributes"));
    }
  }

  // ---- statements ----

  // input %name: type binding
  Status parse_input() {
    skip_space();
    const size_t start = pos_;
    KILN_ASSIGN_OR_RETURN(auto definition, parse_value_definition());
    skip_space();
    const size_t binding_at = pos_;
    const std::string_view binding_text = word();
    std::optional<Binding> binding = parse_binding(binding_text);
    if (!binding) {
      const std::string found = binding_text.empty() ? describe_here() : "'" + clip(binding_text) + "'";
      return error_at(binding_at, ErrorCode::parse_error,
                      "expected a binding (weight, per_step or per_call) after the type of input %" + definition.first +
                          ", found " + found);
    }
    auto added = graph_.add_input(definition.first, std::move(definition.second), *binding);
    if (!added.ok()) return with_context(added.error(), where(start));
    return ok_status();
  }

  // %a: type[, %b: type] = op(%x, ...) {name=value, ...}
  Status parse_node(size_t start) {
    std::vector<std::string> names;
    std::vector<TensorType> types;
    while (true) {
      KILN_ASSIGN_OR_RETURN(auto definition, parse_value_definition());
      names.push_back(std::move(definition.first));
      types.push_back(std::move(definition.second));
      if (!consume(',')) break;
    }
    KILN_TRY(expect('=', "or ',' after the type of %" + clip(names.back())));
    skip_space();
    const size_t op_at = pos_;
    const std::string_view op_text = word();
    if (op_text.empty()) return error_here("expected an op name after '=', found " + describe_here());
    std::optional<Op> op = find_op(op_text);
    if (!op) {
      return error_at(op_at, ErrorCode::unknown_op,
                      "unknown op '" + clip(op_text) + "' (`kiln ops` lists the known ones)");
    }
    KILN_TRY(expect('(', "after op " + std::string(op_text)));
    std::vector<ValueId> inputs;
    if (!consume(')')) {
      while (true) {
        KILN_ASSIGN_OR_RETURN(ValueId id, parse_value_use("an input of " + std::string(op_text)));
        inputs.push_back(id);
        if (consume(')')) break;
        KILN_TRY(expect(',', "or ')' between the inputs of " + std::string(op_text)));
      }
    }
    Attrs attrs;
    if (consume('{')) {
      KILN_ASSIGN_OR_RETURN(attrs, parse_attrs());
    }
    // Optional fused-group annotation: @g<N>.
    int32_t group = -1;
    if (consume('@')) {
      const size_t group_at = pos_;
      if (pos_ >= text_.size() || text_[pos_] != 'g') {
        return error_at(group_at, ErrorCode::parse_error, "expected a group annotation such as @g3");
      }
      ++pos_;
      KILN_ASSIGN_OR_RETURN(AttrValue number, parse_number());
      if (attr_kind_of(number) != AttrKind::int_ || std::get<int64_t>(number) < 0 ||
          std::get<int64_t>(number) > INT32_MAX) {
        return error_at(group_at, ErrorCode::parse_error, "a group is a non-negative integer, as in @g3");
      }
      group = static_cast<int32_t>(std::get<int64_t>(number));
    }
    serial::coerce_attrs_to_schema(*op, attrs);
    auto added = graph_.add_node_typed(*op, std::move(inputs), std::move(attrs), std::move(names), std::move(types));
    if (!added.ok()) return with_context(added.error(), where(start));
    graph_.set_node_group(static_cast<NodeId>(graph_.nodes().size()) - 1, group);
    return ok_status();
  }

  // output name = %value
  Status parse_output() {
    skip_space();
    const size_t start = pos_;
    KILN_ASSIGN_OR_RETURN(std::string name, parse_name("an output name"));
    auto first = output_at_.find(name);
    if (first != output_at_.end()) {
      return error_at(start, ErrorCode::parse_error,
                      "output '" + name + "' is declared twice (first at " + where(first->second) + ")");
    }
    output_at_.emplace(name, start);
    KILN_TRY(expect('=', "after output '" + name + "'"));
    KILN_ASSIGN_OR_RETURN(ValueId id, parse_value_use("the value of output '" + name + "'"));
    Status added = graph_.add_output(name, id);
    if (!added.ok()) return with_context(added.error(), where(start));
    return ok_status();
  }

  std::string_view text_;
  std::string source_;
  size_t pos_ = 0;
  Graph graph_;
  std::unordered_map<std::string, size_t> defined_at_;  // value name -> offset of its definition
  std::unordered_map<std::string, size_t> output_at_;   // output name -> offset of its declaration
};

}  // namespace

std::string print_graph_text(const Graph& graph) {
  std::string out = "graph ";
  if (is_valid_value_name(graph.name)) {
    out += graph.name;
  } else {
    append_quoted(out, graph.name);
  }
  out += " {\n";
  // Inputs and nodes are printed in the order their values were created, so that parsing gives the same
  // value ids.
  const auto& inputs = graph.inputs();
  size_t next_input = 0;
  for (const Node& node : graph.nodes()) {
    while (!node.outputs.empty() && next_input < inputs.size() && inputs[next_input].value < node.outputs[0]) {
      append_input(out, graph, inputs[next_input++]);
    }
    append_node(out, graph, node);
  }
  while (next_input < inputs.size()) append_input(out, graph, inputs[next_input++]);
  for (const GraphOutput& output : graph.outputs()) {
    out += "  output " + output.name + " = %" + graph.value(output.value).name + "\n";
  }
  out += "}\n";
  return out;
}

Result<Graph> parse_graph_text(std::string_view text, std::string_view source_name) {
  return TextParser(text, source_name).parse();
}

Result<Graph> load_graph_file(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string extension = fs::path(path).extension().string();
  if (extension != ".json" && extension != ".kiln") {
    return make_error(ErrorCode::invalid_argument,
                      path + ": unknown graph file extension '" + extension + "' (use .kiln for text or .json)");
  }
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return make_error(ErrorCode::io_error, path + ": no such file");
  if (!fs::is_regular_file(status)) return make_error(ErrorCode::io_error, path + ": not a regular file");
  constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 30;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return make_error(ErrorCode::io_error, path + ": cannot read its size: " + ec.message());
  if (size > kMaxFileBytes) return make_error(ErrorCode::io_error, path + ": larger than 1 GiB, not a graph file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, path + ": cannot open for reading");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::io_error, path + ": read failed");
  const std::string text = contents.str();
  return extension == ".json" ? parse_graph_json(text, path) : parse_graph_text(text, path);
}

}  // namespace kiln
