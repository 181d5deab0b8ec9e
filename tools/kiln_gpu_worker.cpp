// kiln-gpu-worker: kiln-worker for candidates that run on a GPU (harness/worker.h). The same request, checks
// and evidence; buffers are mirrored into device memory through the CUDA driver (src/cuda/driver.h) and a
// device fault after a kernel call is the candidate's crash. A poisoned context dies with this process.
#include <memory>
#include <string>
#include <vector>

#include "cuda/driver.h"
#include "harness/worker.h"

namespace {

using namespace kiln;

class CudaDeviceOps final : public harness::WorkerDeviceOps {
 public:
  std::string init() override {
    auto context = cuda::Context::open(0);
    if (!context.ok()) return context.error().message;
    context_ = std::make_unique<cuda::Context>(std::move(context).value());
    return "";
  }
  std::string allocate(size_t bytes, void** device_ptr) override {
    auto buffer = cuda::DeviceBuffer::allocate(static_cast<int64_t>(bytes));
    if (!buffer.ok()) return buffer.error().message;
    *device_ptr = buffer->data();
    buffers_.push_back(std::move(buffer).value());
    return "";
  }
  std::string upload(void* device_dst, const void* host_src, size_t bytes) override {
    cuda::DeviceBuffer* b = find(device_dst);
    return b ? message(b->upload(host_src, static_cast<int64_t>(bytes))) : "not a worker buffer";
  }
  std::string download(void* host_dst, const void* device_src, size_t bytes) override {
    cuda::DeviceBuffer* b = find(device_src);
    return b ? message(b->download(host_dst, static_cast<int64_t>(bytes))) : "not a worker buffer";
  }
  std::string synchronize() override { return message(context_->synchronize()); }

 private:
  static std::string message(const Status& status) { return status.ok() ? "" : status.error().message; }
  // The worker moves whole zones, named by their start address.
  cuda::DeviceBuffer* find(const void* ptr) {
    for (auto& b : buffers_)
      if (b.data() == ptr) return &b;
    return nullptr;
  }
  std::unique_ptr<cuda::Context> context_;
  std::vector<cuda::DeviceBuffer> buffers_;
};

}  // namespace

int main(int argc, char** argv) {
  static CudaDeviceOps ops;
  return kiln::harness::worker_main(argc, argv, &ops);
}
