#include "harness/worker.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/kernel_abi.h"
#include "harness/worker_protocol.h"

namespace kiln::harness {
namespace {

using KernelFn = int (*)(const kiln_tensor*, int, kiln_tensor*, int);
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(int code, const std::string& message) {
  std::fprintf(stderr, "kiln-worker: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(code);
}

size_t round_up_64(size_t n) { return n == 0 ? 64 : (n + 63) / 64 * 64; }

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte[], FreeDeleter>;

Buffer allocate(size_t bytes) {
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, round_up_64(bytes)));
  if (p == nullptr) fail(kWorkerExitSetupFailed, "cannot allocate " + std::to_string(bytes) + " bytes of buffers");
  return Buffer(p);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(kWorkerExitBadRequest, "cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int open_output(const char* name) {
  const int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(kWorkerExitBadRequest, std::string("cannot create ") + name);
  return fd;
}

void write_all(int fd, const void* data, size_t size, off_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = pwrite(fd, p, size, offset);
    if (n <= 0) fail(kWorkerExitBadRequest, "cannot write results");
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
}

// progress.txt: "begin <what>" before the candidate runs, "end <what> ..." after; the parent places a crash
// or hang by the last line.
int g_progress_fd = -1;
void progress(const std::string& line) {
  const std::string text = line + "\n";
  if (write(g_progress_fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    fail(kWorkerExitBadRequest, "cannot write progress");
  }
}

// Leaves `pattern` in the stack below this frame, where the kernel's locals will live.
__attribute__((noinline)) void dirty_stack(unsigned char pattern) {
  volatile unsigned char area[64 * 1024];
  for (size_t i = 0; i < sizeof area; ++i) area[i] = pattern;
}

// Fresh heap blocks get a fill that differs per call (glibc's M_PERTURB: malloc fills with value ^ 0xff), so
// a kernel reading uninitialized memory disagrees with itself. 0x3f.. and 0x40.. are ordinary floats.
void set_heap_fill(int call) { mallopt(M_PERTURB, call ? 0xbf : 0xc0); }

// The buffers of one call: inputs, outputs with guard zones, and the descriptors handed to the kernel.
struct CallBuffers {
  std::vector<Buffer> inputs, outputs;  // outputs: front guard | output | back guard
  std::vector<TensorType> input_types, output_types;
  size_t guard = 0;
  std::vector<kiln_tensor> input_desc, output_desc;
  std::vector<std::vector<int64_t>> shapes;

  // On a GPU request: device copies of every input and output zone, mirrored around each call.
  WorkerDeviceOps* device = nullptr;
  std::vector<void*> device_inputs, device_outputs;

  CallBuffers(const WorkerRequest& r) : input_types(r.inputs), output_types(r.outputs) {
    guard = static_cast<size_t>(r.guard_bytes);
    for (const TensorType& t : input_types) inputs.push_back(allocate(type_bytes(t)));
    for (const TensorType& t : output_types) outputs.push_back(allocate(guard + type_bytes(t) + guard));
  }
  void attach_device(WorkerDeviceOps* ops) {
    device = ops;
    auto device_zone = [&](size_t bytes) {
      void* p = nullptr;
      const std::string error = device->allocate(bytes, &p);
      if (!error.empty()) fail(kWorkerExitSetupFailed, "device buffers: " + error);
      return p;
    };
    for (const TensorType& t : input_types) device_inputs.push_back(device_zone(type_bytes(t)));
    for (const TensorType& t : output_types) device_outputs.push_back(device_zone(guard + type_bytes(t) + guard));
  }
  std::byte* output(size_t i) { return outputs[i].get() + guard; }
  void* kernel_input(size_t i) { return device ? device_inputs[i] : inputs[i].get(); }
  void* kernel_output(size_t i) { return device ? static_cast<std::byte*>(device_outputs[i]) + guard : output(i); }

  // Rebuilt before every call: a kernel that scribbles on its descriptors does not change the next call.
  void describe() {
    shapes.clear();
    input_desc.clear();
    output_desc.clear();
    for (const TensorType& t : input_types) shapes.push_back(t.shape);
    for (const TensorType& t : output_types) shapes.push_back(t.shape);
    for (size_t i = 0; i < input_types.size(); ++i) {
      input_desc.push_back({kernel_input(i), shapes[i].data(), static_cast<int>(shapes[i].size()),
                            static_cast<int>(input_types[i].dtype)});
    }
    for (size_t i = 0; i < output_types.size(); ++i) {
      const auto& s = shapes[input_types.size() + i];
      output_desc.push_back(
          {kernel_output(i), s.data(), static_cast<int>(s.size()), static_cast<int>(output_types[i].dtype)});
    }
  }
  void load_inputs(const std::string& packed) {
    size_t offset = 0;
    for (size_t i = 0; i < input_types.size(); ++i) {
      const size_t n = type_bytes(input_types[i]);
      if (offset + n > packed.size()) fail(kWorkerExitBadRequest, "input file too short");
      std::memcpy(inputs[i].get(), packed.data() + offset, n);
      offset += n;
    }
  }
  void poison(int call) {
    for (size_t i = 0; i < output_types.size(); ++i) {
      std::byte* zone = outputs[i].get();
      const size_t n = type_bytes(output_types[i]);
      for (size_t b = 0; b < guard; ++b) zone[b] = zone[guard + n + b] = guard_byte(b);
      fill_poison(output_types[i].dtype, output(i), shape_numel(output_types[i].shape), call);
    }
  }
  int call(KernelFn kernel) {
    describe();
    if (device) mirror(true);
    const int rc = kernel(input_desc.data(), static_cast<int>(input_desc.size()), output_desc.data(),
                          static_cast<int>(output_desc.size()));
    if (device) {
      // Still inside the call as far as blame goes: a fault the kernel caused surfaces here.
      const std::string error = device->synchronize();
      if (!error.empty()) fail(kWorkerExitKernelFailed, "device error after the kernel call: " + error);
      mirror(false);
    }
    return rc;
  }
  // Host -> device before a call (inputs, poisoned outputs with their guards); device -> host after it, so
  // that what the parent checks is what the kernel left in device memory.
  void mirror(bool to_device) {
    auto move = [&](void* device_ptr, std::byte* host, size_t bytes) {
      const std::string error = to_device ? device->upload(device_ptr, host, bytes) : device->download(host, device_ptr, bytes);
      if (!error.empty()) fail(kWorkerExitKernelFailed, std::string("device copy ") + (to_device ? "to" : "from") +
                                                            " the GPU failed: " + error);
    };
    for (size_t i = 0; i < input_types.size(); ++i) move(device_inputs[i], inputs[i].get(), type_bytes(input_types[i]));
    for (size_t i = 0; i < output_types.size(); ++i)
      move(device_outputs[i], outputs[i].get(), 2 * guard + type_bytes(output_types[i]));
  }
  void write_record(int fd, const RecordLayout& layout, size_t index) {
    std::vector<std::byte> record(layout.bytes);
    for (size_t i = 0; i < output_types.size(); ++i) {
      std::memcpy(record.data() + layout.output_offsets[i], outputs[i].get(), 2 * guard + type_bytes(output_types[i]));
    }
    for (size_t i = 0; i < input_types.size(); ++i) {
      std::memcpy(record.data() + layout.input_offsets[i], inputs[i].get(), type_bytes(input_types[i]));
    }
    write_all(fd, record.data(), record.size(), static_cast<off_t>(index * layout.bytes));
  }
};

// Virtual size (field 0) or resident set (field 1) of this process, in bytes.
int64_t statm_bytes(int field) {
  std::ifstream in("/proc/self/statm");
  int64_t pages[2] = {0, 0};
  in >> pages[0] >> pages[1];
  return pages[field] * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// The candidate may allocate `headroom` bytes beyond what the worker holds now: an address-space limit, or
// under a sanitizer (whose shadow needs terabytes of address space) a watchdog on the resident set.
void limit_memory(int64_t headroom, bool gpu) {
  // The CUDA driver reserves address space by the terabyte as well: a GPU worker watches its resident set.
  if (built_with_sanitizers() || gpu) {
    const int64_t limit = statm_bytes(1) + headroom;
    std::thread([limit] {
      for (;;) {
        const int64_t rss = statm_bytes(1);
        if (rss > limit) {
          fail(kWorkerExitMemoryLimit, "memory limit exceeded: resident " + std::to_string(rss >> 20) + " MiB > " +
                                           std::to_string(limit >> 20) + " MiB");
        }
        usleep(2000);
      }
    }).detach();
    return;
  }
  const auto limit = static_cast<rlim_t>(statm_bytes(0) + headroom);
  struct rlimit r {
    limit, limit
  };
  if (setrlimit(RLIMIT_AS, &r) != 0) fail(kWorkerExitSetupFailed, "cannot set the address-space limit");
}

// A candidate that calls exit() ends here, before any atexit handler registered earlier (a sanitizer's leak
// check among them) gets to run and blur the evidence.
void on_exit_from_candidate() {
  const char msg[] = "kiln-worker: the candidate called exit()\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
  _exit(kWorkerExitCalledExit);
}

// After this the process cannot start processes (RLIMIT_NPROC 0; enforced only for a non-root user, hence
// the switch to nobody), gain privileges, or outlive its parent.
void give_up_privileges(bool drop) {
  if (drop && geteuid() == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
      fail(kWorkerExitSetupFailed, std::string("cannot switch to user nobody: ") + std::strerror(errno));
    }
    prctl(PR_SET_DUMPABLE, 1);
  }
  struct rlimit none {
    0, 0
  };
  setrlimit(RLIMIT_NPROC, &none);
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) _exit(kWorkerExitSetupFailed);  // the parent is already gone
}

KernelFn load_kernel(const std::string& path, int index) {
  if (access(path.c_str(), R_OK) != 0) {
    fail(kWorkerExitBadRequest,
         "cannot read " + path + " as uid " + std::to_string(getuid()) + " (the scratch dir must be world-readable)");
  }
  progress("begin load " + std::to_string(index));
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) fail(kWorkerExitLoadFailed, std::string("dlopen: ") + dlerror());
  auto kernel = reinterpret_cast<KernelFn>(dlsym(handle, "kiln_kernel"));
  if (kernel == nullptr) fail(kWorkerExitLoadFailed, path + " does not define kiln_kernel");
  progress("end load " + std::to_string(index));
  return kernel;
}

void run_verify(const WorkerRequest& request, const std::vector<KernelFn>& kernels, CallBuffers& buffers,
                const std::vector<std::string>& packed_inputs, int results_fd) {
  const RecordLayout layout = record_layout(request);
  for (int t = 0; t < request.trials; ++t) {
    for (int call = 0; call < 2; ++call) {
      const std::string what = "trial " + std::to_string(t) + " " + std::to_string(call);
      buffers.load_inputs(packed_inputs[static_cast<size_t>(t)]);
      buffers.poison(call);
      set_heap_fill(call);
      dirty_stack(call ? 0x40 : 0x3f);
      progress("begin " + what);
      const auto start = Clock::now();
      const int rc = buffers.call(kernels[0]);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      progress("end " + what + " " + std::to_string(rc) + " " + std::to_string(seconds));
      if (rc != 0) {
        fail(kWorkerExitKernelFailed, "kiln_kernel returned " + std::to_string(rc) + " in trial " + std::to_string(t) +
                                          ", call " + std::to_string(call));
      }
      buffers.write_record(results_fd, layout, static_cast<size_t>(2 * t + call));
    }
  }
}

// Rotating slots: every call gets the next copy of the buffers, so that once the slots exceed the last-level
// cache no call finds its data cached by the previous one.
struct Slots {
  Buffer memory;
  std::vector<std::vector<kiln_tensor>> inputs, outputs;
  std::vector<std::vector<int64_t>> shapes;
  int64_t count = 0;
  int64_t next = 0;

