// Epilogue folding: a bias add (and a tanh-GELU after it) that fusion left on its own right after a GEMM is
// handed back to the GEMM as a library epilogue (cuBLASLt BIAS / GELU_BIAS): `linear(x, w) + b` becomes
// `linear(x, w, b)`, `gelu_tanh(linear(x, w) + b)` becomes `linear(x, w, b) {activation="gelu_tanh"}`. A bias
// add that fusion absorbed into a larger group stays there: it is already free. Reassociating (one rounding
// instead of two), like the library's epilogue.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult fold_gemm_epilogues(const Graph& graph);

}  // namespace kiln::passes
