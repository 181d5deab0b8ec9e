// Planted: tries to fork 64 spinning children, then spins itself (run-timeout; the worker may not start
// processes, and the whole process group dies at the limit).
#include <unistd.h>

#include <cstdio>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  int forked = 0;
  for (int i = 0; i < 64; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      for (volatile int spin = 0;; spin = spin + 1) {
      }
    }
    if (pid > 0) ++forked;
  }
  std::fprintf(stderr, "forks succeeded: %d\n", forked);
  std::fflush(stderr);
  for (volatile int spin = 0;; spin = spin + 1) {
  }
  return 0;
}
