// kiln-worker: the process that loads and runs candidate kernels (harness/worker.h). Started by the harness
// inside a sandbox, one per request; never run by hand except to debug a request left in a kept scratch dir.
#include "harness/worker.h"

#if defined(__SANITIZE_ADDRESS__)
#define KILN_WORKER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_WORKER_ASAN 1
#endif
#endif

#ifdef KILN_WORKER_ASAN
// Leak checking is off by default: candidates may leak, and the worker ends with _exit anyway.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

int main(int argc, char** argv) { return kiln::harness::worker_main(argc, argv); }
