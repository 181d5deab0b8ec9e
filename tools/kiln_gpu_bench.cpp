// kiln-gpu-bench: the GPU figures the CUDA backend is measured against, in one run on one machine.
//   - copy bandwidth (driver device-to-device copy, and a 16-byte-vector copy kernel): the memory floor;
//   - every cuBLASLt algorithm for each GEMM of a FLUX.1-dev block (bf16 and FP8 e4m3 with each scaling
//     mode), so that "within 3% of the best algorithm" and "FP8 vs bf16" are read off one table, and cuDNN's
//     attention at FLUX's joint shape in each layout; --no-library leaves these two tables out (a call that
//     is only after the plans or the schedule search spends its device time there).
//   - with --tune-plan SPEC: every distinct generated kernel of the model's fused plan searched over its CUDA
//     schedule space (each candidate checked against the reference, then timed), its best time against the
//     copy bandwidth, and the plan rebuilt with the winners, timed as deployed (CUDA graph).
//   - with --plan SPEC: the model's unfused and fused plans timed (stream and CUDA graph), each generated
//     kernel printed with its group (kiln_kN is what ncu names it); --fused-only skips the unfused plan, and
//     --lanes N builds the fused plan (and its graph: defer-columns) for N lanes, and
//     --disable-pass NAME leaves a pass out of it (a before/after of one pass in one build). The
//     fused plan's steps are profiled (each alone; memory-bound kernels beside a copy of as many bytes), its
//     GEMMs' chosen algorithms audited, and with --profile-window one run sits between cuProfilerStart/Stop
//     (for `ncu --profile-from-start off`: every kernel of one run, as it runs in the plan).
// Writes JSON (bench/gpu/run.sh keeps it under bench/results/). Benchmarks, not tests.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#ifdef KILN_HAS_CUDNN
#include "cuda/attention.h"
#endif
#include "backend/plan.h"
#include "cuda/cuda_backend.h"
#include "cuda/driver.h"
#include "cuda/gemm.h"
#include "cuda/nvrtc.h"
#include "cuda/timer.h"
#include "models/weights.h"
#include "models/zoo.h"
#include "kernel/kernel_task.h"
#include "kernel/schedule.h"
#include "passes/pipeline.h"
#include "passes/staging.h"
#include "profile/profile.h"
#include "tune/measure_on_backend.h"
#include "tune/task.h"
#include "kernel_trace.h"

using namespace kiln;
using namespace kiln::cuda;
using nlohmann::json;

namespace {

const char* kKernels = R"(
__device__ unsigned hash(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16; return x;
}
// bf16 values uniform in about [-1, 1).
extern "C" __global__ void fill_bf16(unsigned short* out, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float v = (hash((unsigned)i ^ seed) & 0xffffff) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = (unsigned short)(__float_as_uint(v) >> 16);
  }
}
// e4m3 values with exponents 2^-3..2^3 and random sign/mantissa: finite, no NaN.
extern "C" __global__ void fill_e4m3(unsigned char* out, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = hash((unsigned)i ^ seed);
    out[i] = (unsigned char)((h & 0x80) | ((4 + (h >> 8) % 7) << 3) | ((h >> 16) & 7));
  }
}
extern "C" __global__ void fill_f32(float* out, long long n, float value) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = value;
}
extern "C" __global__ void copy16(const uint4* __restrict__ in, uint4* __restrict__ out, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = in[i];
}
)";

