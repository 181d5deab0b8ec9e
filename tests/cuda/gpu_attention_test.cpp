// cuDNN fused attention on a real GPU against an fp64 softmax(q·kᵀ·s)·v from the same bf16 inputs, in the
// head-major layout and read straight out of a token-major [b, s, h, d] buffer, causal and not; every plan
// cuDNN builds must compute the same function.
#include <gtest/gtest.h>

#ifdef KILN_HAS_CUDNN

#include <cmath>
#include <random>
#include <vector>

#include "cuda/attention.h"
#include "gpu_test_util.h"
#include "ir/dtype.h"

namespace kiln::cuda {
namespace {

struct Case {
  bool token_major;
  bool causal;
};

class GpuAttention : public ::testing::TestWithParam<Case> {};

TEST_P(GpuAttention, EveryPlanMatchesTheReference) {
  KILN_REQUIRE_GPU();
  const Case c = GetParam();
  AttentionDesc desc{.batch = 2, .heads = 3, .q_tokens = 77, .kv_tokens = 77, .head_dim = 64, .causal = c.causal};
  const int64_t b = desc.batch, h = desc.heads, s = desc.q_tokens, d = desc.head_dim;
  auto layout = c.token_major ? AttentionDesc::token_major(h, s, d) : AttentionDesc::head_major(h, s, d);
  desc.q_stride = desc.k_stride = desc.v_stride = desc.o_stride = layout;
  auto offset = [&](int64_t bi, int64_t hi, int64_t si, int64_t di) {
    return bi * layout[0] + hi * layout[1] + si * layout[2] + di * layout[3];
  };
  const int64_t n = b * h * s * d;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> q(n), k(n), v(n);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = round_to_dtype(normal(rng), DType::bf16);
  std::vector<uint8_t> bytes(n * 2);
  auto stream = Stream::create();
  KILN_ASSERT_OK(stream);
  std::vector<DeviceBuffer> in;
  for (auto* t : {&q, &k, &v}) {
    encode_elements(DType::bf16, t->data(), bytes.data(), n);
    auto buffer = DeviceBuffer::allocate(n * 2);
    KILN_ASSERT_OK(buffer);
    KILN_ASSERT_OK(buffer->upload(bytes.data(), n * 2));
    in.push_back(std::move(buffer).value());
  }
  auto attention = CudnnAttention::create(desc, stream->handle());
  ASSERT_TRUE(attention.ok()) << attention.error().message;
  ASSERT_GE(attention->plan_count(), 1);
  auto workspace = DeviceBuffer::allocate(std::max<int64_t>(attention->workspace_bytes(), 1));
  KILN_ASSERT_OK(workspace);
  auto out = DeviceBuffer::allocate(n * 2);
  KILN_ASSERT_OK(out);

  std::vector<double> ref(n);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> p(s, 0.0);
        double top = -INFINITY, sum = 0;
        const int64_t last = c.causal ? i : s - 1;
        for (int64_t j = 0; j <= last; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += q[offset(bi, hi, i, e)] * k[offset(bi, hi, j, e)];
          p[j] = dot * scale;
          top = std::max(top, p[j]);
        }
        for (int64_t j = 0; j <= last; ++j) sum += (p[j] = std::exp(p[j] - top));
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= last; ++j) acc += p[j] * v[offset(bi, hi, j, e)];
          ref[offset(bi, hi, i, e)] = acc / sum;
        }
      }
  std::vector<double> got(n);
  for (int64_t plan = -1; plan < attention->plan_count(); ++plan) {
    KILN_ASSERT_OK(out->fill_bytes(0xff));
    auto ran = attention->run(in[0].data(), in[1].data(), in[2].data(), out->data(), workspace->data(), plan);
    if (!ran.ok() && plan >= 0) continue;  // a plan cuDNN listed but cannot run here: not a wrong answer
    ASSERT_TRUE(ran.ok()) << ran.error().message;
    KILN_ASSERT_OK(stream->synchronize());
    KILN_ASSERT_OK(out->download(bytes.data(), n * 2));
    decode_elements(DType::bf16, bytes.data(), got.data(), n);
    for (int64_t e = 0; e < n; ++e)
      ASSERT_NEAR(got[e], ref[e], 0x1p-7 * std::abs(ref[e]) + 0x1p-9) << desc.str() << " plan " << plan << " at " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuAttention,
                         ::testing::Values(Case{false, false}, Case{true, false}, Case{false, true}, Case{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.token_major ? "token_major" : "head_major") +
                                  (info.param.causal ? "_causal" : "");
                         });

TEST(GpuAttentionErrors, BadShapesAreErrorsNotCrashes) {
  KILN_REQUIRE_GPU();
  auto stream = Stream::create();
  KILN_ASSERT_OK(stream);
  auto zero = CudnnAttention::create({.batch = 1, .heads = 0}, stream->handle());
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().code, ErrorCode::shape_error);
  auto f32 = CudnnAttention::create({.dtype = DType::f32}, stream->handle());
  ASSERT_FALSE(f32.ok());
  EXPECT_EQ(f32.error().code, ErrorCode::unsupported);
}

}  // namespace
}  // namespace kiln::cuda

#endif  // KILN_HAS_CUDNN
