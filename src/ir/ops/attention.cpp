// Placeholder: this family is being written.
#include "ir/ops/op_util.h"
namespace kiln {
KILN_PENDING_OP(attention)
}  // namespace kiln
