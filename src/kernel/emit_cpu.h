// What the CPU dialect of the emitter (emit.cpp) adds to every module and decides from the kernel IR:
//   * the f32 transcendentals that kernels call instead of libm (exp, tanh, sigmoid, silu, gelu with tanh
//     or erf): libm's expf/tanhf/erff are scalar calls that keep a loop from vectorizing; these are
//     branch-free, so `omp simd` loops over them vectorize, and stay within a few f32 ulps of the exact
//     function everywhere (bounds: the source's comment, checked by tests/kernel/cpu_math_test.cpp);
//   * which stages only bf16/fp8 outputs see (where a bf16 product may stay unrounded);
//   * which inputs are laid out by the kernel's rows (what a row prefetch may fetch).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kernel/kernel_ir.h"

namespace kiln::kernel {

// C++ text that needs KILN_FN, kiln_as_float/kiln_as_uint (f32 <-> bits) and kiln_as_double/kiln_as_u64
// (f64 <-> bits) defined before it. Defines kiln_exp, kiln_tanh, kiln_sigmoid, kiln_silu, kiln_gelu_tanh and
// kiln_gelu_erf (float -> float), and their kiln_-prefixed parts.
std::string_view cpu_math_source();

// Per stage: its value reaches outputs only through elementwise stages, and only bf16 or fp8 outputs, whose
// tolerance a skipped bf16 product rounding stays within (an f32 or f16 output would see it). Stage j reads
// stage i when i's value appears in j's expression (a read, or its recomputation when the row cache is off).
std::vector<bool> coarse_outputs_only(const Kernel& k);

// Per kernel input: the bytes of one row when every load of it reads row r's block [r * L, (r + 1) * L) (the
// input is laid out by the kernel's rows, L elements each), else 0.
std::vector<int64_t> row_block_bytes(const Kernel& k);

}  // namespace kiln::kernel
