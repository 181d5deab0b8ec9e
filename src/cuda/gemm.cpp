#include "cuda/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <set>
#include <utility>

#include "cuda/driver.h"
#include "cuda/gemv.h"
#include "cuda/timer.h"

namespace kiln::cuda {

namespace {

Status lt_check(cublasStatus_t status, const std::string& call) {
  if (status == CUBLAS_STATUS_SUCCESS) return ok_status();
  return make_error(ErrorCode::device_error, fmt::format("{}: {} ({})", call, cublasLtGetStatusString(status),
                                                         cublasLtGetStatusName(status)));
}

Result<cudaDataType_t> cuda_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: return CUDA_R_32F;
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    default: return make_error(ErrorCode::unsupported, fmt::format("cuBLASLt GEMM: no {} support", dtype_name(dtype)));
  }
}

// The descriptors of one GEMM: matmul description and the three layouts. Pointers that live in the
// description (bias, scales) are set per launch by `bind`.
struct Descriptors {
  cublasLtMatmulDesc_t matmul = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Descriptors() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (matmul) cublasLtMatmulDescDestroy(matmul);
  }
};

template <class T>
Status set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value,
                     const char* name) {
  return lt_check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value),
                  fmt::format("cublasLtMatmulDescSetAttribute({})", name));
}

Status validate(const GemmDesc& desc) {
  if ((desc.x_ld > 0 && desc.x_ld < desc.k) || (desc.y_ld > 0 && desc.y_ld < desc.n) || (desc.y_ld > 0 && desc.residual))
    return make_error(ErrorCode::invalid_argument, fmt::format("GEMM {}: row strides below the row, or a pitched y with a residual", desc.str()));
  if (desc.m <= 0 || desc.n <= 0 || desc.k <= 0)
    return make_error(ErrorCode::shape_error, fmt::format("GEMM {}: every extent must be positive", desc.str()));
  const bool fp8 = desc.input == DType::f8e4m3;
  if (!fp8 && desc.input != DType::bf16 && desc.input != DType::f16)
    return make_error(ErrorCode::unsupported, fmt::format("GEMM {}: inputs must be bf16, f16 or f8e4m3", desc.str()));
  if (fp8 != (desc.scaling != GemmScaling::none))
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("GEMM {}: FP8 inputs need a scaling mode and only FP8 inputs take one", desc.str()));
  if (fp8 && desc.k % 16 != 0)
    return make_error(ErrorCode::unsupported, fmt::format("GEMM {}: FP8 needs k divisible by 16", desc.str()));
  if (desc.output != DType::bf16 && desc.output != DType::f32 && desc.output != DType::f16)
    return make_error(ErrorCode::unsupported, fmt::format("GEMM {}: output must be bf16, f16 or f32", desc.str()));
  return ok_status();
}

Status make_descriptors(const GemmDesc& desc, Descriptors& out) {
  KILN_TRY(validate(desc));
  KILN_ASSIGN_OR_RETURN(cudaDataType_t in_type, cuda_type(desc.input));
  KILN_ASSIGN_OR_RETURN(cudaDataType_t out_type, cuda_type(desc.output));
  KILN_TRY(lt_check(cublasLtMatmulDescCreate(&out.matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_TRANSA, transpose, "TRANSA"));
  KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_TRANSB, none, "TRANSB"));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (desc.epilogue == GemmEpilogue::bias) epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (desc.epilogue == GemmEpilogue::bias_gelu) epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE"));
  if (desc.epilogue != GemmEpilogue::none) {
    KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(out_type),
                           "BIAS_DATA_TYPE"));
  }
  if (desc.scale) {
    const cublasLtPointerMode_t mode =
        desc.residual ? CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST : CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_POINTER_MODE, mode, "POINTER_MODE"));
  }
  if (desc.input == DType::f8e4m3) {
    const int8_t fast = desc.fast_accumulation ? 1 : 0;
    KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast, "FAST_ACCUM"));
    // A = w, B = x (see gemm.h).
    int32_t w_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, x_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    if (desc.scaling == GemmScaling::channel) w_mode = x_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (desc.scaling == GemmScaling::tensor_x_channel_w) w_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (desc.scaling == GemmScaling::block) {
      w_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      x_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    }
    if (desc.scaling != GemmScaling::tensor) {
      KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, w_mode, "A_SCALE_MODE"));
      KILN_TRY(set_attribute(out.matmul, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, x_mode, "B_SCALE_MODE"));
    }
  }
  const uint64_t m = desc.m, n = desc.n, k = desc.k;
  KILN_TRY(lt_check(cublasLtMatrixLayoutCreate(&out.a, in_type, k, n, k), "cublasLtMatrixLayoutCreate(w)"));
  const uint64_t x_ld = desc.x_ld > 0 ? static_cast<uint64_t>(desc.x_ld) : k;
  const uint64_t y_ld = desc.y_ld > 0 ? static_cast<uint64_t>(desc.y_ld) : n;
  KILN_TRY(lt_check(cublasLtMatrixLayoutCreate(&out.b, in_type, k, m, x_ld), "cublasLtMatrixLayoutCreate(x)"));
  KILN_TRY(lt_check(cublasLtMatrixLayoutCreate(&out.d, out_type, n, m, y_ld), "cublasLtMatrixLayoutCreate(y)"));
  return ok_status();
}

