// Placeholder: this family is being written.
#include "ir/ops/op_util.h"
namespace kiln {
KILN_PENDING_OP(matmul)
KILN_PENDING_OP(linear)
KILN_PENDING_OP(scaled_linear)
}  // namespace kiln
