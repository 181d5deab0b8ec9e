// Horizontal GEMM merge: GEMMs that read the same activation (Q/K/V projections, gate/up of a SwiGLU MLP,
// per-stream modulation heads reading one silu(vec)) become one GEMM over concatenated weights, followed by a
// `split` of its output along the last axis. One wide GEMM keeps the tensor cores busier and reads the
// activation once instead of n times.
//
// What it may change: each merged group's GEMMs are replaced, at the position of the group's first GEMM, by
// concat nodes over the weights (and biases, and FP8 weight scales), the merged GEMM and a split whose outputs
// keep the original output names, so consumers and graph outputs are untouched. Weight-time nodes that the
// merged operands need (casts, transposes of weights) are moved up to that position. Nothing else moves.
//
// When GEMMs merge (legality is written once, operand_blocker and join_blocker in merge_gemms.cpp):
//  - linear(x, w_i[N_i, K], [b_i]) with the identical x; scaled_linear(xq, xs, wq_i, ws_i, [b_i]) with the
//    identical xq and xs and equal attributes (out_dtype), weights of one dtype.
//  - Every weight, bias and scale is a load-time value (binding time `weight`, see passes/staging.h), so
//    the concats run once at load time; a GEMM whose activation is itself load-time is left alone.
//  - Biases: a member without one gets a `full` of -0.0 (x + -0.0 == x for every x, signed zeros included,
//    so the merged result stays bit-identical); present biases must share one dtype.
//  - FP8 weight scales: per-channel [N_i, 1] concatenate; per-tensor [] become per-channel by broadcast to
//    [N_i, 1] (the same scale on every row, so exact) and join per-channel ones; 128x128 block scales
//    [ceil(N_i/128), ceil(K/128)] concatenate when every member but the last has N_i % 128 == 0 (a partial
//    block may only sit at the end); block and row scales never mix.
//  - Size, from the cost model: a member joins only while what it saves stays measurable against the merged
//    GEMM. Joining saves one read of the shared activation (its bytes) and one launch (launch_overhead_bytes:
//    the bytes the device could have streamed while the launch, ramp-up and tail of one more kernel cost);
//    the merged GEMM moves its activation once plus every member's weights, scales, biases and outputs. A
//    member joins while  activation bytes + launch_overhead_bytes >= min_relative_saving x merged bytes,
//    i.e. the merged GEMM is capped at (activation + launch) / min_relative_saving. Beyond that the saving is
//    below the run-to-run noise of the GEMM itself (the end-to-end gate could not see it), while the merged
//    weight is one more load-time copy of that size. With the defaults (16 MB, 1%) the cap is 1.6 GB plus 100x
//    the activation: Q/K/V over a [4096, 3072] activation merge (its 25 MB re-read is worth 4 GB of merged
//    GEMM), while 77 modulation heads over one [1, 3072] vector merge in groups of ~1.6 GB, not into one
//    6.5 GB GEMM. The next member that does not fit starts the next group.
// Candidates that share an activation but cannot merge are reported in the notes with the reason.
//
// Numerics: reassociating by the policy (a GPU library may tile the wider GEMM differently), but every
// output element is the same dot product, so the reference executor's results are bit-identical.
// Idempotent: a second run finds no group of two or more.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

struct MergeOptions {
  double launch_overhead_bytes = 16e6;  // ~4 us of one more kernel at ~4 TB/s HBM
  double min_relative_saving = 0.01;    // savings below 1% of the merged GEMM are within noise
};

PassResult merge_parallel_gemms(const Graph& graph);  // with the default MergeOptions
PassResult merge_parallel_gemms_with(const Graph& graph, const MergeOptions& options);

}  // namespace kiln::passes