[[noreturn]] void die(const Error& error) {
  std::fprintf(stderr, "kiln-gpu-bench: %s\n", error.message.c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> result) {
  if (!result.ok()) die(result.error());
  return std::move(result).value();
}

void must(Status status) {
  if (!status.ok()) die(status.error());
}

struct Kernels {
  Module module;
  CUfunction fill_bf16, fill_e4m3, fill_f32, copy16;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of `reps` runs of `work` between events on `stream`, after 3 warm-up runs, with the host's launch
// latency kept out (cuda/timer.h).
double time_ms(CUstream stream, int reps, const std::function<Status()>& work) {
  // Made once in main's context and never destroyed: the driver may be gone by static destruction.
  static StreamTimer* timer = new StreamTimer(must(StreamTimer::create()));
  return median(must(timer->samples_ms(stream, work, 3, reps)));
}

LaunchShape grid_for(const DeviceInfo& info) {
  return {.grid_x = static_cast<unsigned>(info.multiprocessors * 8), .block_x = 256};
}

json bandwidth(const DeviceInfo& info, const Kernels& k, CUstream stream) {
  const int64_t bytes = 2ll << 30;  // 2 GiB each way: far past the 50 MB L2
  DeviceBuffer a = must(DeviceBuffer::allocate(bytes)), b = must(DeviceBuffer::allocate(bytes));
  must(a.fill_bytes(1));
  const double driver_ms = time_ms(stream, 10, [&] {
    return copy_async(b.ptr(), a.ptr(), bytes, stream);
  });
  CUdeviceptr in = a.ptr(), out = b.ptr();
  long long n = bytes / 16;
  const double kernel_ms =
      time_ms(stream, 10, [&] { return launch(k.copy16, grid_for(info), stream, {&in, &out, &n}); });
  auto tbps = [&](double ms) { return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e12; };
  std::printf("copy bandwidth: driver %.3f TB/s, copy16 kernel %.3f TB/s (2 GiB read + written)\n",
              tbps(driver_ms), tbps(kernel_ms));
  // The copy at the sizes of FLUX's memory-bound kernels (bytes read + written), repeated back to back as a
  // plan step is when replayed alone: what a kernel of that size can reach, ramp and tail included. The copy16
  // kernel grid-strided at 8 CTAs per SM and with one 16-byte vector per thread; the better of the two counts.
  json sizes = json::array();
  for (double mb : {6.3, 12.6, 50.3, 59.0, 75.5, 100.7}) {
    const int64_t each = static_cast<int64_t>(mb * 1e6 / 2) / 16 * 16;
    long long vectors = each / 16;
    const LaunchShape one_each{.grid_x = static_cast<unsigned>((vectors + 255) / 256), .block_x = 256};
    const double strided_ms = time_ms(stream, 20, [&] { return launch(k.copy16, grid_for(info), stream, {&in, &out, &vectors}); });
    const double flat_ms = time_ms(stream, 20, [&] { return launch(k.copy16, one_each, stream, {&in, &out, &vectors}); });
    const double driver_size_ms = time_ms(stream, 20, [&] { return copy_async(b.ptr(), a.ptr(), each, stream); });
    const double best_ms = std::min(strided_ms, flat_ms);
    const double tb = 2.0 * static_cast<double>(each) / (best_ms * 1e-3) / 1e12;
    std::printf("copy of %6.1f MB (read + written): copy16 %.2f us (grid-stride) / %.2f us (one vector per thread), "
                "driver %.2f us: best %.3f TB/s = %.1f%% of the 2 GiB driver copy\n",
                mb, strided_ms * 1e3, flat_ms * 1e3, driver_size_ms * 1e3, tb, 100 * tb / tbps(driver_ms));
    sizes.push_back({{"bytes", 2 * each}, {"copy16_strided_ms", strided_ms}, {"copy16_flat_ms", flat_ms},
                     {"driver_copy_ms", driver_size_ms}, {"best_tbps", tb}, {"of_2gib_driver_copy", tb / tbps(driver_ms)}});
  }
  return {{"bytes_each_way", bytes},
          {"driver_copy_ms", driver_ms},
          {"driver_copy_tbps", tbps(driver_ms)},
          {"copy16_kernel_ms", kernel_ms},
          {"copy16_kernel_tbps", tbps(kernel_ms)},
          {"by_size", sizes}};
}

void fill(const Kernels& k, const DeviceInfo& info, CUstream stream, DType dtype, const DeviceBuffer& buffer,
          unsigned seed) {
  CUdeviceptr p = buffer.ptr();
  long long n = buffer.bytes() / static_cast<long long>(dtype_size(dtype));
  if (dtype == DType::bf16) must(launch(k.fill_bf16, grid_for(info), stream, {&p, &n, &seed}));
  else if (dtype == DType::f8e4m3) must(launch(k.fill_e4m3, grid_for(info), stream, {&p, &n, &seed}));
}

struct GemmShape {
  const char* name;
  int64_t m, n, k;
};

json bench_gemm(const BlasLt& blas, const Kernels& k, const DeviceInfo& info, CUstream stream, const GemmShape& shape,
                DType input, GemmScaling scaling, GemmEpilogue epilogue, int reps, bool fast_accumulation = false) {
  GemmDesc desc{.m = shape.m, .n = shape.n, .k = shape.k, .input = input, .output = DType::bf16,
                .epilogue = epilogue, .scaling = scaling, .fast_accumulation = fast_accumulation};
  json row = {{"shape", shape.name}, {"desc", desc.str()}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k}};
  const auto search_started = std::chrono::steady_clock::now();
  auto algorithms = blas.algorithms(desc, 160, cuda::AlgorithmSearch::neighbours);
  const double search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - search_started).count();
  if (!algorithms.ok()) {
    row["error"] = algorithms.error().message;
    std::printf("%-28s %-48s unsupported: %s\n", shape.name, desc.str().c_str(), algorithms.error().message.c_str());
    return row;
  }
  // Enough copies of x and w that one rotation exceeds 4x the L2, so weights stream from memory.
  const int64_t x_bytes = shape.m * shape.k * static_cast<int64_t>(dtype_size(input));
  const int64_t w_bytes = shape.n * shape.k * static_cast<int64_t>(dtype_size(input));
  const int copies = static_cast<int>(std::clamp<int64_t>(4 * info.l2_bytes / (x_bytes + w_bytes) + 1, 1, 16));
  std::vector<DeviceBuffer> owned;
  auto scales_of = [&](int64_t count) {
    DeviceBuffer s = must(DeviceBuffer::allocate(count * 4));
    CUdeviceptr p = s.ptr();
    long long n = count;
    float value = 0.0625f;
    must(launch(k.fill_f32, grid_for(info), stream, {&p, &n, &value}));
    owned.push_back(std::move(s));
    return static_cast<const float*>(owned.back().data());
  };
  const int64_t kb = (shape.k + 127) / 128;
  DeviceBuffer bias = must(DeviceBuffer::allocate(shape.n * 2));
  fill(k, info, stream, DType::bf16, bias, 99);
  DeviceBuffer y = must(DeviceBuffer::allocate(shape.m * shape.n * 2));
  std::vector<GemmArgs> rotation;
  owned.reserve(4 * copies + 4);
  for (int c = 0; c < copies; ++c) {
    owned.push_back(must(DeviceBuffer::allocate(x_bytes)));
    fill(k, info, stream, input, owned.back(), 2 * c + 1);
    const void* x = owned.back().data();
    owned.push_back(must(DeviceBuffer::allocate(w_bytes)));
    fill(k, info, stream, input, owned.back(), 2 * c + 2);
    GemmArgs args{.x = x, .w = owned.back().data(), .y = y.data()};
    if (epilogue != GemmEpilogue::none) args.bias = bias.data();
    if (scaling == GemmScaling::tensor) args.x_scale = scales_of(1), args.w_scale = scales_of(1);
    if (scaling == GemmScaling::channel) args.x_scale = scales_of(shape.m), args.w_scale = scales_of(shape.n);
    if (scaling == GemmScaling::block)
      args.x_scale = scales_of(shape.m * kb), args.w_scale = scales_of(((shape.n + 127) / 128) * kb);
    rotation.push_back(args);
  }
  must(synchronize(stream));
  auto times = blas.benchmark(desc, *algorithms, rotation, stream, reps);
  if (!times.ok()) {
    row["error"] = times.error().message;
    return row;
  }
  const double flops = 2.0 * shape.m * shape.n * shape.k;
  // The fastest candidate among the first `end` whose output agrees with the heuristic's first answer
  // (BlasLt::agrees: cuBLASLt's own check passes configurations that compute something else); `rejected`
  // collects those passed over. Each candidate is compared once (`verdicts`), whichever search asks.
  std::vector<size_t> rejected;
  std::map<size_t, bool> verdicts;
  auto fastest_agreeing = [&](size_t end) {
    std::vector<size_t> order(end);
    for (size_t i = 0; i < end; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*times)[a] < (*times)[b]; });
    for (size_t i : order) {
      if (i == 0) return i;
      auto [verdict, fresh] = verdicts.try_emplace(i, false);
      if (fresh) {
        auto agrees = blas.agrees(desc, (*algorithms)[0], (*algorithms)[i], rotation[0], stream);
        verdict->second = agrees.ok() && *agrees;
        if (!verdict->second) rejected.push_back(i);
      }
      if (verdict->second) return i;
    }
    return size_t{0};
  };
  const size_t best = fastest_agreeing(times->size());
  // The heuristic's own answers come first (rank >= 0); the rest are their neighbours (gemm.h).
  size_t heuristic_count = 0;
  while (heuristic_count < algorithms->size() && (*algorithms)[heuristic_count].heuristic_rank >= 0) ++heuristic_count;
  const size_t heuristic_best = fastest_agreeing(heuristic_count);
  json algos = json::array();
  for (size_t i = 0; i < times->size(); ++i)
    algos.push_back({{"rank", (*algorithms)[i].heuristic_rank}, {"config", (*algorithms)[i].description},
                     {"ms", (*times)[i]}, {"tflops", flops / ((*times)[i] * 1e-3) / 1e12},
                     {"disagrees", std::find(rejected.begin(), rejected.end(), i) != rejected.end()}});
  row["algorithms"] = algos;
  row["heuristic_ms"] = (*times)[0];
  row["best_ms"] = (*times)[best];
  row["best_rank"] = best;
  row["best_tflops"] = flops / ((*times)[best] * 1e-3) / 1e12;
  row["heuristic_over_best"] = (*times)[0] / (*times)[best];
  row["disagreeing_candidates"] = rejected.size();
  row["heuristic_candidates"] = heuristic_count;
  row["heuristic_best_ms"] = (*times)[heuristic_best];
  row["heuristic_best_tflops"] = flops / ((*times)[heuristic_best] * 1e-3) / 1e12;
  row["search_seconds"] = search_seconds;
  row["rotation_copies"] = copies;
  std::printf("%-28s %-48s %3zu algos (%zu heuristic, %.2f s)  heuristic #0 %.4f ms, its best %.4f ms  best %.4f ms (#%zu, %.0f TFLOP/s)  "
              "#0/best %.3f, heuristic best/best %.3f; %zu faster disagreed\n",
              shape.name, desc.str().c_str(), times->size(), heuristic_count, search_seconds, (*times)[0], (*times)[heuristic_best],
              (*times)[best], best, row["best_tflops"].get<double>(), (*times)[0] / (*times)[best],
              (*times)[heuristic_best] / (*times)[best], rejected.size());
  for (size_t i : rejected) std::printf("    disagrees with #0: %s\n", (*algorithms)[i].description.c_str());
  if (best >= heuristic_count) std::printf("    best: %s\n", (*algorithms)[best].description.c_str());
  return row;
}