Status bind(const GemmDesc& desc, const GemmArgs& args, Descriptors& d) {
  if (desc.epilogue != GemmEpilogue::none) {
    if (args.bias == nullptr)
      return make_error(ErrorCode::invalid_argument, fmt::format("GEMM {}: the epilogue needs a bias", desc.str()));
    KILN_TRY(set_attribute(d.matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias, "BIAS_POINTER"));
  }
  if ((desc.scale && args.scale == nullptr) || (desc.residual && args.residual == nullptr))
    return make_error(ErrorCode::invalid_argument, fmt::format("GEMM {}: the epilogue needs its scale and residual", desc.str()));
  if (desc.input == DType::f8e4m3) {
    if (args.x_scale == nullptr || args.w_scale == nullptr)
      return make_error(ErrorCode::invalid_argument, fmt::format("GEMM {}: FP8 needs x and w scales", desc.str()));
    KILN_TRY(set_attribute(d.matmul, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, args.w_scale, "A_SCALE_POINTER"));
    KILN_TRY(set_attribute(d.matmul, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, args.x_scale, "B_SCALE_POINTER"));
  }
  return ok_status();
}

// One configuration attribute of an algorithm, read at the size cuBLASLt stores it (it refuses any other
// size), widened to int64; -1 where the algorithm has no such attribute.
int64_t config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS) return -1;
  uint64_t value = 0;
  size_t written = 0;
  if (size == 0 || size > sizeof value ||
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, size, &written) != CUBLAS_STATUS_SUCCESS)
    return -1;
  // Attributes are 16- to 32-bit, signed only where they cannot be negative in use; the low bytes hold the
  // value (little-endian).
  if (size == 2) return static_cast<int64_t>(static_cast<uint16_t>(value));
  if (size == 4) return static_cast<int64_t>(static_cast<uint32_t>(value));
  return static_cast<int64_t>(value);
}

// Sets one configuration attribute at the size cuBLASLt stores it; false where the algorithm refuses it.
bool set_config_value(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute, int64_t value) {
  size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS) return false;
  if (size == 2) {
    const uint16_t v = static_cast<uint16_t>(value);
    return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &v, sizeof v) == CUBLAS_STATUS_SUCCESS;
  }
  if (size == 4) {
    const uint32_t v = static_cast<uint32_t>(value);
    return cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &v, sizeof v) == CUBLAS_STATUS_SUCCESS;
  }
  return false;
}

// The configuration attributes that tell two algorithms apart, in a fixed order.
constexpr cublasLtMatmulAlgoConfigAttributes_t kConfigAttributes[] = {
    CUBLASLT_ALGO_CONFIG_ID,           CUBLASLT_ALGO_CONFIG_TILE_ID,        CUBLASLT_ALGO_CONFIG_STAGES_ID,
    CUBLASLT_ALGO_CONFIG_SPLITK_NUM,   CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
    CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};

