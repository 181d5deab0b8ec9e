// Placeholder: this family is being written.
#include "ir/ops/op_util.h"
namespace kiln {
KILN_PENDING_OP(layernorm)
KILN_PENDING_OP(rmsnorm)
KILN_PENDING_OP(softmax)
KILN_PENDING_OP(rope)
}  // namespace kiln
