// Host-memory helpers for pitched tensors (backend.h's DeviceTensor): the CPU backend gathers a pitched
// library operand into a dense buffer and scatters a dense result into a pitched window.
#pragma once

#include "backend/backend.h"

namespace kiln::backend {

// Copies the elements of `from` (pitched, host memory) into `dense` (numel x element size bytes).
void gather_pitched(const DeviceTensor& from, void* dense);
// Copies `dense` into the pitched window `to` (host memory).
void scatter_pitched(const void* dense, const DeviceTensor& to);

}  // namespace kiln::backend
