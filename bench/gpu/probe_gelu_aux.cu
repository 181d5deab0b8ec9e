// Probe: can FLUX's single-block linear1 (N = 9216 q/k/v + 12288 MLP columns, only the MLP's through tanh-GELU)
// stay one GEMM? cuBLASLt's GELU_AUX_BIAS epilogue writes gelu(x·wᵀ + b) to D and x·wᵀ + b (the GELU's input)
// to an aux matrix: the q/k/v columns would be read from aux, the MLP's from D. Prints
//   - the epilogue's semantics at a small shape: max |aux - (x·wᵀ + b)| and |D - gelu_tanh(x·wᵀ + b)|;
//   - at M = 4608, K = 3072 on random data, each form's best algorithm (every heuristic candidate timed, median
//     of 15): the two split GEMMs kiln runs today (N = 9216 bias, N = 12288 bias + GELU), alone, back to back and
//     on two streams at once; the merged GEMM with bias only (what torch.compile runs, GELU left to a kernel)
//     and with GELU_AUX_BIAS;
//   - linear2's GEMM (N = 3072, K = 15360) with its bias, and with the residual read as C (beta = 1).
// Build (here or on the GPU machine): nvcc -O2 -std=c++17 -arch=sm_90 bench/gpu/probe_gelu_aux.cu -lcublasLt
//   -o probe_gelu_aux
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "probe_check.h"

#define CHECK_LT(x)                                                                     \
  do {                                                                                  \
    cublasStatus_t s = (x);                                                             \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cublasLtGetStatusString(s)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

namespace {

enum class Epi { bias, gelu_bias, gelu_aux_bias };
const char* name(Epi e) { return e == Epi::bias ? "bias" : e == Epi::gelu_bias ? "bias+gelu" : "bias+gelu, aux"; }

cublasLtHandle_t lt;
void* workspace;
const size_t kWorkspace = 64 << 20;

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ b), row-major, as kiln's gemm.cpp: A = w (op T), B = x, D = yᵀ column-major.
struct Gemm {
  int m, n, k;
  Epi epi;
  const void *x, *w, *b;
  void *y, *aux;
  const void* residual = nullptr;  // C with beta = 1 where set
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, bl = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  int chosen = 0;

  void make() {
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
    cublasLtEpilogue_t e = epi == Epi::bias        ? CUBLASLT_EPILOGUE_BIAS
                           : epi == Epi::gelu_bias ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                   : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    int32_t bt = CUDA_R_16BF;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
    if (epi == Epi::gelu_aux_bias) {
      int64_t ld = n;
      CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
      CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    CHECK_LT(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&bl, CUDA_R_16BF, k, m, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace,
                                                  sizeof kWorkspace));
    algos.resize(32);
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, bl, c, c, pref, 32, algos.data(), &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) {
      std::printf("  heuristic for m=%d n=%d k=%d %s: %s\n", m, n, k, name(epi), cublasLtGetStatusString(s));
      found = 0;
    }
    algos.resize(found);
  }
  cublasStatus_t launch(int i, cudaStream_t stream, void* ws) const {
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(lt, desc, &one, w, a, x, bl, residual ? &one : &zero, residual ? residual : y, c, y, c,
                          &algos[i].algo, ws, kWorkspace, stream);
  }
};

cudaEvent_t e0, e1;

// Median of 15 timed calls (after 3 warm-ups) of fn on stream 0's timeline.
double median_us(const std::function<void()>& fn) {
  for (int w = 0; w < 3; ++w) fn();
  std::vector<float> times;
  for (int r = 0; r < 15; ++r) {
    CHECK_CUDA(cudaEventRecord(e0));
    fn();
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[7] * 1e3;
}

// Times every offered algorithm; keeps the best in g.chosen and returns its time.
double best_us(Gemm& g) {
  double best = 1e30;
  for (int i = 0; i < int(g.algos.size()); ++i) {
    if (g.launch(i, 0, workspace) != CUBLAS_STATUS_SUCCESS) continue;
    const double t = median_us([&] { g.launch(i, 0, workspace); });
    if (t < best) best = t, g.chosen = i;
  }
  const double tflops = 2.0 * g.m * g.n * g.k / (best * 1e-6) / 1e12;
  std::printf("m=%d n=%d k=%d %-15s%s %2zu algorithms, best %7.1f us (%.0f TFLOP/s, candidate %d)\n", g.m, g.n, g.k,
              name(g.epi), g.residual ? " + C" : "", g.algos.size(), best, tflops, g.chosen);
  return best;
}

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    p[i] = __float2bfloat16((float(h & 0xffff) / 65535.f - 0.5f) * scale);
  }
}