#ifdef KILN_HAS_CUDNN
// cuDNN attention at FLUX's joint shape: every plan cuDNN builds, in the head-major layout PyTorch's SDPA
// gets, read straight from the token-major layout the QKV projection writes, and in the mix a fused plan
// gives it (q and k head-major from their norm + RoPE kernels, v and o token-major), and all token-major.
enum class AttentionLayout { head_major, qkv, plan_mix, token_major };

json bench_attention(const Kernels& k, const DeviceInfo& info, CUstream stream, AttentionLayout layout, int reps) {
  AttentionDesc desc{.batch = 1, .heads = 24, .q_tokens = 4608, .kv_tokens = 4608, .head_dim = 128};
  const bool interleaved = layout == AttentionLayout::qkv;
  const auto tm = AttentionDesc::token_major(desc.heads, desc.q_tokens, desc.head_dim);
  if (interleaved) {
    // q, k, v interleaved as the merged QKV GEMM writes them: [b, s, 3, h, d].
    const int64_t row = 3 * desc.heads * desc.head_dim;
    desc.q_stride = desc.k_stride = desc.v_stride = {desc.q_tokens * row, desc.head_dim, row, 1};
    desc.o_stride = tm;
  } else if (layout == AttentionLayout::plan_mix) {
    desc.v_stride = desc.o_stride = tm;
  } else if (layout == AttentionLayout::token_major) {
    desc.q_stride = desc.k_stride = desc.v_stride = desc.o_stride = tm;
  }
  const char* names[] = {"[b,h,s,d]", "qkv [b,s,3,h,d] -> o [b,s,h,d]", "q,k [b,h,s,d]; v,o [b,s,h,d]", "[b,s,h,d]"};
  json row = {{"desc", desc.str()}, {"layout", names[static_cast<int>(layout)]}};
  auto attention = CudnnAttention::create(desc, stream);
  if (!attention.ok()) {
    row["error"] = attention.error().message;
    std::printf("attention %s: %s\n", desc.str().c_str(), attention.error().message.c_str());
    return row;
  }
  const int64_t elements = desc.batch * desc.heads * desc.q_tokens * desc.head_dim;
  DeviceBuffer qkv = must(DeviceBuffer::allocate(3 * elements * 2));
  DeviceBuffer o = must(DeviceBuffer::allocate(elements * 2));
  DeviceBuffer workspace = must(DeviceBuffer::allocate(std::max<int64_t>(attention->workspace_bytes(), 1)));
  fill(k, info, stream, DType::bf16, qkv, 7);
  const char* base = static_cast<const char*>(qkv.data());
  const void *q = base, *kk, *v;
  if (interleaved) {
    kk = base + desc.heads * desc.head_dim * 2;
    v = base + 2 * desc.heads * desc.head_dim * 2;
  } else {
    kk = base + elements * 2;
    v = base + 2 * elements * 2;
  }
  const double flops = 4.0 * desc.batch * desc.heads * desc.q_tokens * desc.kv_tokens * desc.head_dim;
  json plans = json::array();
  double best = 1e30, heuristic = 0;
  for (int64_t plan = -1; plan < attention->plan_count(); ++plan) {
    if (!attention->run(q, kk, v, o.data(), workspace.data(), plan).ok()) continue;
    const double ms = time_ms(stream, reps, [&] { return attention->run(q, kk, v, o.data(), workspace.data(), plan); });
    if (plan < 0) heuristic = ms;
    best = std::min(best, ms);
    plans.push_back({{"plan", plan}, {"ms", ms}, {"tflops", flops / (ms * 1e-3) / 1e12}});
  }
  row["plans"] = plans;
  row["heuristic_ms"] = heuristic;
  row["best_ms"] = best;
  row["best_tflops"] = flops / (best * 1e-3) / 1e12;
  std::printf("attention %-44s %-32s %zu plans  heuristic %.4f ms  best %.4f ms (%.0f TFLOP/s)\n", desc.str().c_str(),
              row["layout"].get<std::string>().c_str(), plans.size(), heuristic, best, row["best_tflops"].get<double>());
  return row;
}
#endif