std::vector<int64_t> config_of(const cublasLtMatmulAlgo_t& algo) {
  std::vector<int64_t> values;
  for (auto attribute : kConfigAttributes) values.push_back(config_value(algo, attribute));
  return values;
}

// "id=66 tile=209 stages=35 ..." from config_of's values.
std::string describe_config(const std::vector<int64_t>& v) {
  return fmt::format("id={} tile={} stages={} splitk={} reduction={} swizzle={} custom={} inner={} cluster={}", v[0], v[1],
                     v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
}

std::string describe(const cublasLtMatmulAlgo_t& algo) { return describe_config(config_of(algo)); }

// A capability that is an array of uint32 (tile ids, stages ids); empty where the algorithm has none.
std::vector<int64_t> capability_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attribute) {
  size_t size = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS || size == 0)
    return {};
  std::vector<uint32_t> raw(size / sizeof(uint32_t));
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, raw.data(), raw.size() * sizeof(uint32_t), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return {};
  return std::vector<int64_t>(raw.begin(), raw.end());
}

// A capability that is one 32-bit value (swizzling support, custom option max); 0 where unreadable.
int64_t capability_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attribute) {
  int32_t value = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, &value, sizeof value, &written) != CUBLAS_STATUS_SUCCESS) return 0;
  return value;
}

// The thread-block cluster shapes tried around a Hopper configuration: none (auto) and the small ones along
// either grid axis. Larger clusters are refused by the check or measure slower at these sizes.
constexpr int64_t kClusterShapes[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                      CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                      CUBLASLT_CLUSTER_SHAPE_1x4x1};

}  // namespace

std::string GemmDesc::str() const {
  const char* epi = epilogue == GemmEpilogue::none ? "" : epilogue == GemmEpilogue::bias ? " bias" : " bias+gelu";
  const char* scale = scaling == GemmScaling::none      ? ""
                      : scaling == GemmScaling::tensor  ? " scales=tensor"
                      : scaling == GemmScaling::channel ? " scales=channel"
                      : scaling == GemmScaling::block   ? " scales=block"
                                                        : " scales=tensor-x,channel-w";
  return fmt::format("m={} n={} k={} {}->{}{}{}{}{}{}{}{}", m, n, k, dtype_name(input), dtype_name(output), epi, scale,
                     fast_accumulation ? " fast-accum" : "", this->scale ? " feature-scale" : "", residual ? " residual" : "",
                     x_ld > 0 ? fmt::format(" x_ld={}", x_ld) : "", y_ld > 0 ? fmt::format(" y_ld={}", y_ld) : "");
}

struct BlasLt::State {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  std::optional<StreamTimer> timer;  // benchmark's, made on first use
  DeviceBuffer l2_flush;             // benchmark's, made on first use: twice the L2, written before each timed launch
  std::optional<GemvKernels> gemv;   // compiled when a one-row GEMM's candidates are first listed
  bool gemv_tried = false;           // once: kernels that failed to compile are not offered, nor tried again
  ~State() {
    if (handle) cublasLtDestroy(handle);
  }
};

BlasLt::BlasLt(std::unique_ptr<State> state) : state_(std::move(state)) {}
BlasLt::BlasLt(BlasLt&&) noexcept = default;
BlasLt& BlasLt::operator=(BlasLt&&) noexcept = default;
BlasLt::~BlasLt() = default;

Result<BlasLt> BlasLt::create(int64_t workspace_bytes) {
  auto state = std::make_unique<State>();
  KILN_TRY(lt_check(cublasLtCreate(&state->handle), "cublasLtCreate"));
  KILN_ASSIGN_OR_RETURN(state->workspace, DeviceBuffer::allocate(workspace_bytes));
  return BlasLt(std::move(state));
}

