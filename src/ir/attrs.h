// Node attributes: a sorted map from name to a small closed set of value kinds. Sorted so that printing,
// hashing and comparing are stable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

enum class AttrKind : uint8_t { int_, float_, string, ints, floats };
const char* attr_kind_name(AttrKind kind);

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;
AttrKind attr_kind_of(const AttrValue& value);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  bool has(const std::string& name) const { return map_.count(name) != 0; }
  void set(const std::string& name, AttrValue value) { map_[name] = std::move(value); }
  void erase(const std::string& name) { map_.erase(name); }
  const AttrValue* find(const std::string& name) const;

  // Typed getters; the fallback is returned when the attribute is absent. Kinds are checked by the verifier
  // against the op's schema, so a kind mismatch here is an internal error.
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name, double fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& name, const std::vector<int64_t>& fallback = {}) const;
  std::vector<double> get_floats(const std::string& name, const std::vector<double>& fallback = {}) const;

  const std::map<std::string, AttrValue>& entries() const { return map_; }
  bool operator==(const Attrs& other) const { return map_ == other.map_; }
  bool operator<(const Attrs& other) const { return map_ < other.map_; }  // any strict order, for map keys

 private:
  std::map<std::string, AttrValue> map_;
};

}  // namespace kiln
