// Planted: allocates and touches memory until something stops it (crashed: the worker's memory limit).
#include <cstring>
#include <vector>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  std::vector<std::vector<char>> hoard;
  for (int i = 0; i < 1024; ++i) {  // up to 64 GiB
    hoard.emplace_back(64u << 20);
    std::memset(hoard.back().data(), i, hoard.back().size());
  }
  return static_cast<int>(hoard.size());
}