std::string BlasLt::version() {
  const size_t v = cublasLtGetVersion();  // e.g. 130000 = 13.0.0
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

Result<std::vector<GemmAlgorithm>> BlasLt::algorithms(const GemmDesc& desc, int max_count, AlgorithmSearch search) const {
  Descriptors d;
  KILN_TRY(make_descriptors(desc, d));
  // The vector and block scaling modes need their scale pointers (and epilogues their bias) set before the
  // heuristic will answer; it never dereferences them, so any device address stands in for the real ones.
  GemmArgs placeholder;
  placeholder.bias = placeholder.residual = state_->workspace.data();
  placeholder.x_scale = placeholder.w_scale = placeholder.scale = static_cast<const float*>(state_->workspace.data());
  KILN_TRY(bind(desc, placeholder, d));
  cublasLtMatmulPreference_t preference = nullptr;
  KILN_TRY(lt_check(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate"));
  struct Destroy {
    cublasLtMatmulPreference_t p;
    ~Destroy() { cublasLtMatmulPreferenceDestroy(p); }
  } destroy{preference};
  const uint64_t workspace = static_cast<uint64_t>(state_->workspace.bytes());
  KILN_TRY(lt_check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace, sizeof workspace),
                    "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"));
  const int limit = std::max(1, max_count);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::min(limit, kHeuristicCount)));
  int returned = 0;
  KILN_TRY(lt_check(cublasLtMatmulAlgoGetHeuristic(state_->handle, d.matmul, d.a, d.b, d.d, d.d, preference,
                                                   static_cast<int>(results.size()), results.data(), &returned),
                    fmt::format("cublasLtMatmulAlgoGetHeuristic({})", desc.str())));
  std::vector<GemmAlgorithm> algorithms;
  std::set<std::vector<int64_t>> seen;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    algorithms.push_back({results[i].algo, results[i].workspaceSize, i, describe(results[i].algo)});
    seen.insert(config_of(results[i].algo));
  }
  if (algorithms.empty())
    return make_error(ErrorCode::unsupported, fmt::format("cuBLASLt has no algorithm for GEMM {}", desc.str()));
  if (search == AlgorithmSearch::heuristic) return algorithms;

  // Neighbours: a heuristic configuration with some attributes changed, kept where cuBLASLt's own check accepts
  // it for this GEMM and its workspace fits, in rings of growing distance, so that a cap keeps the nearest.
  const size_t parents = algorithms.size();
  if (GemvKernels::fits(desc)) {
    if (!state_->gemv_tried) {
      state_->gemv_tried = true;
      auto compiled = GemvKernels::create();
      if (compiled.ok()) state_->gemv.emplace(std::move(compiled).value());
    }
    for (int v = 0; state_->gemv && v < GemvKernels::kVariants; ++v)
      algorithms.push_back({cublasLtMatmulAlgo_t{}, 0, -1, GemvKernels::describe(v), v});
  }
  // `changes` applied to the p-th answer; a configuration cuBLASLt refuses to set is skipped.
  auto vary = [&](size_t p, std::initializer_list<std::pair<cublasLtMatmulAlgoConfigAttributes_t, int64_t>> changes) {
    if (algorithms.size() >= static_cast<size_t>(limit)) return;
    cublasLtMatmulAlgo_t algo = algorithms[p].algo;
    for (const auto& [attribute, value] : changes)
      if (!set_config_value(algo, attribute, value)) return;
    std::vector<int64_t> config = config_of(algo);
    if (!seen.insert(config).second) return;
    cublasLtMatmulHeuristicResult_t checked{};
    if (cublasLtMatmulAlgoCheck(state_->handle, d.matmul, d.a, d.b, d.d, d.d, &algo, &checked) != CUBLAS_STATUS_SUCCESS ||
        checked.workspaceSize > workspace)
      return;
    algorithms.push_back({algo, checked.workspaceSize, -1, fmt::format("{} (near #{})", describe_config(config), p)});
  };
  // Ring 1, every parent: the attributes with few values (cluster shape, custom option, CTA swizzle), one at a
  // time. On FLUX's shapes the heuristic's answers differ from each other mostly in these.
  for (size_t p = 0; p < parents; ++p) {
    const cublasLtMatmulAlgo_t parent = algorithms[p].algo;  // a copy: vary() grows the vector
    for (int64_t cluster : kClusterShapes) vary(p, {{CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster}});
    const int64_t last_option = std::min<int64_t>(capability_value(parent, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX), 8);
    for (int64_t option = 0; option <= last_option; ++option) vary(p, {{CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, option}});
    if (capability_value(parent, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT))
      for (int64_t swizzle : {0, 1}) vary(p, {{CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle}});
  }
  // Ring 2, every parent: split K in 2, 3 or 4 with each reduction scheme it offers (a short M leaves SMs idle
  // otherwise: 512 tokens x 9216 in 128 x 256 tiles is 144 tiles on 132 SMs).
  for (size_t p = 0; p < parents; ++p) {
    const cublasLtMatmulAlgo_t parent = algorithms[p].algo;  // a copy: vary() grows the vector
    if (!capability_value(parent, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT)) continue;
    const int64_t schemes = capability_value(parent, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    for (int64_t splits : {2, 3, 4})
      for (int64_t scheme : {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                             CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE})
        if (schemes & scheme)
          vary(p, {{CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits}, {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme}});
  }
  // Ring 3, the heuristic's first two: every tile, then every stages count, the algorithm's capabilities list.
  for (size_t p = 0; p < std::min<size_t>(parents, 2); ++p) {
    for (int64_t tile : capability_list(algorithms[p].algo, CUBLASLT_ALGO_CAP_TILE_IDS)) vary(p, {{CUBLASLT_ALGO_CONFIG_TILE_ID, tile}});
    for (int64_t stages : capability_list(algorithms[p].algo, CUBLASLT_ALGO_CAP_STAGES_IDS))
      vary(p, {{CUBLASLT_ALGO_CONFIG_STAGES_ID, stages}});
  }
  // Ring 4, the heuristic's first: tile and stages together (a larger tile often needs fewer stages to fit).
  for (int64_t tile : capability_list(algorithms[0].algo, CUBLASLT_ALGO_CAP_TILE_IDS))
    for (int64_t stages : capability_list(algorithms[0].algo, CUBLASLT_ALGO_CAP_STAGES_IDS))
      vary(0, {{CUBLASLT_ALGO_CONFIG_TILE_ID, tile}, {CUBLASLT_ALGO_CONFIG_STAGES_ID, stages}});
  return algorithms;
}

