// Late columns of a weight-bound GEMM get their own GEMM, so that a second lane can compute them while the first
// runs the heavy work that needs only the early ones. FLUX's adaLN modulation is the case: one GEMV (M = 1)
// reads 226 MB of weights (the double block's image and text modulations, merged) and gives six vectors per
// stream, of which only the first layernorm's shift and scale are needed before the q/k/v GEMMs; the gates
// and the second layernorm's shift and scale wait behind attention. In one GEMV the q/k/v GEMMs wait for all
// of them; cut in two, the late two thirds are memory-bound work beside compute-bound GEMMs.
//
// When it applies: linear or scaled_linear (no activation; per-tensor or per-channel weight scales, or 128x128
// blocks where every cut is a multiple of 128) whose output is read only through views that keep a window of
// its columns (a split or unit-step slice along the last axis, a reshape that keeps the last axis), where
//   - the GEMM is weight-bound: its weights are at least kWeightBound times the bytes of its input rows, so
//     reading the input twice costs nothing that counts;
//   - the "first wave" is the heavy ops (matmuls, attention) that depend on the GEMM and on no heavy op other
//     than it and its ancestors: the heavy work the GEMM alone holds up. A reader of the columns is early when
//     it is one of them or an ancestor of one, else late;
//   - early and late readers read disjoint column sets, both non-empty.
// The early columns (gathered in order) become one GEMM and the late ones another, weights, biases and scales
// gathered along N as load-time slices and concats; every reader reads its window of the new GEMM that has its
// columns. Columns no one reads are not computed.
//
// Runs only when the plan has two lanes or more (PipelineOptions::lanes): on one lane the cut is two launches
// for the same bytes. Numerics: every output element is the same dot product over the same operands, so the
// reference executor's results are bit-identical (exact). Idempotent: the early GEMM's readers are all early, and
// the late GEMM holds up no heavy op alone.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

inline constexpr double kWeightBound = 64;

PassResult defer_late_columns(const Graph& graph);

}  // namespace kiln::passes
