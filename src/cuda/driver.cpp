#include "cuda/driver.h"

#include <fmt/format.h>

#include "cuda/driver_api.h"

namespace kiln::cuda {

// The loaded driver table. Every object here was made by a function that loaded it first, so using it from a
// method or destructor cannot fail.
static const DriverApi& cu() {
  auto api = driver_api();
  KILN_CHECK(api.ok());
  return *api.value();
}

// The entry points that create objects load the driver first and fail with its error.
static Status require_driver() {
  KILN_TRY(driver_api());
  return ok_status();
}

Error driver_error(CUresult result, const std::string& call) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cu().cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "unknown CUresult";
  if (cu().cuGetErrorString(result, &text) != CUDA_SUCCESS) text = "no description";
  return make_error(ErrorCode::device_error, fmt::format("{}: {} ({})", call, text, name));
}

Status check(CUresult result, const std::string& call) {
  if (result == CUDA_SUCCESS) return ok_status();
  return driver_error(result, call);
}

Context::State::~State() {
  if (context != nullptr) cu().cuDevicePrimaryCtxRelease(device);
}

Result<Context> Context::open(int ordinal) {
  KILN_TRY(require_driver());
  KILN_TRY(check(cu().cuInit(0), "cuInit"));
  int count = 0;
  KILN_TRY(check(cu().cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (ordinal < 0 || ordinal >= count)
    return make_error(ErrorCode::device_error,
                      fmt::format("CUDA device {} requested but {} device(s) are present", ordinal, count));
  auto state = std::make_shared<State>();
  KILN_TRY(check(cu().cuDeviceGet(&state->device, ordinal), "cuDeviceGet"));
  KILN_TRY(check(cu().cuDevicePrimaryCtxRetain(&state->context, state->device), "cuDevicePrimaryCtxRetain"));
  KILN_TRY(check(cu().cuCtxSetCurrent(state->context), "cuCtxSetCurrent"));

  DeviceInfo& info = state->info;
  info.ordinal = ordinal;
  char name[256] = {};
  KILN_TRY(check(cu().cuDeviceGetName(name, sizeof name, state->device), "cuDeviceGetName"));
  info.name = name;
  size_t memory = 0;
  KILN_TRY(check(cu().cuDeviceTotalMem(&memory, state->device), "cuDeviceTotalMem"));
  info.memory_bytes = static_cast<int64_t>(memory);
  auto attribute = [&](CUdevice_attribute a, auto* out) -> Status {
    int value = 0;
    KILN_TRY(check(cu().cuDeviceGetAttribute(&value, a, state->device), "cuDeviceGetAttribute"));
    *out = value;
    return ok_status();
  };
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.compute_major));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.compute_minor));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.multiprocessors));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info.l2_bytes));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.shared_memory_per_block_optin));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &info.clock_khz));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, &info.memory_clock_khz));
  KILN_TRY(attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &info.memory_bus_bits));
  KILN_TRY(check(cu().cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion"));

  Context context;
  context.state_ = std::move(state);
  return context;
}

Status Context::make_current() const { return check(cu().cuCtxSetCurrent(state_->context), "cuCtxSetCurrent"); }

Status Context::synchronize() const { return check(cu().cuCtxSynchronize(), "cuCtxSynchronize"); }

Result<DeviceBuffer> DeviceBuffer::allocate(int64_t bytes) {
  KILN_TRY(require_driver());
  if (bytes < 0) return make_error(ErrorCode::invalid_argument, fmt::format("cannot allocate {} bytes", bytes));
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  KILN_TRY(check(cu().cuMemAlloc(&buffer.ptr_, static_cast<size_t>(bytes)), fmt::format("cu().cuMemAlloc({} bytes)", bytes)));
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) cu().cuMemFree(ptr_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) cu().cuMemFree(ptr_);
}

static Status check_range(int64_t offset, int64_t bytes, int64_t size, const char* what) {
  if (offset < 0 || bytes < 0 || offset + bytes > size)
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} of {} bytes at offset {} outside a {}-byte buffer", what, bytes, offset, size));
  return ok_status();
}

