// Rematerialization: a fused group that reads a value another group computes recomputes it instead, when the
// value is a short elementwise chain of that group whose own inputs are fewer bytes than the value. An FP8
// tensor-scaled quantize is the case it was written for: the amax group casts the bf16 activation to f32 and
// reduces it per row; the cast group, which needs the whole tensor's amax first and so cannot join it, read
// that f32 copy (4 bytes an element, written and read once more) where the bf16 activation (2 bytes) gives the
// same values.
//
// The rule, per value v of group A read by group B:
//   * v's cone is the members of A it is computed from, back to values A reads from outside; every one is an
//     elementwise op (no view, no reduction) with v's shape, at most kRematerializeMaxNodes of them;
//   * the cone's inputs (whole tensors, each counted once) are fewer bytes than v.
// Failing that, v may be a chain of one-input elementwise members over a value u of A itself with fewer bytes
// (a modulated layernorm's f32 cast of its bf16 output, which the quantize cast group read): the cone is that
// chain and its input u, which A then writes instead of v.
// B then reads the cone's inputs and computes v itself; A writes v only if someone else still reads it. The
// values are the same ops on the same inputs, so the rewrite is exact.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

inline constexpr int kRematerializeMaxNodes = 8;

PassResult rematerialize(const Graph& graph);

}  // namespace kiln::passes
