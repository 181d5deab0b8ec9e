// Weight-scale packing: FP8 checkpoints store weight scales in their own layout (per channel [N, 1]; 128x128
// blocks as the dense row-major grid [N/128, K/128]), while the GEMM library reads per-channel scales as a
// contiguous vector [N] (cuBLASLt OUTER_VEC_32F) and a block grid with rows padded to 4 scales
// (ops::gemm_weight_block_scale_shape). Where a scaled_linear's weight scales are not yet in that layout
// (ws_layout "row_major"), this pass inserts one pack_scales node ("vector" or "blocks") per distinct scale
// tensor and marks the GEMM ws_layout "packed". Block grids whose rows are already aligned (K/128 a multiple of
// 4, every FLUX and Llama projection) and per-tensor scales are the GEMM's layout as stored: for those the pass
// inserts nothing and reports them (an identity pack would be a load-time copy that buys nothing).
//
// The one legality rule: the scales are a load-time value (binding time `weight`, passes/staging.h), so the
// packing depends on weights only and staging moves it to the load-time stage — it runs once, never per call.
// Scales computed per step or per call are left alone and reported. Per-tensor scales are a scalar in both
// layouts and need nothing. Run after merge-gemms, so merged scales are concatenated in the checkpoint layout
// and packed once.
//
// Exact: pack_scales moves f32 values without changing them and the GEMM reads each scale from its new
// place, so the reference executor's outputs are bit-identical. Idempotent: packed GEMMs are skipped.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult pack_weight_scales(const Graph& graph);

}  // namespace kiln::passes