namespace {

// One cublasLtMatmul of bound descriptors: α is 1 or the per-feature scale (device), β is 1 with the residual as
// C, else 0 (C is then D, never read).
Status matmul(cublasLtHandle_t handle, const DeviceBuffer& workspace, const GemmDesc& desc, const Descriptors& d,
              const GemmAlgorithm& algorithm, const GemmArgs& args, CUstream stream) {
  const float one = 1.0f, zero = 0.0f;
  const void* alpha = desc.scale ? static_cast<const void*>(args.scale) : &one;
  const float* beta = desc.residual ? &one : &zero;
  const void* c = desc.residual ? args.residual : args.y;
  return lt_check(cublasLtMatmul(handle, d.matmul, alpha, args.w, d.a, args.x, d.b, beta, c, d.d, args.y, d.d,
                                 &algorithm.algo, workspace.data(), static_cast<size_t>(workspace.bytes()),
                                 reinterpret_cast<cudaStream_t>(stream)),
                  fmt::format("cublasLtMatmul({})", desc.str()));
}

}  // namespace

Status BlasLt::run(const GemmDesc& desc, const GemmAlgorithm& algorithm, const GemmArgs& args,
                   CUstream stream) const {
  if (algorithm.gemv_variant >= 0) return run_gemv(desc, algorithm, args, stream);
  Descriptors d;
  KILN_TRY(make_descriptors(desc, d));
  KILN_TRY(bind(desc, args, d));
  return matmul(state_->handle, state_->workspace, desc, d, algorithm, args, stream);
}

Status BlasLt::run_gemv(const GemmDesc& desc, const GemmAlgorithm& algorithm, const GemmArgs& args,
                        CUstream stream) const {
  if (!state_->gemv)
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("GEMM {}: {} was not offered by this BlasLt", desc.str(), algorithm.description));
  return state_->gemv->run(desc, algorithm.gemv_variant, args, stream);
}

