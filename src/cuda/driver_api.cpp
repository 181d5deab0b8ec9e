#include "cuda/driver_api.h"

#include <dlfcn.h>
#include <fmt/format.h>

namespace kiln::cuda {

#define KILN_CUDA_SYMBOL_NAME_INNER(name) #name
#define KILN_CUDA_SYMBOL_NAME(name) KILN_CUDA_SYMBOL_NAME_INNER(name)  // after cuda.h's version macros

static Result<const DriverApi*> load() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr)
    return make_error(ErrorCode::device_error,
                      fmt::format("no CUDA driver on this machine (dlopen libcuda.so.1: {})", dlerror()));
  static DriverApi api;
#define KILN_CUDA_LOOKUP(name)                                                                          \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, KILN_CUDA_SYMBOL_NAME(name)));         \
  if (api.name == nullptr)                                                                              \
    return make_error(ErrorCode::device_error, fmt::format("the CUDA driver lacks {}: driver too old",  \
                                                           KILN_CUDA_SYMBOL_NAME(name)));
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_LOOKUP)
#undef KILN_CUDA_LOOKUP
  return &api;
}

Result<const DriverApi*> driver_api() {
  static const Result<const DriverApi*> loaded = load();
  return loaded;
}

}  // namespace kiln::cuda