// Each GEMM's choice judged inside the whole plan instead of alone: for every shape, the chosen algorithm, the
// audit's finalists (its three fastest others that may run) and cuBLASLt's first answer are forced in turn
// (cuda::force_gemm_choice), the plan captured again as a CUDA graph with each, and the graphs timed in
// interleaved rounds (each sample the median of 5 replays). The plan's time with each candidate, next to the
// candidate's time alone, says whether a choice made alone holds inside the plan, where the clocks (the H200's
// power cap), L2 contents and neighbours differ. The backend's own choice is restored after each shape.
json gemm_choices_in_plan(backend::Backend& gpu, backend::Plan& plan, const std::vector<cuda::GemmAudit>& audits) {
  constexpr int kRounds = 8;
  json out = json::array();
  for (const cuda::GemmAudit& a : audits) {
    if (a.candidates < 2) continue;
    // The chosen candidate, the audit's 3 fastest others, and cuBLASLt's first answer (what the choice buys over
    // the library's own pick, kiln's GEMV kernel included: gemv.h).
    std::vector<int> tried = a.finalists;
    if (std::find(tried.begin(), tried.end(), 0) == tried.end()) tried.push_back(0);
    std::vector<int> kept;
    std::vector<std::function<Status()>> replays;
    json refused = json::array();
    for (int c : tried) {
      const Status forced = cuda::force_gemm_choice(gpu, a.desc, c);
      if (!forced.ok()) {
        refused.push_back({{"candidate", c}, {"why", forced.error().message}});
        continue;
      }
      auto replay = gpu.capture([&] { return plan.execute(); });
      if (!replay.ok()) {
        refused.push_back({{"candidate", c}, {"why", replay.error().message}});
        continue;
      }
      kept.push_back(c);
      replays.push_back(std::move(replay).value());
    }
    must(cuda::force_gemm_choice(gpu, a.desc, a.chosen));
    std::vector<std::vector<double>> samples(replays.size());
    for (int r = 0; r < kRounds; ++r) {
      for (size_t j = 0; j < replays.size(); ++j) {
        const size_t i = (j + static_cast<size_t>(r)) % replays.size();  // each candidate in each position
        samples[i].push_back(must(gpu.time(replays[i], {1, 5})).median_seconds * 1e3);
      }
    }
    json rows = json::array();
    double chosen_plan = 0, best_plan = 1e300, first_plan = 0;
    int best = a.chosen;
    for (size_t i = 0; i < kept.size(); ++i) {
      const double plan_ms = median(samples[i]);
      if (kept[i] == a.chosen) chosen_plan = plan_ms;
      if (kept[i] == 0) first_plan = plan_ms;
      if (plan_ms < best_plan) best_plan = plan_ms, best = kept[i];
      rows.push_back({{"candidate", kept[i]}, {"alone_ms", a.candidate_ms[static_cast<size_t>(kept[i])]}, {"plan_ms", plan_ms}});
    }
    if (chosen_plan <= 0) continue;
    std::printf("  in the plan: GEMM %-52s chosen #%d plan %.4f ms; fastest in the plan #%d %.4f ms (%.3fx), alone "
                "%.4f vs %.4f ms\n",
                a.desc.substr(0, 52).c_str(), a.chosen, chosen_plan, best, best_plan, chosen_plan / best_plan,
                a.candidate_ms[static_cast<size_t>(a.chosen)], a.candidate_ms[static_cast<size_t>(best)]);
    if (first_plan > 0)
      std::printf("    chosen %s; cuBLASLt's first answer in the plan %.4f ms (%.3fx the chosen)\n",
                  a.chosen_config.c_str(), first_plan, first_plan / chosen_plan);
    out.push_back({{"desc", a.desc}, {"chosen", a.chosen}, {"chosen_config", a.chosen_config}, {"best_in_plan", best},
                   {"first_answer_plan_ms", first_plan}, {"chosen_plan_ms", chosen_plan},
                   {"best_plan_ms", best_plan}, {"chosen_over_best_in_plan", chosen_plan / best_plan},
                   {"candidates", rows}, {"refused", refused}});
  }
  return out;
}

// A zoo model's plan on the CUDA backend, end to end (no CUDA graph yet): kiln's full pipeline against the
// same graph with fusion turned off (one generated kernel per primitive), both timed with CUDA events.
// What a fused plan's steps take: each step replayed alone (kernel_seconds) and, for memory-bound kernels, a
// device copy of as many bytes timed the same way (profile/profile.h); the sum of the steps next to the plan's
// CUDA-graph time; every GEMM's chosen algorithm against the best of its candidates timed again
// (audit_gemm_choices). With `profile_window`, one more synchronized run of the plan sits between
// cuProfilerStart and cuProfilerStop, so that `ncu --profile-from-start off` sees exactly one run's kernels.
json plan_details(backend::Backend& gpu, backend::Plan& plan, double graph_ms, bool profile_window) {
  json details;
  auto p = profile::profile_plan(plan, gpu, {2, 5});
  if (!p.ok()) return details["error"] = p.error().message, details;
  double kernel_sum = 0;
  json steps = json::array();
  for (const profile::StepProfile& sp : p->steps) {
    // Load-time steps (weight-only work) run once, not in the plan's replayed graph.
    const Binding stage = plan.steps()[sp.index].stage;
    if (stage != Binding::weight) kernel_sum += sp.kernel_seconds;
    steps.push_back({{"label", sp.label}, {"kind", sp.kind}, {"stage", binding_name(stage)}, {"bytes", sp.roofline.bytes},
                     {"flops", sp.roofline.flops}, {"kernel_seconds", sp.kernel_seconds}, {"copy_seconds", sp.copy_seconds}});
    if (stage == Binding::weight) continue;
    if (sp.copy_seconds > 0 && sp.roofline.bytes > 4e6)
      std::printf("  memory-bound %-44s %6.1f MB  %6.2f us  same-size copy %6.2f us  = %5.1f%% of the copy, %5.1f%% of %.2f TB/s\n",
                  sp.label.substr(0, 44).c_str(), sp.roofline.bytes / 1e6, sp.kernel_seconds * 1e6, sp.copy_seconds * 1e6,
                  100 * sp.copy_seconds / sp.kernel_seconds,
                  100 * sp.roofline.bytes / sp.kernel_seconds / p->device.bandwidth_bytes_per_second,
                  p->device.bandwidth_bytes_per_second / 1e12);
  }
  details["steps"] = steps;
  // What each memory-bound step's copy_seconds is (profile/profile.h): since session 42 a copy kernel of one 16-byte
  // vector a thread (Backend::copy) captured and replayed as the step is; before, the driver's copy.
  details["step_copy"] = "copy16 kernel, replayed as the step";
  details["steps_kernel_seconds_sum"] = kernel_sum;
  details["cuda_graph_ms"] = graph_ms;
  std::printf("  per-call steps replayed alone: sum %.4f ms; the plan as a CUDA graph %.4f ms (%.3fx the sum)\n", kernel_sum * 1e3,
              graph_ms, graph_ms / (kernel_sum * 1e3));
  json audits = json::array();
  auto audit = cuda::audit_gemm_choices(gpu, 10);
  if (!audit.ok()) {
    details["gemm_audit_error"] = audit.error().message;
  } else {
    for (const cuda::GemmAudit& a : *audit) {
      // The best of the heuristic's own answers (the first `heuristic` candidates): what choosing among them
      // alone would have reached.
      const auto heuristic_end = a.candidate_ms.begin() + std::max(1, a.heuristic);
      const double heuristic_best = *std::min_element(a.candidate_ms.begin(), heuristic_end);
      const double chosen_ms = a.candidate_ms[static_cast<size_t>(a.chosen)];
      audits.push_back({{"desc", a.desc}, {"candidates", a.candidates}, {"heuristic_candidates", a.heuristic},
                        {"chosen", a.chosen}, {"chosen_config", a.chosen_config}, {"best", a.best},
                        {"disagreements", a.disagreements}, {"candidate_ms", a.candidate_ms},
                        {"finalists", a.finalists}, {"finalist_ms", a.finalist_ms}, {"refused", a.refused},
                        {"chosen_over_best", a.chosen_over_best()},
                        {"screen_chosen_over_best", a.screen_chosen_over_best()},
                        {"best_heuristic_over_chosen", heuristic_best / chosen_ms},
                        {"heuristic_first_over_chosen", a.candidate_ms[0] / chosen_ms}});
      std::printf("  GEMM %-60s chosen #%d %.4f ms of %d (%d heuristic), first pass %.3fx its fastest; head to head "
                  "with #%s: %.3fx the best (#%d); heuristic's first %.3fx, its best %.3fx the chosen; %d disagreed\n",
                  a.desc.substr(0, 60).c_str(), a.chosen, chosen_ms, a.candidates, a.heuristic, a.screen_chosen_over_best(),
                  fmt::format("{}", fmt::join(a.finalists.begin() + 1, a.finalists.end(), ",#")).c_str(),
                  a.chosen_over_best(), a.best, a.candidate_ms[0] / chosen_ms, heuristic_best / chosen_ms, a.disagreements);
    }
  }
  details["gemm_audit"] = audits;
  must(plan.execute());  // the audit overwrote GEMM outputs
  if (audit.ok()) details["gemm_in_plan"] = gemm_choices_in_plan(gpu, plan, *audit);
  must(plan.execute());  // the profile window below runs on whole inputs again
  must(gpu.synchronize());
  if (profile_window) {
    must(profiler_start());
    must(plan.execute());
    must(gpu.synchronize());
    must(profiler_stop());
  }
  return details;
}

