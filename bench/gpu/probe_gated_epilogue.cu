// Probe: can cuBLASLt compute FLUX's gated residual update out = res + gate ⊙ (x·wᵀ + b) in one GEMM on this
// GPU, and with which semantics? Per-output-feature alpha (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST),
// beta = 1 with C = res, and the bias epilogue. Prints, for bf16 operands:
//   - how many algorithms the heuristic offers for the mode;
//   - the largest error against the two candidate semantics, alpha⊙(A·B) + C + bias and alpha⊙(A·B + bias) + C;
//   - at FLUX shapes, the best of the offered algorithms against the plain bias GEMM.
// Build and run (on the GPU machine): nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/probe_gated_epilogue.cu -lcublasLt
//   -o /tmp/probe && /tmp/probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "probe_check.h"

#define CHECK_LT(x)                                                                     \
  do {                                                                                  \
    cublasStatus_t s = (x);                                                             \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cublasLtGetStatusString(s)); \
      return false;                                                                     \
    }                                                                                   \
  } while (0)

struct Gemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
};

// y[m, n] = x[m, k] · w[n, k]ᵀ, row-major, as kiln's gemm.cpp: A = w (op T), B = x, D = yᵀ column-major.
bool make(Gemm& g, int m, int n, int k, bool gated, bool bias, cublasLtHandle_t lt, size_t workspace) {
  CHECK_LT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
  if (gated) {
    cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
    CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode));
  }
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias) {
    int32_t bt = CUDA_R_16BF;
    CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, k, n, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, k, m, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16BF, n, m, n));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                sizeof workspace));
  g.algos.resize(8);
  int found = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.a, g.b, g.c, g.c, pref, 8, g.algos.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::printf("  heuristic: %s\n", cublasLtGetStatusString(s));
    found = 0;
  }
  g.algos.resize(found);
  return true;
}

float bf(__nv_bfloat16 v) { return __bfloat162float(v); }

