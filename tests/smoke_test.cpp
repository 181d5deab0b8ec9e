#include <gtest/gtest.h>
#include "ir/graph.h"
TEST(Smoke, AddNode) {
  kiln::Graph g;
  auto a = g.add_input("a", {kiln::DType::f32, {2, 3}}, kiln::Binding::per_call);
  auto b = g.add_input("b", {kiln::DType::f32, {3}}, kiln::Binding::weight);
  auto y = g.add_node(kiln::Op::add, {*a, *b}, {});
  ASSERT_TRUE(y.ok()) << y.error().message;
  EXPECT_EQ(g.value((*y)[0]).type.shape, (kiln::Shape{2, 3}));
  EXPECT_TRUE(kiln::verify_graph(g).ok());
}