// The plan's kernels as they ran inside the CUDA graph (CUPTI, tools/kernel_trace.h), over 20 replays each
// synchronized: per replay, the span from the first kernel's start to the last one's end, the time with some
// kernel running (busy) and the kernels' durations added; the medians over the replays. The event-timed graph
// over the busy time is issue 7's "end-to-end time within 5% of the sum of its kernels' times": what is left is
// launch gaps and the graph's own start, with every kernel at the clocks and cache state it has in the plan.
json trace_replays(backend::Backend& gpu, const std::function<Status()>& replay, double graph_ms) {
  constexpr int kRuns = 20;
  for (int i = 0; i < 3; ++i) must(replay());
  must(gpu.synchronize());
  // Each replay also timed with events (Backend::time, one sample): the graph's own time in the same runs the
  // kernels are traced in. Under the H200's power cap the clocks move with the recent load (1320-1755 MHz in
  // session 21), so a graph timed earlier is not comparable with kernels traced later.
  std::vector<double> event_ms;
  auto traced = tools::trace_kernels([&]() -> Status {
    for (int i = 0; i < kRuns; ++i) {
      KILN_ASSIGN_OR_RETURN(backend::Timing t, gpu.time(replay, {0, 1}));
      event_ms.push_back(t.median_seconds * 1e3);
    }
    return gpu.synchronize();
  });
  if (!traced.ok()) return json{{"error", traced.error().message}};
  auto runs = tools::split_runs(*traced, kRuns);
  if (!runs.ok()) return json{{"error", runs.error().message}};
  std::vector<double> span, busy, sum, over;
  for (size_t i = 0; i < runs->size(); ++i) {
    const tools::KernelSpan s = tools::kernel_span((*runs)[i]);
    span.push_back(s.span_seconds * 1e3), busy.push_back(s.busy_seconds * 1e3), sum.push_back(s.sum_seconds * 1e3);
    over.push_back(event_ms[i] / (s.busy_seconds * 1e3));
  }
  json kernels = json::array();
  for (const tools::TracedKernel& k : runs->front()) {
    kernels.push_back({{"name", k.name.substr(0, 120)}, {"stream", k.stream},
                       {"start_us", (k.start_ns - runs->front().front().start_ns) * 1e-3},
                       {"us", (k.end_ns - k.start_ns) * 1e-3}});
  }
  const json out{{"runs", kRuns},
                 {"kernels_per_run", runs->front().size()},
                 {"span_ms", median(span)},
                 {"busy_ms", median(busy)},
                 {"sum_ms", median(sum)},
                 {"cuda_graph_ms", median(event_ms)},  // the same replays, timed with events
                 {"graph_timed_before_ms", graph_ms},
                 {"graph_over_busy", median(over)},
                 {"first_run", kernels}};
  std::printf("  inside the CUDA graph (CUPTI, median of %d replays): %zu kernels, busy %.4f ms, span %.4f ms, "
              "durations added %.4f ms; the same replays timed with events %.4f ms: %.3fx the busy time\n",
              kRuns, runs->front().size(), out["busy_ms"].get<double>(), out["span_ms"].get<double>(),
              out["sum_ms"].get<double>(), out["cuda_graph_ms"].get<double>(), out["graph_over_busy"].get<double>());
  return out;
}

// How a plan's time moves once the device has been idle: 2 s of sleep, then 400 replays timed one by one with
// events (as the peer script times its calls, which it starts after compiling, from an idle GPU). Medians over
// successive windows of calls show how quickly the H200 reaches its power cap; the median of calls 6-35 is
// the peer's own protocol (5 warm-up calls, then 30).
json time_from_idle(backend::Backend& gpu, const std::function<Status()>& replay) {
  must(gpu.synchronize());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::vector<double> ms;
  for (int i = 0; i < 400; ++i) ms.push_back(must(gpu.time(replay, {0, 1})).median_seconds * 1e3);
  auto window = [&](size_t from, size_t to) {
    return median(std::vector<double>(ms.begin() + static_cast<long>(from), ms.begin() + static_cast<long>(to)));
  };
  json out{{"peer_protocol_ms", window(5, 35)}, {"calls_1_5_ms", window(0, 5)}, {"calls_36_100_ms", window(35, 100)},
           {"calls_101_200_ms", window(100, 200)}, {"calls_201_400_ms", window(200, 400)}};
  std::printf("  from an idle device: calls 1-5 %.4f ms, 6-35 (the peer's protocol) %.4f ms, 36-100 %.4f ms, 101-200 %.4f ms, "
              "201-400 %.4f ms\n", out["calls_1_5_ms"].get<double>(), out["peer_protocol_ms"].get<double>(),
              out["calls_36_100_ms"].get<double>(), out["calls_101_200_ms"].get<double>(), out["calls_201_400_ms"].get<double>());
  return out;
}