void* random_bf16(size_t n, unsigned seed, float scale) {
  void* p;
  CHECK_CUDA(cudaMalloc(&p, n * 2));
  fill<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

double gelu_tanh(double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

}  // namespace

int main() {
  CHECK_LT(cublasLtCreate(&lt));
  CHECK_CUDA(cudaMalloc(&workspace, kWorkspace));
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));

  {  // semantics
    const int m = 256, n = 384, k = 128;
    void* x = random_bf16(size_t(m) * k, 1, 4.f);
    void* w = random_bf16(size_t(n) * k, 2, 0.5f);
    void* b = random_bf16(n, 3, 2.f);
    void *y, *aux;
    CHECK_CUDA(cudaMalloc(&y, size_t(m) * n * 2));
    CHECK_CUDA(cudaMalloc(&aux, size_t(m) * n * 2));
    Gemm g{m, n, k, Epi::gelu_aux_bias, x, w, b, y, aux};
    g.make();
    std::vector<__nv_bfloat16> hx(size_t(m) * k), hw(size_t(n) * k), hb(n), hy(size_t(m) * n), ha(size_t(m) * n);
    CHECK_CUDA(cudaMemcpy(hx.data(), x, hx.size() * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hw.data(), w, hw.size() * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hb.data(), b, hb.size() * 2, cudaMemcpyDeviceToHost));
    std::printf("semantics m=%d n=%d k=%d bias+gelu, aux: %zu algorithms\n", m, n, k, g.algos.size());
    for (int i = 0; i < int(g.algos.size()); ++i) {
      CHECK_CUDA(cudaMemset(y, 0, hy.size() * 2));
      CHECK_CUDA(cudaMemset(aux, 0, ha.size() * 2));
      if (g.launch(i, 0, workspace) != CUBLAS_STATUS_SUCCESS) continue;
      CHECK_CUDA(cudaMemcpy(hy.data(), y, hy.size() * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(ha.data(), aux, ha.size() * 2, cudaMemcpyDeviceToHost));
      double err_aux = 0, err_d = 0, top = 0;
      for (int r = 0; r < m; ++r)
        for (int j = 0; j < n; ++j) {
          double pre = __bfloat162float(hb[j]);
          for (int kk = 0; kk < k; ++kk)
            pre += double(__bfloat162float(hx[size_t(r) * k + kk])) * __bfloat162float(hw[size_t(j) * k + kk]);
          err_aux = std::max(err_aux, std::fabs(__bfloat162float(ha[size_t(r) * n + j]) - pre));
          err_d = std::max(err_d, std::fabs(__bfloat162float(hy[size_t(r) * n + j]) - gelu_tanh(pre)));
          top = std::max(top, std::fabs(pre));
        }
      std::printf("  candidate %d: max |aux - (xw + b)| = %.4g, max |D - gelu_tanh(xw + b)| = %.4g (max |xw + b| %.3g)\n",
                  i, err_aux, err_d, top);
    }
  }

  const int m = 4608, k = 3072, n_qkv = 9216, n_mlp = 12288, n_all = n_qkv + n_mlp;
  void* x = random_bf16(size_t(m) * k, 11, 4.f);
  void* w = random_bf16(size_t(n_all) * k, 12, 0.05f);
  void* b = random_bf16(n_all, 13, 1.f);
  void *y, *aux, *y2;
  CHECK_CUDA(cudaMalloc(&y, size_t(m) * n_all * 2));
  CHECK_CUDA(cudaMalloc(&y2, size_t(m) * n_all * 2));
  CHECK_CUDA(cudaMalloc(&aux, size_t(m) * n_all * 2));
  void* ws2;
  CHECK_CUDA(cudaMalloc(&ws2, kWorkspace));
  const char* wp = static_cast<const char*>(w);
  const char* bp = static_cast<const char*>(b);
  Gemm qkv{m, n_qkv, k, Epi::bias, x, w, b, y, nullptr};
  Gemm mlp{m, n_mlp, k, Epi::gelu_bias, x, wp + size_t(n_qkv) * k * 2, bp + size_t(n_qkv) * 2, y2, nullptr};
  Gemm merged{m, n_all, k, Epi::bias, x, w, b, y, nullptr};
  Gemm merged_aux{m, n_all, k, Epi::gelu_aux_bias, x, w, b, y, aux};
  for (Gemm* g : {&qkv, &mlp, &merged, &merged_aux}) g->make();
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int round = 0; round < 2; ++round) {
    std::printf("round %d\n", round + 1);
    const double t_qkv = best_us(qkv), t_mlp = best_us(mlp);
    best_us(merged);
    best_us(merged_aux);
    const double serial = median_us([&] {
      qkv.launch(qkv.chosen, 0, workspace);
      mlp.launch(mlp.chosen, 0, workspace);
    });
    cudaStream_t s1, s2;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, j1, j2;
    CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&j1, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&j2, cudaEventDisableTiming));
    const double both = median_us([&] {
      CHECK_CUDA(cudaEventRecord(fork, 0));
      CHECK_CUDA(cudaStreamWaitEvent(s1, fork));
      CHECK_CUDA(cudaStreamWaitEvent(s2, fork));
      qkv.launch(qkv.chosen, s1, workspace);
      mlp.launch(mlp.chosen, s2, ws2);
      CHECK_CUDA(cudaEventRecord(j1, s1));
      CHECK_CUDA(cudaEventRecord(j2, s2));
      CHECK_CUDA(cudaStreamWaitEvent(0, j1));
      CHECK_CUDA(cudaStreamWaitEvent(0, j2));
    });
    std::printf("split, alone %.1f + %.1f = %.1f us; back to back %.1f us; on two streams %.1f us\n", t_qkv, t_mlp,
                t_qkv + t_mlp, serial, both);
  }
  {  // linear2's shape: does reading the residual as C (beta = 1) cost the GEMM anything?
    const int n2 = 3072, k2 = 15360;
    void* a2 = random_bf16(size_t(m) * k2, 21, 4.f);
    void* w2 = random_bf16(size_t(n2) * k2, 22, 0.02f);
    void* res = random_bf16(size_t(m) * n2, 23, 1.f);
    Gemm plain{m, n2, k2, Epi::bias, a2, w2, b, y, nullptr};
    Gemm with_c{m, n2, k2, Epi::bias, a2, w2, b, y2, nullptr, res};
    plain.make();
    with_c.make();
    for (int round = 0; round < 2; ++round) best_us(plain), best_us(with_c);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  return 0;
}
