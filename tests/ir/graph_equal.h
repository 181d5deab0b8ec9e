// Test helpers for the serializer tests: structural equality of two graphs (names, value ids, types,
// producers, nodes, attributes with floats compared bit for bit, bindings, outputs) and error assertions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>

#include "ir/graph.h"

namespace kiln::testing {

// Bitwise for doubles, so that -0.0 differs from 0.0 and any NaN equals any NaN (the formats spell NaN once).
inline bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

inline bool same_attr_value(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) return same_double(*x, std::get<double>(b));
  if (const auto* xs = std::get_if<std::vector<double>>(&a)) {
    const auto& ys = std::get<std::vector<double>>(b);
    if (xs->size() != ys.size()) return false;
    for (size_t i = 0; i < xs->size(); ++i) {
      if (!same_double((*xs)[i], ys[i])) return false;
    }
    return true;
  }
  return a == b;
}

inline void expect_graphs_equal(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.values().size(), b.values().size());
  for (size_t i = 0; i < a.values().size(); ++i) {
    EXPECT_EQ(a.values()[i].name, b.values()[i].name) << "value " << i;
    EXPECT_EQ(a.values()[i].type, b.values()[i].type) << "value " << i;
    EXPECT_EQ(a.values()[i].producer, b.values()[i].producer) << "value " << i;
  }
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node& x = a.nodes()[i];
    const Node& y = b.nodes()[i];
    EXPECT_EQ(x.op, y.op) << "node " << i;
    EXPECT_EQ(x.inputs, y.inputs) << "node " << i;
    EXPECT_EQ(x.outputs, y.outputs) << "node " << i;
    ASSERT_EQ(x.attrs.entries().size(), y.attrs.entries().size()) << "node " << i;
    for (const auto& [name, value] : x.attrs.entries()) {
      const AttrValue* other = y.attrs.find(name);
      ASSERT_NE(other, nullptr) << "node " << i << " attribute " << name;
      EXPECT_TRUE(same_attr_value(value, *other)) << "node " << i << " attribute " << name;
    }
  }
  ASSERT_EQ(a.inputs().size(), b.inputs().size());
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    EXPECT_EQ(a.inputs()[i].value, b.inputs()[i].value) << "input " << i;
    EXPECT_EQ(a.inputs()[i].binding, b.inputs()[i].binding) << "input " << i;
  }
  ASSERT_EQ(a.outputs().size(), b.outputs().size());
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    EXPECT_EQ(a.outputs()[i].name, b.outputs()[i].name) << "output " << i;
    EXPECT_EQ(a.outputs()[i].value, b.outputs()[i].value) << "output " << i;
  }
}

// The result is an error with `code` whose message contains every one of `parts` (the place and the problem).
template <class T>
void expect_error(const Result<T>& result, ErrorCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(result.ok()) << "expected an error containing '" << *parts.begin() << "'";
  EXPECT_EQ(error_code_name(result.error().code), std::string(error_code_name(code))) << result.error().message;
  for (const std::string& part : parts) {
    EXPECT_NE(result.error().message.find(part), std::string::npos)
        << "message: " << result.error().message << "\nmissing: " << part;
  }
}

}  // namespace kiln::testing
