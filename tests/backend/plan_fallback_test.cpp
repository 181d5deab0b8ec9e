// A library call the backend refuses at the plan's shapes (cuBLASLt's block-scaled GEMM at M=1, K=64 on the
// H200) runs on the reference, noted in the summary, instead of failing the whole plan; without reference
// fallbacks the plan fails naming the node and the backend's reason.
#include <gtest/gtest.h>

#include "plan_test_util.h"

namespace kiln {
namespace {

// The real CPU backend, except that it refuses one library op as a backend does at shapes its library
// cannot take.
class RefusingBackend final : public backend::Backend {
 public:
  RefusingBackend(backend::Backend& inner, Op refused) : inner_(inner), refused_(refused) {}
  const backend::DeviceInfo& device() const override { return inner_.device(); }
  kernel::Target target() const override { return inner_.target(); }
  Result<backend::DeviceTensor> allocate(const TensorType& type) override { return inner_.allocate(type); }
  void release(backend::DeviceTensor& tensor) override { inner_.release(tensor); }
  Status copy_to_device(const Tensor& host, const backend::DeviceTensor& device) override {
    return inner_.copy_to_device(host, device);
  }
  Result<Tensor> copy_to_host(const backend::DeviceTensor& device) override { return inner_.copy_to_host(device); }
  Status copy(const backend::DeviceTensor& from, const backend::DeviceTensor& to) override { return inner_.copy(from, to); }
  Result<std::shared_ptr<backend::LoadedModule>> compile(const kernel::EmittedModule& module) override {
    return inner_.compile(module);
  }
  Status launch(const backend::LoadedModule& module, int index, std::span<const backend::DeviceTensor> inputs,
                std::span<const backend::DeviceTensor> outputs) override {
    return inner_.launch(module, index, inputs, outputs);
  }
  Status supports(Op op, std::span<const TensorType> inputs, const Attrs& attrs) const override {
    if (op == refused_) return make_error(ErrorCode::unsupported, "this backend refuses " + std::string(op_name(op)));
    return inner_.supports(op, inputs, attrs);
  }
  Status run_library(Op op, const Attrs& attrs, std::span<const backend::DeviceTensor> inputs,
                     std::span<const backend::DeviceTensor> outputs) override {
    if (op == refused_) return make_error(ErrorCode::device_error, "a refused op was run: " + std::string(op_name(op)));
    return inner_.run_library(op, attrs, inputs, outputs);
  }
  Status synchronize() override { return inner_.synchronize(); }
  Result<backend::Timing> time(const std::function<Status()>& work, const backend::TimingOptions& options) override {
    return inner_.time(work, options);
  }

 private:
  backend::Backend& inner_;
  Op refused_;
};

TEST(PlanFallback, ARefusedLibraryCallRunsOnTheReference) {
  const Graph g = testing::optimized_zoo_model("flux1-double-block:tiny");
  RefusingBackend refusing(testing::plan_test_backend(), Op::attention);
  auto plan = backend::Plan::build(refusing, g);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const backend::PlanSummary& summary = (*plan)->summary();
  EXPECT_EQ(summary.fallbacks, 1);
  bool noted = false;
  for (const std::string& note : summary.notes) noted = noted || note.find("this backend refuses attention") != std::string::npos;
  EXPECT_TRUE(noted);
  const auto inputs = models::random_inputs(g, 5);
  auto out = (*plan)->run(inputs);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(testing::matches_reference(g, inputs, *out), "");

  backend::PlanOptions strict;
  strict.reference_fallback = false;
  auto refused = backend::Plan::build(refusing, g, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("this backend refuses attention"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("%attention"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace kiln