Result<bool> BlasLt::agrees(const GemmDesc& desc, const GemmAlgorithm& reference, const GemmAlgorithm& candidate,
                           const GemmArgs& args, CUstream stream) const {
  if (residual_is_output(desc, args))
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("GEMM {}: the residual is the output, so two algorithms cannot be compared", desc.str()));
  // y's rows with their pitch: a pitched y's span holds other tensors' columns, unchanged between the runs.
  const int64_t pitch = desc.y_ld > 0 ? desc.y_ld : desc.n;
  const int64_t count = (desc.m - 1) * pitch + desc.n;
  const size_t bytes = static_cast<size_t>(count) * dtype_size(desc.output);
  std::vector<uint8_t> want(bytes), got(bytes);
  for (auto [algorithm, host] : {std::pair{&reference, &want}, std::pair{&candidate, &got}}) {
    KILN_TRY(run(desc, *algorithm, args, stream));
    KILN_TRY(synchronize(stream));
    KILN_TRY(copy_to_host(host->data(), args.y, bytes));
  }
  // Decoded a chunk at a time (a FLUX GEMM's output is 10^8 elements), in one pass: |c - r| <= |r| 2^-7 + s for
  // every element is max(|c - r| - |r| 2^-7) <= s, s = 2^-10 max|r| known only at the end.
  constexpr int64_t kChunk = 1 << 20;
  std::vector<double> a(kChunk), b(kChunk);
  const size_t element = dtype_size(desc.output);
  double scale = 0, excess = 0;
  for (int64_t start = 0; start < count; start += kChunk) {
    const int64_t n = std::min(kChunk, count - start);
    decode_elements(desc.output, want.data() + start * element, a.data(), n);
    decode_elements(desc.output, got.data() + start * element, b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
      if (std::isnan(a[i])) continue;
      if (std::isfinite(a[i])) scale = std::max(scale, std::abs(a[i]));
      const double difference = std::abs(b[i] - a[i]), relative = std::abs(a[i]) * 0x1p-7;
      if (std::isnan(difference)) return false;              // infinities of opposite signs, or equal ones
      if (!std::isinf(relative)) excess = std::max(excess, difference - relative);  // an infinite r bounds anything
    }
  }
  return excess <= scale * 0x1p-10;
}

Result<std::vector<double>> BlasLt::benchmark(const GemmDesc& desc, const std::vector<GemmAlgorithm>& algorithms,
                                              const std::vector<GemmArgs>& rotation, CUstream stream,
                                              int reps) const {
  if (rotation.empty()) return make_error(ErrorCode::invalid_argument, "GEMM benchmark needs at least one argument set");
  Descriptors d;
  KILN_TRY(make_descriptors(desc, d));
  KILN_ASSIGN_OR_RETURN(StreamTimer * timer, timer_in(state_->timer));
  if (state_->l2_flush.bytes() == 0) {  // a plan that never chooses an algorithm never holds the buffer
    KILN_ASSIGN_OR_RETURN(const int64_t l2_bytes, current_device_l2_bytes());
    KILN_ASSIGN_OR_RETURN(state_->l2_flush, DeviceBuffer::allocate(std::max<int64_t>(2 * l2_bytes, 1 << 20)));
  }
  size_t next = 0;
  auto launch_one = [&](const GemmAlgorithm& algorithm) -> Status {
    const GemmArgs& args = rotation[next++ % rotation.size()];
    if (algorithm.gemv_variant >= 0) return run_gemv(desc, algorithm, args, stream);
    KILN_TRY(bind(desc, args, d));
    return matmul(state_->handle, state_->workspace, desc, d, algorithm, args, stream);
  };
  auto flush_l2 = [&] { return state_->l2_flush.fill_words_async(0, stream); };
  std::vector<double> medians;
  for (const GemmAlgorithm& algorithm : algorithms) {
    KILN_ASSIGN_OR_RETURN(std::vector<double> samples,
                          timer->samples_ms(stream, [&] { return launch_one(algorithm); }, 3, reps, flush_l2));
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    medians.push_back(samples[samples.size() / 2]);
  }
  return medians;
}

}  // namespace kiln::cuda
