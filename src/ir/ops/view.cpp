// Placeholder: this family is being written.
#include "ir/ops/op_util.h"
namespace kiln {
KILN_PENDING_OP(reshape)
KILN_PENDING_OP(transpose)
KILN_PENDING_OP(broadcast)
KILN_PENDING_OP(concat)
KILN_PENDING_OP(split)
KILN_PENDING_OP(slice)
KILN_PENDING_OP(gather)
}  // namespace kiln
