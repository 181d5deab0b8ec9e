// Helpers shared by the op tests in tests/ir/: build tensors from values, run one op on the reference
// executor, and check that inference fails with a given code and message.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/ops.h"
#include "ref/executor.h"

namespace kiln::test {

inline Tensor tensor(DType dtype, Shape shape, const std::vector<double>& values) {
  return Tensor::from_f64(dtype, std::move(shape), values);
}
inline Tensor f32(Shape shape, const std::vector<double>& values) {
  return tensor(DType::f32, std::move(shape), values);
}

// Runs `op` on the reference; a failure is reported and yields no outputs (so indexing them fails loudly in
// ASSERT_EQ(outputs.size(), ...) rather than crashing).
inline std::vector<Tensor> run(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  auto result = ref::run_op(op, inputs, attrs);
  EXPECT_TRUE(result.ok()) << op_name(op) << ": " << result.error().message;
  if (!result.ok()) return {};
  return std::move(result).value();
}

// Runs `op` and returns its only output (an empty f32[0] tensor when it fails, which the caller's checks of
// values and shapes then reject).
inline Tensor run1(Op op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}) {
  std::vector<Tensor> outputs = run(op, inputs, attrs);
  if (outputs.size() != 1) {
    ADD_FAILURE() << op_name(op) << " gave " << outputs.size() << " outputs, expected 1";
    return Tensor(DType::f32, {0});
  }
  return std::move(outputs[0]);
}

inline Result<std::vector<TensorType>> infer(Op op, const std::vector<TensorType>& inputs, const Attrs& attrs = {}) {
  return infer_node(op, inputs, attrs);
}

// Inference must fail with `code` and a message containing `expected`.
inline ::testing::AssertionResult fails_with(const Result<std::vector<TensorType>>& result, ErrorCode code,
                                             const std::string& expected) {
  if (result.ok()) return ::testing::AssertionFailure() << "inference succeeded, expected \"" << expected << "\"";
  const Error& e = result.error();
  if (e.code != code) {
    return ::testing::AssertionFailure() << "error code " << error_code_name(e.code) << ", expected "
                                         << error_code_name(code) << " (message: " << e.message << ")";
  }
  if (e.message.find(expected) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << e.message << "\" lacks \"" << expected << "\"";
  }
  return ::testing::AssertionSuccess();
}

inline TensorType type(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

}  // namespace kiln::test
