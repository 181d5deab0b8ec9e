// The driver layer on a real GPU: NVRTC modules, launches, copies, events, CUDA-graph capture and replay.
// Without a GPU these skip, except the NVRTC compile checks, which need only the toolkit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "cuda/driver.h"
#include "cuda/nvrtc.h"
#include "cuda/timer.h"
#include "gpu_test_util.h"

namespace kiln::cuda {
namespace {

const char* kScaleAdd = R"(
extern "C" __global__ void scale_add(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

TEST(GpuNvrtc, CompilesForHopper) {
  auto out = nvrtc_compile(kScaleAdd, "scale_add.cu", {});
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_GT(out->cubin.size(), 100u);
  EXPECT_NE(nvrtc_version(), "unknown");
}

TEST(GpuNvrtc, CompileErrorCarriesTheLog) {
  auto out = nvrtc_compile("extern \"C\" __global__ void broken() { undeclared_name = 1; }", "broken.cu", {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(out.error().message.find("undeclared_name"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("broken.cu"), std::string::npos);
}

TEST(GpuDriver, KernelRunsAndCopiesRoundTrip) {
  KILN_REQUIRE_GPU();
  EXPECT_GT(gpu->info().multiprocessors, 0);
  auto compiled = nvrtc_compile(kScaleAdd, "scale_add.cu", NvrtcOptions{gpu->info().arch(), {}, true});
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  auto module = Module::load(compiled->cubin);
  KILN_ASSERT_OK(module);
  auto function = module->function("scale_add");
  KILN_ASSERT_OK(function);
  auto missing = module->function("no_such_kernel");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no_such_kernel"), std::string::npos);

  const int n = 1000;
  std::vector<float> x(n), y(n);
  std::iota(x.begin(), x.end(), 0.0f);
  std::fill(y.begin(), y.end(), 1.0f);
  auto dx = DeviceBuffer::allocate(n * 4);
  auto dy = DeviceBuffer::allocate(n * 4);
  KILN_ASSERT_OK(dx);
  KILN_ASSERT_OK(dy);
  KILN_ASSERT_OK(dx->upload(x.data(), n * 4));
  KILN_ASSERT_OK(dy->upload(y.data(), n * 4));
  auto stream = Stream::create();
  KILN_ASSERT_OK(stream);
  CUdeviceptr px = dx->ptr(), py = dy->ptr();
  float a = 2.0f;
  int count = n;
  KILN_ASSERT_OK(launch(*function, {.grid_x = (n + 255) / 256, .block_x = 256}, stream->handle(),
                        {&px, &py, &a, &count}));
  KILN_ASSERT_OK(stream->synchronize());
  KILN_ASSERT_OK(dy->download(y.data(), n * 4));
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.0f * i + 1.0f) << i;

  auto bad = dy->download(y.data(), n * 4, 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("outside"), std::string::npos);
}

TEST(GpuDriver, CapturedGraphReplaysItsLaunches) {
  KILN_REQUIRE_GPU();
  auto compiled = nvrtc_compile(kScaleAdd, "scale_add.cu", NvrtcOptions{gpu->info().arch(), {}, true});
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  auto module = Module::load(compiled->cubin);
  KILN_ASSERT_OK(module);
  auto function = module->function("scale_add");
  KILN_ASSERT_OK(function);
  const int n = 4096;
  std::vector<float> ones(n, 1.0f), zeros(n, 0.0f), y(n);
  auto dx = DeviceBuffer::allocate(n * 4);
  auto dy = DeviceBuffer::allocate(n * 4);
  KILN_ASSERT_OK(dx);
  KILN_ASSERT_OK(dy);
  KILN_ASSERT_OK(dx->upload(ones.data(), n * 4));
  KILN_ASSERT_OK(dy->upload(zeros.data(), n * 4));
  auto stream = Stream::create();
  KILN_ASSERT_OK(stream);
  CUdeviceptr px = dx->ptr(), py = dy->ptr();
  float a = 1.0f;
  int count = n;
  KILN_ASSERT_OK(CapturedGraph::begin_capture(stream->handle()));
  for (int i = 0; i < 3; ++i)
    KILN_ASSERT_OK(launch(*function, {.grid_x = n / 256, .block_x = 256}, stream->handle(), {&px, &py, &a, &count}));
  auto graph = CapturedGraph::end_capture(stream->handle());
  KILN_ASSERT_OK(graph);
  EXPECT_EQ(graph->node_count(), 3u);
  KILN_ASSERT_OK(stream->synchronize());
  KILN_ASSERT_OK(dy->download(y.data(), n * 4));
  EXPECT_EQ(y[0], 0.0f) << "capture must not execute the work";
  KILN_ASSERT_OK(graph->replay(stream->handle()));
  KILN_ASSERT_OK(graph->replay(stream->handle()));
  KILN_ASSERT_OK(stream->synchronize());
  KILN_ASSERT_OK(dy->download(y.data(), n * 4));
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 6.0f) << i;
}

const char* kSpin = R"(
extern "C" __global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
}
)";

// A host that takes 300 us to enqueue a kernel of a few microseconds: plain events around the call measure the
// host, the StreamTimer the kernel. A kernel that spins 200 us on the device is measured whole by both.
TEST(GpuDriver, StreamTimerKeepsTheHostOut) {
  KILN_REQUIRE_GPU();
  auto compiled = nvrtc_compile(std::string(kScaleAdd) + kSpin, "timer.cu", NvrtcOptions{gpu->info().arch(), {}, true});
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  auto module = Module::load(compiled->cubin);
  KILN_ASSERT_OK(module);
  auto scale_add = module->function("scale_add");
  auto spin = module->function("spin");
  KILN_ASSERT_OK(scale_add);
  KILN_ASSERT_OK(spin);
  const int n = 1000;
  auto dx = DeviceBuffer::allocate(n * 4);
  auto dy = DeviceBuffer::allocate(n * 4);
  KILN_ASSERT_OK(dx);
  KILN_ASSERT_OK(dy);
  KILN_ASSERT_OK(dx->fill_bytes(0));
  KILN_ASSERT_OK(dy->fill_bytes(0));
  auto stream = Stream::create();
  KILN_ASSERT_OK(stream);
  CUdeviceptr px = dx->ptr(), py = dy->ptr();
  float a = 1.0f;
  int count = n;
  auto slow_host = [&]() -> Status {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    return launch(*scale_add, {.grid_x = (n + 255) / 256, .block_x = 256}, stream->handle(), {&px, &py, &a, &count});
  };
  auto timer = StreamTimer::create();
  KILN_ASSERT_OK(timer);
  auto held = timer->samples_ms(stream->handle(), slow_host, 2, 9);
  KILN_ASSERT_OK(held);
  ASSERT_EQ(held->size(), 9u);
  std::vector<double> ms = *held;
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[4], 0.1) << "the host's 300 us enqueue is in the held figure";

  auto start = Event::create(), end = Event::create();
  KILN_ASSERT_OK(start);
  KILN_ASSERT_OK(end);
  KILN_ASSERT_OK(start->record(stream->handle()));
  KILN_ASSERT_OK(slow_host());
  KILN_ASSERT_OK(end->record(stream->handle()));
  auto plain = Event::elapsed_ms(*start, *end);
  KILN_ASSERT_OK(plain);
  EXPECT_GT(*plain, 0.25) << "plain events should measure the host's enqueue";

  unsigned long long ns = 200000;
  auto device_bound = timer->samples_ms(stream->handle(), [&] {
    return launch(*spin, {}, stream->handle(), {&ns});
  }, 1, 5);
  KILN_ASSERT_OK(device_bound);
  for (double v : *device_bound) EXPECT_GE(v, 0.195) << "the held figure lost part of the work";
}

}  // namespace
}  // namespace kiln::cuda
