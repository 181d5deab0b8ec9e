// Epilogue folding: a bias add (and a tanh-GELU after it) that fusion left on its own right after a GEMM is
// handed back to the GEMM as a library epilogue (cuBLASLt BIAS / GELU_BIAS): `linear(x, w) + b` becomes
// `linear(x, w, b)`, `gelu_tanh(linear(x, w) + b)` becomes `linear(x, w, b) {activation="gelu_tanh"}`. A GELU
// folds even out of a larger fused group (its transcendental per element is what makes such a group
// instruction-bound); a bias add without one that fusion absorbed into a larger group stays there, where it
// costs one add. Only where the backend offers the epilogue (`supports`; empty: everywhere). Reassociating (one
// rounding instead of two or three), like the library's epilogue.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult fold_gemm_epilogues(const Graph& graph, const SupportsFn& supports = {});

}  // namespace kiln::passes
