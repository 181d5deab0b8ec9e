// KILN_CHECK: broken invariants (programming errors) abort with a message naming the place.
// Expected failures (bad input, unsupported op, mismatch) are values: see result.h.
//   KILN_CHECK(cond);                                  the condition's text
//   KILN_CHECK(cond, "printf format", args...);        and why, formatted
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace kiln::detail {

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "kiln: internal error at %s:%d: check failed: %s\n", file, line, cond);
  std::abort();
}

[[noreturn]] __attribute__((format(printf, 4, 5))) inline void check_failed(const char* file, int line,
                                                                          const char* cond, const char* why, ...) {
  std::fprintf(stderr, "kiln: internal error at %s:%d: check failed: %s: ", file, line, cond);
  va_list args;
  va_start(args, why);
  std::vfprintf(stderr, why, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

}  // namespace kiln::detail

#define KILN_CHECK(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond)) ::kiln::detail::check_failed(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