Status DeviceBuffer::upload(const void* host, int64_t bytes, int64_t offset) {
  KILN_TRY(check_range(offset, bytes, bytes_, "upload"));
  if (bytes == 0) return ok_status();
  return check(cu().cuMemcpyHtoD(ptr_ + offset, host, static_cast<size_t>(bytes)), "cuMemcpyHtoD");
}

Status DeviceBuffer::download(void* host, int64_t bytes, int64_t offset) const {
  KILN_TRY(check_range(offset, bytes, bytes_, "download"));
  if (bytes == 0) return ok_status();
  return check(cu().cuMemcpyDtoH(host, ptr_ + offset, static_cast<size_t>(bytes)), "cuMemcpyDtoH");
}

namespace {

// An attribute of the current context's device.
Result<int> current_device_attribute(CUdevice_attribute attribute) {
  KILN_TRY(require_driver());
  CUdevice device = 0;
  int value = 0;
  KILN_TRY(check(cu().cuCtxGetDevice(&device), "cuCtxGetDevice"));
  KILN_TRY(check(cu().cuDeviceGetAttribute(&value, attribute, device), "cuDeviceGetAttribute"));
  return value;
}

}  // namespace

Result<int64_t> current_device_l2_bytes() {
  KILN_ASSIGN_OR_RETURN(const int bytes, current_device_attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  return int64_t{bytes};
}

Result<std::string> current_device_arch() {
  DeviceInfo info;
  KILN_ASSIGN_OR_RETURN(info.compute_major, current_device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  KILN_ASSIGN_OR_RETURN(info.compute_minor, current_device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  return info.arch();
}

Status DeviceBuffer::fill_words_async(uint32_t word, CUstream stream) const {
  return check(cu().cuMemsetD32Async(ptr_, word, static_cast<size_t>(bytes_ / 4), stream), "cuMemsetD32Async");
}

Status DeviceBuffer::fill_bytes(uint8_t value) {
  if (bytes_ == 0) return ok_status();
  return check(cu().cuMemsetD8(ptr_, value, static_cast<size_t>(bytes_)), "cuMemsetD8");
}

Result<Stream> Stream::create() {
  KILN_TRY(require_driver());
  CUstream stream = nullptr;
  KILN_TRY(check(cu().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  return Stream(stream);
}

Stream::~Stream() {
  if (stream_ != nullptr) cu().cuStreamDestroy(stream_);
}

Status Stream::synchronize() const { return check(cu().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

Result<Event> Event::create() {
  KILN_TRY(require_driver());
  CUevent event = nullptr;
  KILN_TRY(check(cu().cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"));
  return Event(event);
}

Event::~Event() {
  if (event_ != nullptr) cu().cuEventDestroy(event_);
}

Status Event::record(CUstream stream) const { return check(cu().cuEventRecord(event_, stream), "cuEventRecord"); }

Status Event::wait(CUstream stream) const { return check(cu().cuStreamWaitEvent(stream, event_, 0), "cuStreamWaitEvent"); }

Result<double> Event::elapsed_ms(const Event& start, const Event& end) {
  KILN_TRY(check(cu().cuEventSynchronize(end.event_), "cuEventSynchronize"));
  float ms = 0;
  KILN_TRY(check(cu().cuEventElapsedTime(&ms, start.event_, end.event_), "cuEventElapsedTime"));
  return static_cast<double>(ms);
}

Result<Module> Module::load(const std::vector<char>& image) {
  KILN_TRY(require_driver());
  if (image.empty()) return make_error(ErrorCode::invalid_argument, "cannot load an empty module image");
  CUmodule module = nullptr;
  KILN_TRY(check(cu().cuModuleLoadData(&module, image.data()), "cuModuleLoadData"));
  return Module(module);
}

Module::~Module() {
  if (module_ != nullptr) cu().cuModuleUnload(module_);
}

Result<CUfunction> Module::function(const std::string& name) const {
  CUfunction function = nullptr;
  KILN_TRY(check(cu().cuModuleGetFunction(&function, module_, name.c_str()),
                 fmt::format("cu().cuModuleGetFunction(\"{}\")", name)));
  return function;
}

Result<int> resident_blocks_per_multiprocessor(CUfunction function, int threads) {
  KILN_TRY(require_driver());
  int blocks = 0;
  KILN_TRY(check(cu().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, threads, 0),
                 "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
  return blocks;
}

Status launch(CUfunction function, const LaunchShape& shape, CUstream stream, std::vector<void*> args) {
  KILN_TRY(require_driver());
  if (shape.shared_bytes > 48 * 1024) {
    KILN_TRY(check(cu().cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      static_cast<int>(shape.shared_bytes)),
                   "cu().cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"));
  }
  return check(cu().cuLaunchKernel(function, shape.grid_x, shape.grid_y, shape.grid_z, shape.block_x, shape.block_y,
                              shape.block_z, shape.shared_bytes, stream, args.data(), nullptr),
               fmt::format("cu().cuLaunchKernel(grid {}x{}x{}, block {}x{}x{})", shape.grid_x, shape.grid_y,
                           shape.grid_z, shape.block_x, shape.block_y, shape.block_z));
}

Status copy_async(CUdeviceptr dst, CUdeviceptr src, int64_t bytes, CUstream stream) {
  KILN_TRY(require_driver());
  return check(cu().cuMemcpyDtoDAsync(dst, src, static_cast<size_t>(bytes), stream), "cuMemcpyDtoDAsync");
}

Status profiler_start() {
  KILN_TRY(require_driver());
  return check(cu().cuProfilerStart(), "cuProfilerStart");
}

Status profiler_stop() {
  KILN_TRY(require_driver());
  return check(cu().cuProfilerStop(), "cuProfilerStop");
}

Status copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  KILN_TRY(require_driver());
  if (bytes == 0) return ok_status();
  return check(cu().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(device_dst), host_src, bytes), "cuMemcpyHtoD");
}

Status copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  KILN_TRY(require_driver());
  if (bytes == 0) return ok_status();
  return check(cu().cuMemcpyDtoH(host_dst, reinterpret_cast<CUdeviceptr>(device_src), bytes), "cuMemcpyDtoH");
}

Status synchronize(CUstream stream) {
  KILN_TRY(require_driver());
  return check(cu().cuStreamSynchronize(stream), "cuStreamSynchronize");
}

Status CapturedGraph::begin_capture(CUstream stream) {
  KILN_TRY(require_driver());
  return check(cu().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
}

Result<CapturedGraph> CapturedGraph::end_capture(CUstream stream) {
  CUgraph graph = nullptr;
  KILN_TRY(check(cu().cuStreamEndCapture(stream, &graph), "cuStreamEndCapture"));
  CUgraphExec exec = nullptr;
  CUresult result = cu().cuGraphInstantiate(&exec, graph, 0);
  if (result != CUDA_SUCCESS) {
    cu().cuGraphDestroy(graph);
    return driver_error(result, "cuGraphInstantiate");
  }
  return CapturedGraph(graph, exec);
}

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept : graph_(other.graph_), exec_(other.exec_) {
  other.graph_ = nullptr;
  other.exec_ = nullptr;
}

CapturedGraph::~CapturedGraph() {
  if (exec_ != nullptr) cu().cuGraphExecDestroy(exec_);
  if (graph_ != nullptr) cu().cuGraphDestroy(graph_);
}

Status CapturedGraph::replay(CUstream stream) const { return check(cu().cuGraphLaunch(exec_, stream), "cuGraphLaunch"); }

size_t CapturedGraph::node_count() const {
  size_t count = 0;
  if (cu().cuGraphGetNodes(graph_, nullptr, &count) != CUDA_SUCCESS) return 0;
  return count;
}

}  // namespace kiln::cuda
