// A kernel as a harness task: the members it was lowered from, as a small graph whose inputs and outputs are
// the kernel's own params in kernel order, so a candidate emitted by emit_harness_candidate (or proposed by
// anyone else for the same kernel) is verified and timed by the harness against the reference.
#pragma once

#include "harness/task.h"
#include "kernel/kernel_ir.h"

namespace kiln::kernel {

Result<harness::KernelTask> kernel_task(const Graph& graph, const Kernel& kernel);

}  // namespace kiln::kernel
