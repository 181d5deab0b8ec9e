// The machine record every timing carries: what ran it (CPU, cores, clock, cache, memory bandwidth, kernel,
// compiler, kiln) so that figures from different machines or toolchains are never compared as if alike.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::harness {

struct MachineRecord {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int logical_cores = 0;
  double cpu_mhz = 0;        // cpu0's current clock when recorded (0: unknown)
  std::string cpu_governor;  // cpufreq scaling governor ("" when the machine exposes none)
  std::string os_kernel;     // uname release
  std::string compiler;      // first line of `<compiler> --version`
  std::string kiln_version;
  int64_t last_level_cache_bytes = 0;
  double memcpy_bytes_per_second = 0;  // bytes read + written per second by a large memcpy, best of several
};

MachineRecord machine_record(const std::string& compiler = "g++");

// The largest cache of cpu0 (/sys/devices/system/cpu/cpu0/cache); 32 MiB when it cannot be read.
int64_t last_level_cache_bytes();

// Measured once per process on buffers larger than the last-level cache and cached: bytes moved (read plus
// written) per second by memcpy, the best of several repetitions (noise only ever slows a copy down).
double memcpy_bandwidth();
// One measurement, not cached: bytes moved (read plus written) per second by memcpy of one buffer of
// `buffer_bytes` into another, the best of five copies, split into `threads` parts copied at once. A buffer the
// last-level cache holds is copied from the cache.
double measure_memcpy_bandwidth(int threads, int64_t buffer_bytes);
// The same on a buffer twice the last-level cache (64 MB to 512 MB): the machine's memory, not its cache.
double measure_memcpy_bandwidth(int threads);
// The same copy split over `threads` threads at once (each copies its part), measured once per thread count:
// what a plan whose kernels run on that many threads can stream. 1: memcpy_bandwidth().
double memcpy_bandwidth_on(int threads);
// Measures again and keeps the better figure: a first measurement taken while other processes saturated the
// memory bus would put the floor above what a correct kernel reaches on a quiet moment.
double remeasure_memcpy_bandwidth();

std::string machine_to_json(const MachineRecord& machine);

}  // namespace kiln::harness
