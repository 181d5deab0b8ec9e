// KILN_CHECK: broken invariants (programming errors) abort with a message naming the place.
// Expected failures (bad input, unsupported op, mismatch) are values: see result.h.
#pragma once

#include <cstdio>
#include <cstdlib>

#define KILN_CHECK(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "kiln: internal error at %s:%d: check failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                                      \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
