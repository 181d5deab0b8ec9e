// What the CPU dialect of the emitter (emit.cpp) adds to every module and decides from the kernel IR:
//   * the f32 transcendentals that kernels call instead of libm (exp, tanh, sigmoid, silu, gelu with tanh
//     or erf): libm's expf/tanhf/erff are scalar calls that keep a loop from vectorizing; these are
//     branch-free, so `omp simd` loops over them vectorize, and stay within a few f32 ulps of the exact
//     function everywhere (bounds: the source's comment, checked by tests/kernel/cpu_math_test.cpp);
//   * which stages only bf16/fp8 outputs see (where a bf16 product may stay unrounded);
//   * which inputs are laid out by the kernel's rows (what a row prefetch may fetch);
//   * which small 16-bit inputs every row reads alike (converted to f32 once per row range, not per row).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kernel/kernel_ir.h"

namespace kiln::kernel {

// C++ text that needs KILN_FN, kiln_as_float/kiln_as_uint (f32 <-> bits) and kiln_as_double/kiln_as_u64
// (f64 <-> bits) defined before it. Defines kiln_exp, kiln_tanh, kiln_sigmoid, kiln_silu, kiln_gelu_tanh and
// kiln_gelu_erf (float -> float), their kiln_-prefixed parts, and the coarse kiln_sigmoid_c, kiln_silu_c and
// kiln_gelu_tanh_c (relative error under 2^-14) for stages whose value only bf16/fp8 outputs see.
std::string_view cpu_math_source();

// Per stage: its value reaches outputs only through elementwise stages, and only bf16 or fp8 outputs, whose
// tolerance a skipped bf16 product rounding stays within (an f32 or f16 output would see it). Stage j reads
// stage i when i's value appears in j's expression (a read, or its recomputation when the row cache is off).
std::vector<bool> coarse_outputs_only(const Kernel& k);

// Per expression: it is rounded to bf16 or fp8 by every expression that uses it, and is no stage's value: a
// transcendental there may take its coarse form (2^-14 relative error, 1/128 of a bf16 ulp) in any stage, a
// reduction's included (a bf16 GELU's amax), since the rounding sees no more than a bf16/fp8 store would.
std::vector<bool> rounded_to_bf16_or_fp8(const Kernel& k);

// Per kernel input: the bytes of one row when every load of it reads row r's block [r * L, (r + 1) * L) (the
// input is laid out by the kernel's rows, L elements each), else 0.
std::vector<int64_t> row_block_bytes(const Kernel& k);

// Per kernel input: true when it is bf16 or f16, holds at most kRowInvariantElements elements, and no load of
// it depends on the row (a modulation's scale and shift, a norm's weight): the body converts it to f32 once per
// row range it runs (kiln_h<i>) instead of once per row: a modulated bf16 layernorm went from 11.2 to 13.2 GB/s
// from cache on the 2-vCPU dev VM.
inline constexpr int64_t kRowInvariantElements = 8192;
std::vector<bool> row_invariant_inputs(const Kernel& k);

// Per expression: the load it is a function of, when it is tabulated under Schedule::tables, else -1. That is
// an expression whose every leaf is one load of a bf16/f16 input (or a constant) and that applies a
// transcendental op (the op registry's kTraitTranscendental: exp, tanh, GELU, SiLU...) on the way: its
// value is one of 65536, kept in a table the module fills once with the exact-form functions. The emitter
// reads the largest one it meets on the way down from a stage's value (its parts are in the table): GELU-tanh
// of a bf16 element became a table read instead of ~40 vector operations, 1.05 -> 0.47 ns an element from
// cache on the 2-core AVX2 VM (session 22).
std::vector<int> tabulated_exprs(const Kernel& k);
bool has_tabulated_exprs(const Kernel& k);

// Schedule::pairs. A bf16 element is the high half of its f32, so a 32-bit word holding elements 2s and
// 2s + 1 gives both as f32 with a shift and a mask, and two f32 results go back into one word, rounded, with no
// pack or permute. A paired stage's one loop runs over those words and computes its expression twice, for
// the even and the odd element.
//
// The offset of element 2s of `offset` along `var` (s is vector_step_var(k)), when element 2s + 1 is the one
// after it in memory; else nullopt.
std::optional<IndexExpr> pair_offset(const Kernel& k, const IndexExpr& offset, int var);
// e / 2 exactly (every coefficient and the constant even), else nullopt.
std::optional<IndexExpr> halved(const IndexExpr& e);
// Whether the kernel can be paired: every stage with a loop has one loop, of even extent (a reduction's is
// reduced); along it every load is of a bf16 input a word at a time (no clamped loads), or of a row every
// kernel row reads alike (row_invariant_inputs, or an f32 one as small) at even offsets, or does not move;
// every output along it is bf16 stored a word at a time. At least one stage has a loop. `split_rows` (per
// input): the body keeps that row in f32 as its even elements, then its odd ones.
struct PairPlan {
  std::vector<bool> split_rows;
};
std::optional<PairPlan> pair_plan(const Kernel& k);
bool has_pairs(const Kernel& k);

}  // namespace kiln::kernel