int main() {
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  const size_t workspace = 64 << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, workspace));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);

  // ---- semantics, small shape ----
  {
    const int m = 256, n = 256, k = 128;
    std::vector<__nv_bfloat16> x(m * k), w(n * k), res(m * n), b(n), y(m * n);
    std::vector<float> alpha(n);
    for (auto& v : x) v = __float2bfloat16(nd(rng));
    for (auto& v : w) v = __float2bfloat16(nd(rng) * 0.1f);
    for (auto& v : res) v = __float2bfloat16(nd(rng));
    for (auto& v : b) v = __float2bfloat16(nd(rng));
    for (auto& v : alpha) v = nd(rng);
    __nv_bfloat16 *dx, *dw, *dres, *db, *dy;
    float* dalpha;
    CHECK_CUDA(cudaMalloc(&dx, x.size() * 2));
    CHECK_CUDA(cudaMalloc(&dw, w.size() * 2));
    CHECK_CUDA(cudaMalloc(&dres, res.size() * 2));
    CHECK_CUDA(cudaMalloc(&db, b.size() * 2));
    CHECK_CUDA(cudaMalloc(&dy, y.size() * 2));
    CHECK_CUDA(cudaMalloc(&dalpha, n * 4));
    CHECK_CUDA(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dres, res.data(), res.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dalpha, alpha.data(), n * 4, cudaMemcpyHostToDevice));
    for (int bias = 0; bias < 2; ++bias) {
      Gemm g;
      if (!make(g, m, n, k, true, bias, lt, workspace)) return 1;
      std::printf("semantics m=%d n=%d k=%d bias=%d: %zu algorithms\n", m, n, k, bias, g.algos.size());
      if (bias) cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &db, sizeof db);
      const float beta = 1.f;
      for (size_t i = 0; i < g.algos.size(); ++i) {
        CHECK_CUDA(cudaMemset(dy, 0, y.size() * 2));
        cublasStatus_t s = cublasLtMatmul(lt, g.desc, dalpha, dw, g.a, dx, g.b, &beta, dres, g.c, dy, g.c,
                                          &g.algos[i].algo, ws, workspace, 0);
        CHECK_CUDA(cudaDeviceSynchronize());
        if (s != CUBLAS_STATUS_SUCCESS) {
          std::printf("  algo %zu: %s\n", i, cublasLtGetStatusString(s));
          continue;
        }
        CHECK_CUDA(cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost));
        double err_after = 0, err_before = 0, scale = 0;
        for (int r = 0; r < m; ++r) {
          for (int j = 0; j < n; ++j) {
            double acc = 0;
            for (int kk = 0; kk < k; ++kk) acc += double(bf(x[r * k + kk])) * bf(w[j * k + kk]);
            const double bj = bias ? bf(b[j]) : 0.0, rr = bf(res[r * n + j]);
            const double after = alpha[j] * acc + rr + bj, before = alpha[j] * (acc + bj) + rr;
            const double got = bf(y[r * n + j]);
            err_after = std::max(err_after, std::fabs(got - after));
            err_before = std::max(err_before, std::fabs(got - before));
            scale = std::max(scale, std::fabs(after));
          }
        }
        std::printf("  algo %zu: max |err| vs alpha*AB + C + bias = %.4g, vs alpha*(AB + bias) + C = %.4g (max |out| %.3g)\n",
                    i, err_after, err_before, scale);
      }
    }
  }

  // ---- timing, FLUX shapes ----
  const int shapes[][3] = {{4096, 3072, 3072}, {4096, 3072, 12288}, {512, 3072, 3072}, {512, 3072, 12288}};
  for (const auto& s : shapes) {
    const int m = s[0], n = s[1], k = s[2];
    void *dx, *dw, *dres, *db, *dy, *dalpha;
    CHECK_CUDA(cudaMalloc(&dx, size_t(m) * k * 2));
    CHECK_CUDA(cudaMalloc(&dw, size_t(n) * k * 2));
    CHECK_CUDA(cudaMalloc(&dres, size_t(m) * n * 2));
    CHECK_CUDA(cudaMalloc(&dy, size_t(m) * n * 2));
    CHECK_CUDA(cudaMalloc(&db, n * 2));
    CHECK_CUDA(cudaMalloc(&dalpha, n * 4));
    CHECK_CUDA(cudaMemset(dx, 0, size_t(m) * k * 2));
    CHECK_CUDA(cudaMemset(dw, 0, size_t(n) * k * 2));
    CHECK_CUDA(cudaMemset(dres, 0, size_t(m) * n * 2));
    CHECK_CUDA(cudaMemset(db, 0, n * 2));
    CHECK_CUDA(cudaMemset(dalpha, 0, n * 4));
    for (int gated = 0; gated < 2; ++gated) {
      Gemm g;
      if (!make(g, m, n, k, gated, true, lt, workspace)) return 1;
      cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &db, sizeof db);
      const float one = 1.f, zero = 0.f;
      const void* alpha = gated ? dalpha : static_cast<const void*>(&one);
      const float* beta = gated ? &one : &zero;
      double best = 1e30;
      int best_i = -1;
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      for (size_t i = 0; i < g.algos.size(); ++i) {
        auto launch = [&] {
          return cublasLtMatmul(lt, g.desc, alpha, dw, g.a, dx, g.b, beta, gated ? dres : dy, g.c, dy, g.c,
                                &g.algos[i].algo, ws, workspace, 0);
        };
        if (launch() != CUBLAS_STATUS_SUCCESS) continue;
        for (int w = 0; w < 3; ++w) launch();
        std::vector<float> times;
        for (int r = 0; r < 20; ++r) {
          cudaEventRecord(e0);
          launch();
          cudaEventRecord(e1);
          cudaEventSynchronize(e1);
          float ms;
          cudaEventElapsedTime(&ms, e0, e1);
          times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        if (times[10] < best) best = times[10], best_i = int(i);
      }
      std::printf("m=%d n=%d k=%d %s: %zu algorithms, best median %.1f us (algo %d)\n", m, n, k,
                  gated ? "gated residual (alpha vector, beta=1, bias)" : "bias", g.algos.size(), best * 1e3, best_i);
    }
    cudaFree(dx), cudaFree(dw), cudaFree(dres), cudaFree(dy), cudaFree(db), cudaFree(dalpha);
  }
  return 0;
}