// `lanes`: the fused plan's (PlanOptions::lanes), its graph built for them (PipelineOptions::lanes).
json bench_plan(const std::string& spec, int reps, bool fused_only, bool profile_window, int lanes,
                const std::set<std::string>& disabled) {
  json row = {{"model", spec}};
  auto model = models::build_zoo_model(spec);
  if (!model.ok()) return row["error"] = model.error().message, row;
  std::unique_ptr<backend::Backend> owned = must(backend::make_backend("cuda"));
  backend::Backend& gpu = *owned;
  const auto inputs = models::random_inputs(*model, 1);
  auto measure = [&](const char* name, passes::PipelineOptions options) {
    options.supports = gpu.supports_fn();
    auto optimized = passes::run_pipeline(*model, options);
    if (!optimized.ok()) return json{{"error", optimized.error().message}};
    backend::PlanOptions plan_options;
    plan_options.lanes = options.lanes;
    auto plan = backend::Plan::build(gpu, optimized->graph, plan_options);
    if (!plan.ok()) return json{{"error", plan.error().message}};
    must((*plan)->set_inputs(inputs));
    auto timing = gpu.time([&] { return (*plan)->execute(); }, {3, reps});
    if (!timing.ok()) return json{{"error", timing.error().message}};
    const backend::PlanSummary& s = (*plan)->summary();
    // Which generated kernel is which group (kiln_kN is what a profiler such as ncu names it).
    for (const backend::Plan::Step& step : (*plan)->steps()) {
      if (step.kind != backend::Plan::Step::Kind::kernel || step.kernel_index < 0) continue;
      const auto& pk = (*plan)->kernels()[static_cast<size_t>(step.kernel_index)];
      std::printf("  %s %-8s %-40s rows %lld, %.1f MB, %s\n", pk.entry.c_str(), name, step.label.substr(0, 40).c_str(),
                  static_cast<long long>(pk.kernel.rows), pk.kernel.bytes / 1e6, kernel::schedule_to_string(pk.schedule).c_str());
    }
    // As deployed: the same launches captured once into a CUDA graph and replayed.
    double graph_ms = -1;
    std::string graph_error;
    auto replay = gpu.capture([&] { return (*plan)->execute(); });
    if (replay.ok()) {
      auto graphed = gpu.time(*replay, {3, reps});
      if (graphed.ok()) graph_ms = graphed->median_seconds * 1e3;
      else graph_error = graphed.error().message;
    } else {
      graph_error = replay.error().message;
    }
    std::printf("plan %-44s %-8s %3d kernels %3d library calls %2d fallbacks  stream %.4f ms  CUDA graph %.4f ms%s\n",
                spec.c_str(), name, s.kernels, s.library_calls, s.fallbacks, timing->median_seconds * 1e3, graph_ms,
                graph_error.empty() ? "" : (" (" + graph_error + ")").c_str());
    json result{{"kernels", s.kernels}, {"library_calls", s.library_calls}, {"fallbacks", s.fallbacks}, {"lanes", s.lanes},
                {"aliases", s.aliases}, {"compile_seconds", s.compile_seconds},
                {"median_ms", timing->median_seconds * 1e3}, {"min_ms", timing->min_seconds * 1e3},
                {"cuda_graph_median_ms", graph_ms}, {"cuda_graph_error", graph_error}};
    if (std::string(name) == "fused") {
      if (replay.ok()) result["kernel_trace"] = trace_replays(gpu, *replay, graph_ms);
      if (replay.ok()) result["from_idle"] = time_from_idle(gpu, *replay);
      result["details"] = plan_details(gpu, **plan, graph_ms, profile_window);
    }
    return result;
  };
  passes::PipelineOptions unfused;
  unfused.disabled = {"fuse-rows", "fold-epilogues"};
  if (!fused_only) row["unfused"] = measure("unfused", unfused);
  passes::PipelineOptions fused;
  fused.lanes = lanes;
  fused.disabled = disabled;
  row["fused"] = measure("fused", fused);
  if (!disabled.empty()) row["disabled_passes"] = disabled;
  return row;
}

