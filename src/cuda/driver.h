// The CUDA driver API (cuda.h) behind RAII types and Result: the one place kiln talks to the GPU driver.
// Modules, launches, events, streams and graphs go through the driver API (DESIGN.md, issue 7) so that
// generated kernels compiled by NVRTC load without the runtime library. Every failing call becomes an Error
// naming the call and the driver's own message; nothing here aborts on a device failure.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/result.h"

namespace kiln::cuda {

// Error for a failed driver call: "cuMemAlloc(1024 bytes): out of memory (CUDA_ERROR_OUT_OF_MEMORY)".
Error driver_error(CUresult result, const std::string& call);
Status check(CUresult result, const std::string& call);

struct DeviceInfo {
  std::string name;
  int ordinal = 0;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int64_t shared_memory_per_block_optin = 0;
  int clock_khz = 0, memory_clock_khz = 0, memory_bus_bits = 0;
  int driver_version = 0;  // e.g. 13000
  std::string arch() const { return "sm_" + std::to_string(compute_major) + std::to_string(compute_minor); }
};

// The primary context of one device, made current on the calling thread. Cheap to copy (shared).
class Context {
 public:
  // Fails with a device_error when there is no driver or no device (the CI machine); callers skip then.
  static Result<Context> open(int ordinal = 0);
  const DeviceInfo& info() const { return state_->info; }
  Status make_current() const;
  Status synchronize() const;  // everything issued in this context; a kernel's fault surfaces here
  CUcontext handle() const { return state_->context; }

 private:
  struct State {
    CUdevice device = 0;
    CUcontext context = nullptr;
    DeviceInfo info;
    ~State();
  };
  std::shared_ptr<State> state_;
};

// The L2 cache size of the current context's device.
Result<int64_t> current_device_l2_bytes();
// The current context's device architecture, as NVRTC names it ("sm_90").
Result<std::string> current_device_arch();

// Device memory owned by value; moved, never copied.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(int64_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  int64_t bytes() const { return bytes_; }
  Status upload(const void* host, int64_t bytes, int64_t offset = 0);
  Status download(void* host, int64_t bytes, int64_t offset = 0) const;
  Status fill_bytes(uint8_t value);
  // Every 32-bit word set to `word`, enqueued on `stream`.
  Status fill_words_async(uint32_t word, CUstream stream) const;

 private:
  CUdeviceptr ptr_ = 0;
  int64_t bytes_ = 0;
};

class Stream {
 public:
  static Result<Stream> create();
  Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  Stream(const Stream&) = delete;
  ~Stream();
  CUstream handle() const { return stream_; }
  Status synchronize() const;

 private:
  explicit Stream(CUstream stream) : stream_(stream) {}
  CUstream stream_ = nullptr;
};

class Event {
 public:
  static Result<Event> create();
  Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  Event(const Event&) = delete;
  ~Event();
  Status record(CUstream stream) const;
  // Work launched on `stream` after this call waits for the work the last record() captured (a graph edge
  // under capture).
  Status wait(CUstream stream) const;
  // Milliseconds between two recorded events, after both completed.
  static Result<double> elapsed_ms(const Event& start, const Event& end);

 private:
  explicit Event(CUevent event) : event_(event) {}
  CUevent event_ = nullptr;
};

// A loaded module (cubin or PTX image) and the kernels looked up in it.
class Module {
 public:
  static Result<Module> load(const std::vector<char>& image);
  Module(Module&& other) noexcept : module_(other.module_) { other.module_ = nullptr; }
  Module(const Module&) = delete;
  ~Module();
  Result<CUfunction> function(const std::string& name) const;

 private:
  explicit Module(CUmodule module) : module_(module) {}
  CUmodule module_ = nullptr;
};

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
};

// Device-to-device copy enqueued on `stream`, and a wait for everything enqueued on it.
Status copy_async(CUdeviceptr dst, CUdeviceptr src, int64_t bytes, CUstream stream);
Status synchronize(CUstream stream);
// The window a profiler started with collection off (`ncu --profile-from-start off`) records; no effect without one.
Status profiler_start();
Status profiler_stop();
// Synchronous copies between host memory and any device address (a view into a buffer included).
Status copy_to_device(void* device_dst, const void* host_src, size_t bytes);
Status copy_to_host(void* host_dst, const void* device_src, size_t bytes);

// Launches `function` with kernel arguments given as pointers to their values (the driver's convention).
Status launch(CUfunction function, const LaunchShape& shape, CUstream stream, std::vector<void*> args);

// How many blocks of `threads` threads (no dynamic shared memory) of `function` one multiprocessor holds at once,
// as its registers and shared memory allow.
Result<int> resident_blocks_per_multiprocessor(CUfunction function, int threads);

// A captured and instantiated CUDA graph of the work issued on one stream between begin and end.
class CapturedGraph {
 public:
  static Status begin_capture(CUstream stream);
  static Result<CapturedGraph> end_capture(CUstream stream);
  CapturedGraph(CapturedGraph&& other) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  ~CapturedGraph();
  Status replay(CUstream stream) const;
  size_t node_count() const;

 private:
  CapturedGraph(CUgraph graph, CUgraphExec exec) : graph_(graph), exec_(exec) {}
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace kiln::cuda
