// Placeholder: this family is being written.
#include "ir/ops/op_util.h"
namespace kiln {
KILN_PENDING_OP(reduce_sum)
KILN_PENDING_OP(reduce_mean)
KILN_PENDING_OP(reduce_max)
KILN_PENDING_OP(reduce_amax)
}  // namespace kiln