// Each distinct generated kernel of a model's fused plan, searched over its CUDA schedule space in-process
// (tune/measure_on_backend.h), then the plan with the winners against the plan with default schedules.
// `progress` sees the row as it grows, after each kernel (main writes it out, so a run cut short keeps its kernels).
// `row_loop_ab` (--schedule-ab): instead of the search, each kernel's default schedule against its variants in how
// it loads: Schedule::early_loads, Schedule::row_loop (one resident wave, with and without early loads, and 2 tasks
// a block) and one resident wave with registers bounded (Schedule::min_blocks), twice in turn (A B C ... A B C ...),
// so the order's drift shows.
json bench_tuned_plan(const std::string& spec, double copy_bytes_per_second, int reps, size_t max_candidates,
                      bool row_loop_ab, const std::function<void(const json&)>& progress) {
  json row = {{"model", spec}};
  auto model = models::build_zoo_model(spec);
  if (!model.ok()) return row["error"] = model.error().message, row;
  std::unique_ptr<backend::Backend> owned = must(backend::make_backend("cuda"));
  backend::Backend& gpu = *owned;
  passes::PipelineOptions pipeline;
  pipeline.supports = gpu.supports_fn();
  auto optimized = passes::run_pipeline(*model, pipeline);
  if (!optimized.ok()) return row["error"] = optimized.error().message, row;
  const Graph& g = optimized->graph;
  // The plan's distinct generated kernels, as the tuner sees them (tune/task.h: views that alias their input
  // and constants left out, identical kernels counted once).
  auto tasks = tune::collect_tasks(g);
  if (!tasks.ok()) return row["error"] = tasks.error().message, row;
  std::map<std::string, kernel::Schedule> winners;
  json kernels = json::array();
  double default_sum = 0, best_sum = 0, bytes_sum = 0;
  // Load-time kernels (weight concatenation, scale packing) run once: only per-step and per-call ones are tuned.
  const std::vector<Binding> times = passes::classify_binding_times(g);
  for (const tune::TuneTask& t : tasks->tasks) {
    if (t.kind != tune::TaskKind::kernel) continue;
    if (!t.kernel.outputs.empty() && times[t.kernel.outputs[0].value] == Binding::weight) continue;
    const kernel::Kernel* lowered = &t.kernel;
    const std::vector<NodeId>& members = t.members;
    const std::string& hash = t.hash;
    auto task = kernel::kernel_task(g, *lowered);
    if (!task.ok()) continue;
    const int sms = gpu.device().compute_units;
    // The tuner's own search (a spread first round, then neighbours of the fastest), capped at max_candidates.
    tune::BackendSearchOptions search_options;
    search_options.max_candidates = max_candidates;
    search_options.first_round = std::min<size_t>(max_candidates, 12);
    search_options.measure = {{3, reps}, 1};
    const kernel::Schedule initial = kernel::default_schedule(*lowered, kernel::Target::cuda, sms);
    auto search = [&]() -> Result<tune::BackendSearch> {
      if (!row_loop_ab) return tune::search_schedules_on_backend(gpu, *lowered, *task, initial, search_options);
      std::vector<kernel::Schedule> round = {initial};
      for (int turns : {1, 0, 2}) {
        for (bool early : {false, true}) {
          kernel::Schedule s = initial;
          s.row_loop = turns;
          s.early_loads = early;
          if (s != initial && (turns != 2 || !early) && kernel::can_implement(*lowered, s, kernel::Target::cuda).ok()) {
            round.push_back(s);
          }
        }
      }
      // One resident wave with the registers bounded for 1152 threads an SM (of 2048).
      const int64_t threads = initial.rows_per_task * initial.threads_per_row;
      kernel::Schedule bounded = initial;
      bounded.row_loop = 0;
      bounded.min_blocks = static_cast<int>((1152 + threads - 1) / threads);
      if (round.size() > 1 && kernel::can_implement(*lowered, bounded, kernel::Target::cuda).ok()) round.push_back(bounded);
      if (round.size() == 1) return make_error(ErrorCode::unsupported, "no load variant (one pass over its rows)");
      // Twice in turn, as two calls: within one call a schedule's second copy would be measured once
      // (ScheduleMeasurement::same_code_as).
      tune::BackendSearch out;
      for (int pass = 0; pass < 2; ++pass) {
        KILN_ASSIGN_OR_RETURN(std::vector<tune::ScheduleMeasurement> measured,
                              tune::measure_schedules_on_backend(gpu, *lowered, *task, round, search_options.measure));
        out.measured.insert(out.measured.end(), measured.begin(), measured.end());
      }
      out.rounds = 1;
      return out;
    }();
    json k = {{"kernel", g.node_label(members[0])}, {"members", members.size()}, {"hash", hash},
              {"bytes", lowered->bytes}, {"uses", t.occurrences}};
    if (!search.ok()) {
      k["error"] = search.error().message;
      std::printf("kernel %-40s error: %s\n", g.node_label(members[0]).c_str(), search.error().message.c_str());
      kernels.push_back(k);
      continue;
    }
    const std::vector<tune::ScheduleMeasurement>* measured = &search->measured;
    const std::vector<tune::ScheduleMeasurement>& candidates = search->measured;
    k["candidates"] = candidates.size();
    k["rounds"] = search->rounds;
    int passed = 0;
    const tune::ScheduleMeasurement* best = nullptr;
    std::string first_failure;
    for (const tune::ScheduleMeasurement& m : *measured) {
      if (!m.passed) {
        if (first_failure.empty()) first_failure = kernel::schedule_to_string(m.schedule) + ": " + m.failure;
        continue;
      }
      ++passed;
      if (!best || m.median_seconds < best->median_seconds) best = &m;
    }
    const tune::ScheduleMeasurement& def = (*measured)[0];
    k["passed"] = passed;
    // Every candidate's time (or why it failed): which corner of the schedule space a card favours.
    json all = json::array();
    for (const tune::ScheduleMeasurement& m : *measured) {
      all.push_back(m.passed ? json{{"schedule", kernel::schedule_to_string(m.schedule)}, {"median_ms", m.median_seconds * 1e3}}
                             : json{{"schedule", kernel::schedule_to_string(m.schedule)}, {"failure", m.failure.substr(0, 200)}});
      if (m.same_code_as >= 0) all.back()["same_code_as"] = m.same_code_as;  // its call's index: measured once
    }
    k["measured"] = all;
    if (!first_failure.empty()) k["first_failure"] = first_failure;
    if (def.passed) k["default_ms"] = def.median_seconds * 1e3;
    if (best) {
      winners[hash] = best->schedule;
      k["best_ms"] = best->median_seconds * 1e3;
      k["best_schedule"] = kernel::schedule_to_string(best->schedule);
      k["best_bandwidth_fraction"] = lowered->bytes / best->median_seconds / copy_bytes_per_second;
      if (def.passed) default_sum += def.median_seconds;
      best_sum += best->median_seconds;
      bytes_sum += lowered->bytes;
    }
    // A candidate that failed its check is named with why (the first one), so a broken corner of the schedule
    // space shows in the log, not only as a pass count.
    const std::string failed = best && !first_failure.empty() ? "; first failure " + first_failure.substr(0, 160) : "";
    std::printf("kernel %-40s %9.0f KB  %2d/%zu pass  default %.4f ms  best %.4f ms = %3.0f%% of copy  %s%s\n",
                g.node_label(members[0]).substr(0, 40).c_str(), lowered->bytes / 1e3, passed, candidates.size(),
                def.passed ? def.median_seconds * 1e3 : -1.0, best ? best->median_seconds * 1e3 : -1.0,
                best ? 100 * lowered->bytes / best->median_seconds / copy_bytes_per_second : 0.0,
                best ? kernel::schedule_to_string(best->schedule).c_str() : first_failure.c_str(), failed.c_str());
    kernels.push_back(k);
    row["kernels"] = kernels;
    progress(row);
  }
  row["kernels"] = kernels;
  row["distinct_kernels_default_ms_sum"] = default_sum * 1e3;
  row["distinct_kernels_best_ms_sum"] = best_sum * 1e3;
  row["distinct_kernels_bytes"] = bytes_sum;
  if (best_sum > 0) row["distinct_kernels_bandwidth_fraction"] = bytes_sum / best_sum / copy_bytes_per_second;
  const auto inputs = models::random_inputs(*model, 1);
  auto time_plan = [&](const backend::PlanOptions& options) -> json {
    auto plan = backend::Plan::build(gpu, g, options);
    if (!plan.ok()) return json{{"error", plan.error().message}};
    // Run once before the capture (backend.h): the first run chooses each GEMM's algorithm and makes workspaces.
    auto ran = (*plan)->run(inputs);
    if (!ran.ok()) return json{{"error", ran.error().message}};
    auto replay = gpu.capture([&] { return (*plan)->execute(); });
    if (!replay.ok()) return json{{"error", replay.error().message}};
    auto graphed = gpu.time(*replay, {3, reps});
    if (!graphed.ok()) return json{{"error", graphed.error().message}};
    return json{{"cuda_graph_median_ms", graphed->median_seconds * 1e3}, {"cuda_graph_min_ms", graphed->min_seconds * 1e3}};
  };
  row["plan_default"] = time_plan({});
  backend::PlanOptions tuned;
  tuned.schedules = winners;
  row["plan_tuned"] = time_plan(tuned);
  std::printf("plan %-44s default schedules %s ms, tuned %s ms (CUDA graph); kernels at %.0f%% of copy bandwidth\n",
              spec.c_str(), row["plan_default"].value("cuda_graph_median_ms", -1.0) > 0 ? fmt::format("{:.4f}", row["plan_default"]["cuda_graph_median_ms"].get<double>()).c_str() : "error",
              row["plan_tuned"].value("cuda_graph_median_ms", -1.0) > 0 ? fmt::format("{:.4f}", row["plan_tuned"]["cuda_graph_median_ms"].get<double>()).c_str() : "error",
              best_sum > 0 ? 100 * bytes_sum / best_sum / copy_bytes_per_second : 0.0);
  return row;
}

