#include "kernel_trace.h"

#include <cupti.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace kiln::tools {
namespace {

// CUPTI hands records over through two plain callbacks: the records land here.
std::mutex g_mutex;
std::vector<TracedKernel> g_kernels;

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    g_kernels.push_back({k->name ? k->name : "", k->start, k->end, k->streamId});
  }
  std::free(buffer);
}

Status cupti(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return ok_status();
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  return make_error(ErrorCode::device_error, fmt::format("CUPTI {}: {}", call, text ? text : "unknown error"));
}

}  // namespace

Result<std::vector<TracedKernel>> trace_kernels(const std::function<Status()>& work) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_kernels.clear();
  }
  KILN_TRY(cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks"));
  KILN_TRY(cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable"));
  const Status ran = work();
  // Flushed and disabled whether or not the work ran, so that no later work is traced.
  const Status flushed = cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const Status disabled = cupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
  KILN_TRY(ran);
  KILN_TRY(flushed);
  KILN_TRY(disabled);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<TracedKernel> kernels = std::move(g_kernels);
  g_kernels.clear();
  std::sort(kernels.begin(), kernels.end(), [](const TracedKernel& a, const TracedKernel& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  return kernels;
}

KernelSpan kernel_span(const std::vector<TracedKernel>& kernels) {
  KernelSpan s;
  s.kernels = static_cast<int>(kernels.size());
  if (kernels.empty()) return s;
  std::vector<const TracedKernel*> by_start;
  for (const TracedKernel& k : kernels) by_start.push_back(&k);
  std::sort(by_start.begin(), by_start.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  uint64_t first = by_start.front()->start_ns, last = 0, busy = 0, sum = 0;
  uint64_t open_start = first, open_end = first;  // the union's current interval
  for (const TracedKernel* k : by_start) {
    const uint64_t end = std::max(k->end_ns, k->start_ns);
    sum += end - k->start_ns;
    last = std::max(last, end);
    if (k->start_ns > open_end) {  // a gap: close the interval
      busy += open_end - open_start;
      open_start = k->start_ns;
      open_end = end;
    } else {
      open_end = std::max(open_end, end);
    }
  }
  busy += open_end - open_start;
  s.span_seconds = static_cast<double>(last - first) * 1e-9;
  s.busy_seconds = static_cast<double>(busy) * 1e-9;
  s.sum_seconds = static_cast<double>(sum) * 1e-9;
  return s;
}

Result<std::vector<std::vector<TracedKernel>>> split_runs(const std::vector<TracedKernel>& kernels, int runs) {
  if (runs <= 0 || kernels.size() % static_cast<size_t>(runs) != 0) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} kernels traced over {} runs: the runs did not launch the same kernels",
                                  kernels.size(), runs));
  }
  const size_t per_run = kernels.size() / static_cast<size_t>(runs);
  std::vector<std::vector<TracedKernel>> out;
  for (size_t i = 0; i < kernels.size(); i += per_run) out.emplace_back(kernels.begin() + i, kernels.begin() + i + per_run);
  return out;
}

}  // namespace kiln::tools
