#include "ir/attrs.h"

#include "util/check.h"

namespace kiln {

const char* attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::int_: return "int";
    case AttrKind::float_: return "float";
    case AttrKind::string: return "string";
    case AttrKind::ints: return "int list";
    case AttrKind::floats: return "float list";
  }
  return "?";
}

AttrKind attr_kind_of(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }

const AttrValue* Attrs::find(const std::string& name) const {
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second;
}

int64_t Attrs::get_int(const std::string& name, int64_t fallback) const {
  const AttrValue* v = find(name);
  if (!v) return fallback;
  KILN_CHECK(std::holds_alternative<int64_t>(*v));
  return std::get<int64_t>(*v);
}

double Attrs::get_float(const std::string& name, double fallback) const {
  const AttrValue* v = find(name);
  if (!v) return fallback;
  if (std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  KILN_CHECK(std::holds_alternative<double>(*v));
  return std::get<double>(*v);
}

std::string Attrs::get_string(const std::string& name, const std::string& fallback) const {
  const AttrValue* v = find(name);
  if (!v) return fallback;
  KILN_CHECK(std::holds_alternative<std::string>(*v));
  return std::get<std::string>(*v);
}

std::vector<int64_t> Attrs::get_ints(const std::string& name, const std::vector<int64_t>& fallback) const {
  const AttrValue* v = find(name);
  if (!v) return fallback;
  KILN_CHECK(std::holds_alternative<std::vector<int64_t>>(*v));
  return std::get<std::vector<int64_t>>(*v);
}

std::vector<double> Attrs::get_floats(const std::string& name, const std::vector<double>& fallback) const {
  const AttrValue* v = find(name);
  if (!v) return fallback;
  KILN_CHECK(std::holds_alternative<std::vector<double>>(*v));
  return std::get<std::vector<double>>(*v);
}

}  // namespace kiln