// The library tables: every cuBLASLt algorithm for each GEMM of a FLUX.1-dev block, and cuDNN's attention at
// FLUX's joint shape in each layout. Each table is saved into `report` as it is done.
void bench_library(const Kernels& k, const DeviceInfo& info, CUstream stream, bool quick, json& report,
                   const std::function<bool()>& save) {
  const int reps = quick ? 10 : 30;
  BlasLt blas = must(BlasLt::create());
  // The GEMMs of FLUX.1-dev's blocks at 1024x1024 (4096 image + 512 text tokens), hidden 3072.
  std::vector<GemmShape> shapes = {
      {"double.img.qkv", 4096, 9216, 3072},   {"double.img.proj", 4096, 3072, 3072},
      {"double.img.mlp_up", 4096, 12288, 3072}, {"double.img.mlp_down", 4096, 3072, 12288},
      {"double.txt.qkv", 512, 9216, 3072},    {"double.txt.mlp_up", 512, 12288, 3072},
      {"single.linear1", 4608, 21504, 3072},  {"single.linear2", 4608, 3072, 15360},
  };
  if (quick) shapes.resize(2);
  json gemms = json::array();
  for (const GemmShape& shape : shapes) {
    gemms.push_back(bench_gemm(blas, k, info, stream, shape, DType::bf16, GemmScaling::none,
                               GemmEpilogue::none, reps));
    for (GemmScaling scaling : {GemmScaling::tensor, GemmScaling::channel, GemmScaling::block})
      gemms.push_back(bench_gemm(blas, k, info, stream, shape, DType::f8e4m3, scaling, GemmEpilogue::none,
                                 reps));
    gemms.push_back(bench_gemm(blas, k, info, stream, shape, DType::f8e4m3, GemmScaling::tensor,
                               GemmEpilogue::none, reps, /*fast_accumulation=*/true));
  }
  gemms.push_back(bench_gemm(blas, k, info, stream, shapes[0], DType::bf16, GemmScaling::none,
                             GemmEpilogue::bias, reps));
  gemms.push_back(bench_gemm(blas, k, info, stream, {"double.img.mlp_up", 4096, 12288, 3072}, DType::bf16,
                             GemmScaling::none, GemmEpilogue::bias_gelu, reps));
  report["gemms"] = gemms;
  save();
#ifdef KILN_HAS_CUDNN
  report["cudnn_version"] = CudnnAttention::version();
  report["attention"] = json::array();
  for (AttentionLayout layout : {AttentionLayout::head_major, AttentionLayout::qkv, AttentionLayout::plan_mix,
                                 AttentionLayout::token_major}) {
    report["attention"].push_back(bench_attention(k, info, stream, layout, reps));
  }
  save();
#endif
}

}  // namespace

constexpr const char* kUsage =
    "usage: kiln-gpu-bench --out FILE.json [--quick] [--fused-only] [--lanes N] [--profile-window] "
    "[--plan ZOO_SPEC]... [--tune-plan ZOO_SPEC]... [--max-candidates N] [--schedule-ab] [--no-library] "
    "[--disable-pass NAME]...\n";

int main(int argc, char** argv) {
  std::string out_path;
  std::vector<std::string> plans, tuned_plans;
  std::set<std::string> disabled;  // passes left out of the fused plan
  size_t max_candidates = 64;
  bool quick = false, fused_only = false, profile_window = false, row_loop_ab = false, library = true;
  int lanes = 1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (arg == "--plan" && i + 1 < argc) plans.push_back(argv[++i]);
    else if (arg == "--tune-plan" && i + 1 < argc) tuned_plans.push_back(argv[++i]);
    else if (arg == "--max-candidates" && i + 1 < argc) max_candidates = std::stoul(argv[++i]);
    else if (arg == "--schedule-ab" || arg == "--row-loop-ab") row_loop_ab = true;  // the older name kept
    else if (arg == "--no-library") library = false;
    else if (arg == "--quick") quick = true;
    else if (arg == "--fused-only") fused_only = true;
    else if (arg == "--lanes" && i + 1 < argc) lanes = std::max(1, std::stoi(argv[++i]));
    else if (arg == "--profile-window") profile_window = true;
    else if (arg == "--disable-pass" && i + 1 < argc) disabled.insert(argv[++i]);
    else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (out_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  Context context = must(Context::open(0));
  const DeviceInfo& info = context.info();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a pipe as they are printed
  std::printf("%s (%s, %d SMs, L2 %lld MB, driver %d), cuBLASLt %s, NVRTC %s\n", info.name.c_str(),
              info.arch().c_str(), info.multiprocessors, static_cast<long long>(info.l2_bytes >> 20),
              info.driver_version, BlasLt::version().c_str(), nvrtc_version().c_str());
  NvrtcOutput compiled = must(nvrtc_compile(kKernels, "bench_kernels.cu", NvrtcOptions{info.arch(), {}, true}));
  Module module = must(Module::load(compiled.cubin));
  Kernels k{std::move(module), {}, {}, {}, {}};
  k.fill_bf16 = must(k.module.function("fill_bf16"));
  k.fill_e4m3 = must(k.module.function("fill_e4m3"));
  k.fill_f32 = must(k.module.function("fill_f32"));
  k.copy16 = must(k.module.function("copy16"));
  Stream stream = must(Stream::create());

  json report = {{"tool", "kiln-gpu-bench"},
                 {"protocol", "kiln-bench-gpu/2: CUDA events per launch with the host's launch latency kept out "
                              "(cuda/timer.h), median of reps after 3 warm-ups, inputs rotated over >4x L2"},
                 {"device",
                  {{"name", info.name}, {"arch", info.arch()}, {"sms", info.multiprocessors},
                   {"l2_bytes", info.l2_bytes}, {"memory_bytes", info.memory_bytes},
                   {"clock_khz", info.clock_khz}, {"driver_version", info.driver_version}}},
                 {"cublaslt_version", BlasLt::version()},
                 {"nvrtc_version", nvrtc_version()}};
  // The report is written after each part (a temporary file renamed over the last), so a run cut short by a
  // timeout keeps what it measured.
  auto save = [&]() -> bool {
    const std::string partial = out_path + ".partial";
    {
      std::ofstream out(partial);
      out << report.dump(2) << "\n";
      if (!out) return false;
    }
    return std::rename(partial.c_str(), out_path.c_str()) == 0;
  };
  report["bandwidth"] = bandwidth(info, k, stream.handle());
  save();

  if (library) bench_library(k, info, stream.handle(), quick, report, save);
  const int reps = quick ? 10 : 30;

  cuda::register_cuda_backend();
  report["plans"] = json::array();
  for (const std::string& spec : plans) {
    report["plans"].push_back(bench_plan(spec, reps, fused_only, profile_window, lanes, disabled));
    save();
  }
  json tuned_rows = json::array();
  const double copy_bytes_per_second = report["bandwidth"]["copy16_kernel_tbps"].get<double>() * 1e12;
  for (const std::string& spec : tuned_plans) {
    auto progress = [&](const json& row) {
      json rows = tuned_rows;
      rows.push_back(row);
      report["tuned_plans"] = rows;
      save();
    };
    tuned_rows.push_back(bench_tuned_plan(spec, copy_bytes_per_second, reps, max_candidates, row_loop_ab, progress));
  }
  report["tuned_plans"] = tuned_rows;

  if (!save()) {
    std::fprintf(stderr, "kiln-gpu-bench: cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::printf("wrote %s\n", out_path.c_str());
  return 0;
}