  Slots(const WorkerRequest& r, const std::string& packed) : count(r.bench.slots) {
    size_t stride = 0;
    for (const TensorType& t : r.inputs) stride += round_up_64(type_bytes(t));
    for (const TensorType& t : r.outputs) stride += round_up_64(type_bytes(t));
    memory = allocate(stride * static_cast<size_t>(count));
    // Huge pages where the kernel has them: fewer TLB misses across the rotation, and the same from run to run.
    madvise(memory.get(), stride * static_cast<size_t>(count), MADV_HUGEPAGE);
    for (const TensorType& t : r.inputs) shapes.push_back(t.shape);
    for (const TensorType& t : r.outputs) shapes.push_back(t.shape);
    for (int64_t s = 0; s < count; ++s) {
      std::byte* p = memory.get() + stride * static_cast<size_t>(s);
      size_t packed_offset = 0;
      inputs.emplace_back();
      outputs.emplace_back();
      for (size_t i = 0; i < r.inputs.size(); ++i) {
        const size_t n = type_bytes(r.inputs[i]);
        if (packed_offset + n > packed.size()) fail(kWorkerExitBadRequest, "input file too short");
        std::memcpy(p, packed.data() + packed_offset, n);
        packed_offset += n;
        inputs.back().push_back(
            {p, shapes[i].data(), static_cast<int>(shapes[i].size()), static_cast<int>(r.inputs[i].dtype)});
        p += round_up_64(n);
      }
      for (size_t i = 0; i < r.outputs.size(); ++i) {
        const auto& shape = shapes[r.inputs.size() + i];
        fill_poison(r.outputs[i].dtype, p, shape_numel(shape), 0);
        outputs.back().push_back(
            {p, shape.data(), static_cast<int>(shape.size()), static_cast<int>(r.outputs[i].dtype)});
        p += round_up_64(type_bytes(r.outputs[i]));
      }
    }
  }
  int call(KernelFn kernel) {
    const size_t s = static_cast<size_t>(next);
    next = (next + 1) % count;
    return kernel(inputs[s].data(), static_cast<int>(inputs[s].size()), outputs[s].data(),
                  static_cast<int>(outputs[s].size()));
  }
};

void call_timed_out_of_band(KernelFn kernel, Slots& slots, const char* phase) {
  const int rc = slots.call(kernel);
  if (rc != 0)
    fail(kWorkerExitKernelFailed, std::string("kiln_kernel returned ") + std::to_string(rc) + " in " + phase);
}

void run_bench(const WorkerRequest& request, const std::vector<KernelFn>& kernels, CallBuffers& buffers,
               const std::string& packed, int results_fd, int samples_fd) {
  const BenchParams& p = request.bench;
  Slots slots(request, packed);
  const size_t n = kernels.size();
  std::vector<int64_t> calls_per_sample(n, 1);
  for (size_t k = 0; k < n; ++k) {
    progress("begin warmup " + std::to_string(k));
    const auto start = Clock::now();
    int64_t calls = 0;
    double elapsed = 0;
    do {
      call_timed_out_of_band(kernels[k], slots, "warmup");
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < p.warmup_seconds);
    const double per_call = elapsed / static_cast<double>(calls);
    calls_per_sample[k] = std::max<int64_t>(1, static_cast<int64_t>(p.sample_seconds / per_call));
    progress("end warmup " + std::to_string(k) + " " + std::to_string(calls));
  }

  // Samples: each the mean of a batch of calls; with two kernels, rounds alternate AB, BA, AB, ... so that
  // drift in the machine's state falls on both alike.
  std::vector<std::vector<double>> samples(n);
  progress("begin timing");
  const auto start = Clock::now();
  for (int round = 0;; ++round) {
    for (size_t j = 0; j < n; ++j) {
      const size_t k = (round % 2 == 1 && n == 2) ? 1 - j : j;
      const auto t0 = Clock::now();
      for (int64_t c = 0; c < calls_per_sample[k]; ++c) call_timed_out_of_band(kernels[k], slots, "timing");
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      samples[k].push_back(seconds / static_cast<double>(calls_per_sample[k]));
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const int count = round + 1;
    if ((count >= p.min_samples && elapsed >= p.min_seconds) || count >= p.max_samples || elapsed >= p.max_seconds) {
      break;
    }
  }
  progress("end timing");
  std::string text = "calls_per_sample";
  for (int64_t c : calls_per_sample) text += " " + std::to_string(c);
  text += "\n";
  char number[64];
  for (size_t s = 0; s < samples[0].size(); ++s) {
    for (size_t k = 0; k < n; ++k) {
      std::snprintf(number, sizeof number, "%s%.9e", k ? " " : "", samples[k][s]);
      text += number;
    }
    text += "\n";
  }
  write_all(samples_fd, text.data(), text.size(), 0);

  // One more call per kernel, outside the timing, into guarded buffers: what was timed must still compute.
  const RecordLayout layout = record_layout(request);
  for (size_t k = 0; k < n; ++k) {
    const std::string what = "check " + std::to_string(k);
    buffers.load_inputs(packed);
    buffers.poison(0);
    progress("begin " + what);
    const int rc = buffers.call(kernels[k]);
    progress("end " + what + " " + std::to_string(rc));
    if (rc != 0) fail(kWorkerExitKernelFailed, "kiln_kernel returned " + std::to_string(rc) + " in " + what);
    buffers.write_record(results_fd, layout, k);
  }
}

}  // namespace

int worker_main(int argc, char** argv, WorkerDeviceOps* device) {
  // Descriptors the parent left open without close-on-exec (a database, a log) are not the candidate's.
  close_range(3, ~0u, 0);
  if (argc > 2) fail(kWorkerExitBadRequest, "usage: kiln-worker [scratch-dir]");
  if (argc == 2 && chdir(argv[1]) != 0) fail(kWorkerExitBadRequest, std::string("cannot enter ") + argv[1]);
  auto request = request_from_json(read_file(kRequestFile));
  if (!request.ok()) fail(kWorkerExitBadRequest, request.error().message);
  const WorkerRequest& r = *request;
  if (r.mode == WorkerMode::bench && (r.libraries.size() > 2 || r.trials != 1)) {
    fail(kWorkerExitBadRequest, "bench takes one or two libraries and one input set");
  }
  std::vector<std::string> packed_inputs;
  for (int t = 0; t < r.trials; ++t) packed_inputs.push_back(read_file(trial_input_file(t)));
  g_progress_fd = open_output(kProgressFile);
  const int results_fd = open_output(kResultsFile);
  const int samples_fd = r.mode == WorkerMode::bench ? open_output(kSamplesFile) : -1;
  CallBuffers buffers(r);
  const bool gpu = r.device == WorkerDevice::cuda;
  if (gpu) {
    if (device == nullptr) fail(kWorkerExitBadRequest, "this worker has no GPU support: use kiln-gpu-worker");
    if (r.mode != WorkerMode::verify) fail(kWorkerExitBadRequest, "GPU requests verify only; GPU timing uses CUDA events");
    const std::string error = device->init();
    if (!error.empty()) fail(kWorkerExitSetupFailed, "GPU: " + error);
    buffers.attach_device(device);
  }

  limit_memory(r.memory_bytes, gpu);
  std::atexit(on_exit_from_candidate);
  give_up_privileges(r.drop_privileges);
  std::vector<KernelFn> kernels;
  for (size_t i = 0; i < r.libraries.size(); ++i) kernels.push_back(load_kernel(r.libraries[i], static_cast<int>(i)));
  if (r.mode == WorkerMode::verify) {
    run_verify(r, kernels, buffers, packed_inputs, results_fd);
  } else {
    run_bench(r, kernels, buffers, packed_inputs[0], results_fd, samples_fd);
  }
  progress("done");
  // _exit: no static destructors or atexit handlers of the candidate's libraries run after "done".
  close(results_fd);
  if (samples_fd >= 0) close(samples_fd);
  _exit(0);
}

}  // namespace kiln::harness
