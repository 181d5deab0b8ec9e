// Fused attention through cuDNN's SDPA (the cuDNN frontend graph API): o = softmax(q·kᵀ·scale [+causal]) · v,
// bf16/f16 in and out, f32 softmax. This is the provider PyTorch's default attention uses on Hopper; a kiln
// kernel can replace it where one measures faster. Tensors are addressed through strides, so q/k/v can be read
// straight out of a merged QKV GEMM's output ([batch, tokens, 3, heads, head_dim]) without a transpose copy.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "util/result.h"

namespace kiln::cuda {

struct AttentionDesc {
  int64_t batch = 1, heads = 1, kv_heads = 0, q_tokens = 1, kv_tokens = 1, head_dim = 64;  // kv_heads 0: heads
  DType dtype = DType::bf16;
  bool causal = false;
  double scale = 0;  // 0: 1/sqrt(head_dim)
  // kv_heads < heads is grouped-query attention (heads a multiple of kv_heads).
  // Element strides of q, k, v, o in [batch, heads, tokens, head_dim] order; empty: dense [b, h, s, d].
  std::array<int64_t, 4> q_stride{}, k_stride{}, v_stride{}, o_stride{};

  std::string str() const;
  // Dense [batch, tokens, heads, head_dim] strides (token-major, as a projection GEMM writes them).
  static std::array<int64_t, 4> token_major(int64_t heads, int64_t tokens, int64_t head_dim);
  static std::array<int64_t, 4> head_major(int64_t heads, int64_t tokens, int64_t head_dim);
};

class CudnnAttention {
 public:
  // Builds cuDNN's execution plans for `desc`; unsupported: no engine for these shapes on this device.
  static Result<CudnnAttention> create(const AttentionDesc& desc, CUstream stream);
  CudnnAttention(CudnnAttention&&) noexcept;
  ~CudnnAttention();

  int64_t plan_count() const;
  int64_t workspace_bytes() const;
  // Runs the plan at `plan` (-1: cuDNN's heuristic choice). `workspace` has at least workspace_bytes().
  Status run(const void* q, const void* k, const void* v, void* o, void* workspace, int64_t plan = -1) const;

  static std::string version();

 private:
  struct State;
  explicit CudnnAttention(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln::cuda
