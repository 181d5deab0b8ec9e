#include "cuda/attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kiln::cuda {

namespace fe = cudnn_frontend;

namespace {

Status fe_check(fe::error_t status, const std::string& what) {
  if (status.is_good()) return ok_status();
  return make_error(ErrorCode::device_error, fmt::format("cuDNN {}: {}", what, status.get_message()));
}

std::vector<int64_t> as_vector(const std::array<int64_t, 4>& a) { return {a[0], a[1], a[2], a[3]}; }

}  // namespace

std::array<int64_t, 4> AttentionDesc::token_major(int64_t heads, int64_t tokens, int64_t head_dim) {
  return {tokens * heads * head_dim, head_dim, heads * head_dim, 1};
}

std::array<int64_t, 4> AttentionDesc::head_major(int64_t heads, int64_t tokens, int64_t head_dim) {
  return {heads * tokens * head_dim, tokens * head_dim, head_dim, 1};
}

std::string AttentionDesc::str() const {
  return fmt::format("attention b={} h={} sq={} skv={} d={} {}{}", batch, heads, q_tokens, kv_tokens, head_dim,
                     dtype_name(dtype), causal ? " causal" : "");
}

struct CudnnAttention::State {
  AttentionDesc desc;
  cudnnHandle_t handle = nullptr;
  fe::graph::Graph graph;
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v, o;
  int64_t workspace = 0;
  ~State() {
    if (handle) cudnnDestroy(handle);
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudnnAttention::CudnnAttention(CudnnAttention&&) noexcept = default;
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::version() {
  const size_t v = cudnnGetVersion();  // e.g. 91400
  return fmt::format("{}.{}.{} (frontend {})", v / 10000, (v / 100) % 100, v % 100, CUDNN_FRONTEND_VERSION);
}

Result<CudnnAttention> CudnnAttention::create(const AttentionDesc& input, CUstream stream) {
  AttentionDesc desc = input;
  if (desc.batch <= 0 || desc.heads <= 0 || desc.q_tokens <= 0 || desc.kv_tokens <= 0 || desc.head_dim <= 0)
    return make_error(ErrorCode::shape_error, fmt::format("{}: every extent must be positive", desc.str()));
  if (desc.dtype != DType::bf16 && desc.dtype != DType::f16)
    return make_error(ErrorCode::unsupported, fmt::format("{}: cuDNN attention takes bf16 or f16", desc.str()));
  if (desc.kv_heads == 0) desc.kv_heads = desc.heads;
  if (desc.kv_heads < 0 || desc.heads % desc.kv_heads != 0)
    return make_error(ErrorCode::shape_error, fmt::format("{}: {} heads is not a multiple of {} kv heads", desc.str(),
                                                          desc.heads, desc.kv_heads));
  const std::array<int64_t, 4> none{};
  if (desc.q_stride == none) desc.q_stride = AttentionDesc::head_major(desc.heads, desc.q_tokens, desc.head_dim);
  if (desc.k_stride == none) desc.k_stride = AttentionDesc::head_major(desc.kv_heads, desc.kv_tokens, desc.head_dim);
  if (desc.v_stride == none) desc.v_stride = AttentionDesc::head_major(desc.kv_heads, desc.kv_tokens, desc.head_dim);
  if (desc.o_stride == none) desc.o_stride = AttentionDesc::head_major(desc.heads, desc.q_tokens, desc.head_dim);
  if (desc.scale == 0) desc.scale = 1.0 / std::sqrt(static_cast<double>(desc.head_dim));

  auto state = std::make_unique<State>();
  state->desc = desc;
  cudnnStatus_t created = cudnnCreate(&state->handle);
  if (created != CUDNN_STATUS_SUCCESS)
    return make_error(ErrorCode::device_error, fmt::format("cudnnCreate: {}", cudnnGetErrorString(created)));
  cudnnSetStream(state->handle, reinterpret_cast<cudaStream_t>(stream));

  const fe::DataType_t io = desc.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  fe::graph::Graph& graph = state->graph;
  graph.set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(
      fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t heads, int64_t tokens, const std::array<int64_t, 4>& stride) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_dim({desc.batch, heads, tokens, desc.head_dim})
                            .set_stride(as_vector(stride)));
  };
  state->q = tensor("q", desc.heads, desc.q_tokens, desc.q_stride);
  state->k = tensor("k", desc.kv_heads, desc.kv_tokens, desc.k_stride);
  state->v = tensor("v", desc.kv_heads, desc.kv_tokens, desc.v_stride);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa")
                     .set_generate_stats(false)
                     .set_attn_scale(static_cast<float>(desc.scale))
                     .set_causal_mask(desc.causal);
  auto [o, stats] = graph.sdpa(state->q, state->k, state->v, options);
  (void)stats;
  o->set_output(true)
      .set_dim({desc.batch, desc.heads, desc.q_tokens, desc.head_dim})
      .set_stride(as_vector(desc.o_stride));
  state->o = o;

  const std::string what = desc.str();
  KILN_TRY(fe_check(graph.validate(), what + ": validate"));
  KILN_TRY(fe_check(graph.build_operation_graph(state->handle), what + ": build_operation_graph"));
  KILN_TRY(fe_check(graph.create_execution_plans({fe::HeurMode_t::A}), what + ": create_execution_plans"));
  fe::error_t support = graph.check_support();
  if (support.is_bad())
    return make_error(ErrorCode::unsupported, fmt::format("cuDNN has no engine for {}: {}", what, support.get_message()));
  KILN_TRY(fe_check(graph.build_plans(fe::BuildPlanPolicy_t::ALL), what + ": build_plans"));
  for (int64_t plan = 0; plan < graph.get_execution_plan_count(); ++plan) {  // room for any plan
    int64_t bytes = 0;
    KILN_TRY(fe_check(graph.get_workspace_size_plan_at_index(plan, bytes), what + ": get_workspace_size"));
    state->workspace = std::max(state->workspace, bytes);
  }
  return CudnnAttention(std::move(state));
}

int64_t CudnnAttention::plan_count() const { return state_->graph.get_execution_plan_count(); }

int64_t CudnnAttention::workspace_bytes() const { return state_->workspace; }

Status CudnnAttention::run(const void* q, const void* k, const void* v, void* o, void* workspace, int64_t plan) const {
  std::unordered_map<std::shared_ptr<fe::graph::Tensor_attributes>, void*> pack = {
      {state_->q, const_cast<void*>(q)}, {state_->k, const_cast<void*>(k)}, {state_->v, const_cast<void*>(v)},
      {state_->o, o}};
  if (plan < 0) return fe_check(state_->graph.execute(state_->handle, pack, workspace), state_->desc.str() + ": execute");
  return fe_check(state_->graph.execute_plan_at_index(state_->handle, pack, workspace, plan),
                  state_->desc.str() + fmt::format(": execute plan {}", plan));
}

}  // namespace kiln::cuda
