// Concat piece joining: a concat along a row axis whose every piece is the output of its own fused group, read
// by nothing but the concat, joins those groups into the concat's group when the pieces are one kernel over
// different rows (kernel::merge_concat_pieces). FLUX's joint attention concatenates the text and image stream's
// q, k (after their RMSNorm+RoPE) and v along the token axis: joined, each is one kernel over all 4608 rows that
// loads a row's inputs from its own stream, instead of a kernel per stream and a copy into the joint tensor.
// Exact: every element is computed by the same arithmetic from the same inputs. Run after canonicalize-views
// (groups and their index maps are final).
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

PassResult join_concat_pieces(const Graph& graph);

}  // namespace kiln::passes
