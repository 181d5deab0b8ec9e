// Generated CPU kernels as a Plan runs them (its thread pool, its default schedules): a GELU and a gated SiLU
// big enough that the default reads tables of stored bits and streams the gated product's rows, and a square
// in even rows that the default pairs (Schedule::pairs), run on every core, match the reference on each call;
// the plan's source shows each (so the test cannot pass by running none).
#include <gtest/gtest.h>

#include "backend/plan.h"
#include "harness/machine.h"
#include "plan_test_util.h"

namespace kiln {
namespace {

TEST(PlanCpuKernels, TablesAndStreamedStoresMatchTheReferenceOnEveryCore) {
  backend::CpuBackendOptions options;
  options.threads = 2;  // several workers fill and read one table at once
  auto backend = backend::make_cpu_backend(options);
  const backend::DeviceInfo& d = backend->device();
  EXPECT_EQ(d.bandwidth_bytes_per_second, harness::memcpy_bandwidth_on(2));  // the copy runs on its 2 threads too
  // Larger than the cache the backend reports, in rows longer than kStreamMinRow: the default streams (in
  // odd rows, which do not pair) and pairs without streaming (in even rows).
  const int64_t cols = 4095, rows = std::max<int64_t>(16, 2 * d.cache_bytes / (4 * cols * 2) + 1);
  Graph g;
  const ValueId x = *g.add_input("x", {DType::bf16, {rows, cols}}, Binding::per_call);
  const ValueId gate = *g.add_input("gate", {DType::bf16, {rows, cols}}, Binding::per_call);
  const ValueId even = *g.add_input("even", {DType::bf16, {rows, cols + 1}}, Binding::per_call);
  const ValueId y = (*g.add_node(Op::gelu, {x}, {{"approximate", std::string("tanh")}}, {"y"}))[0];
  const ValueId s = (*g.add_node(Op::silu, {gate}, {}, {"s"}))[0];
  const ValueId z = (*g.add_node(Op::mul, {s, x}, {}, {"z"}))[0];
  const ValueId square = (*g.add_node(Op::mul, {even, even}, {}, {"square"}))[0];
  ASSERT_TRUE(g.add_output("y", y).ok());
  ASSERT_TRUE(g.add_output("z", z).ok());
  ASSERT_TRUE(g.add_output("square", square).ok());
  auto plan = backend::Plan::build(*backend, g);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const std::string source = (*plan)->source();
  EXPECT_NE(source.find("static uint16_t kiln_tv"), std::string::npos) << source;
  EXPECT_NE(source.find("kiln_stream_bf16_row(out"), std::string::npos) << source;  // z = s * x
  EXPECT_NE(source.find("kiln_put_word(out"), std::string::npos) << source;         // square, paired
  for (uint64_t seed : {1, 2}) {
    const auto inputs = models::random_inputs(g, seed);
    auto out = (*plan)->run(inputs);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(testing::matches_reference(g, inputs, *out), "") << "seed " << seed;
  }
}

}  // namespace
}  // namespace kiln
