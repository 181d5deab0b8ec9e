#include "harness/machine.h"

#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "harness/compile.h"
#include "util/check.h"

namespace kiln::harness {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The value of the first "key : value" line of /proc/cpuinfo with this key.
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "";
}

// "2048K", "256M" -> bytes.
int64_t parse_size(const std::string& text) {
  if (text.empty()) return 0;
  int64_t value = std::atoll(text.c_str());
  switch (text.back()) {
    case 'K': return value << 10;
    case 'M': return value << 20;
    case 'G': return value << 30;
    default: return value;
  }
}

}  // namespace

int64_t last_level_cache_bytes() {
  static const int64_t kBytes = [] {
    int best_level = 0;
    int64_t bytes = 0;
    for (int index = 0; index < 16; ++index) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
      const std::string level = read_line(dir + "/level");
      if (level.empty()) break;
      if (read_line(dir + "/type") == "Instruction") continue;
      const int l = std::atoi(level.c_str());
      if (l >= best_level) {
        best_level = l;
        bytes = parse_size(read_line(dir + "/size"));
      }
    }
    return bytes > 0 ? bytes : int64_t{32} << 20;
  }();
  return kBytes;
}

double measure_memcpy_bandwidth(int threads, int64_t buffer_bytes) {
  KILN_CHECK(threads >= 1 && buffer_bytes >= 64 * threads, "each thread copies at least a cache line");
  const size_t bytes = static_cast<size_t>(buffer_bytes);
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);  // fault the pages in before timing
  const size_t part = bytes / static_cast<size_t>(threads);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) {
      pool.emplace_back([&, t] { std::memcpy(dst.get() + t * part, src.get() + t * part, part); });
    }
    std::memcpy(dst.get(), src.get(), part);
    for (std::thread& p : pool) p.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(part * static_cast<size_t>(threads)) / seconds);
    src[rep] = dst[bytes - 1 - rep];  // keep the copies observable
  }
  return best;
}

double measure_memcpy_bandwidth(int threads) {
  return measure_memcpy_bandwidth(threads, std::clamp<int64_t>(2 * last_level_cache_bytes(), 64 << 20, 512 << 20));
}

namespace {

std::mutex bandwidth_mutex;
double bandwidth = 0;  // the best figure measured so far in this process

}  // namespace

double memcpy_bandwidth() {
  std::lock_guard<std::mutex> lock(bandwidth_mutex);
  if (bandwidth == 0) bandwidth = measure_memcpy_bandwidth(1);
  return bandwidth;
}

double memcpy_bandwidth_on(int threads) {
  if (threads <= 1) return memcpy_bandwidth();
  static std::mutex mutex;
  static std::map<int, double> measured;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = measured.try_emplace(threads, 0.0);
  if (fresh) it->second = measure_memcpy_bandwidth(threads);
  return it->second;
}

double remeasure_memcpy_bandwidth() {
  std::lock_guard<std::mutex> lock(bandwidth_mutex);
  bandwidth = std::max(bandwidth, measure_memcpy_bandwidth(1));
  return bandwidth;
}

MachineRecord machine_record(const std::string& compiler) {
  MachineRecord m;
  m.cpu_model = cpuinfo("model name");
  m.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  m.cpu_mhz = std::atof(cpuinfo("cpu MHz").c_str());
  m.cpu_governor = read_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
  struct utsname u {};
  if (uname(&u) == 0) m.os_kernel = u.release;
  m.compiler = compiler_version(compiler);
  m.kiln_version = KILN_VERSION;
  m.last_level_cache_bytes = last_level_cache_bytes();
  m.memcpy_bytes_per_second = memcpy_bandwidth();
  return m;
}

std::string machine_to_json(const MachineRecord& m) {
  const nlohmann::json j = {{"cpu_model", m.cpu_model},
                            {"logical_cores", m.logical_cores},
                            {"cpu_mhz", m.cpu_mhz},
                            {"cpu_governor", m.cpu_governor},
                            {"os_kernel", m.os_kernel},
                            {"compiler", m.compiler},
                            {"kiln_version", m.kiln_version},
                            {"last_level_cache_bytes", m.last_level_cache_bytes},
                            {"memcpy_bytes_per_second", m.memcpy_bytes_per_second}};
  return j.dump();
}

}  // namespace kiln::harness
