// The roofline: what a step of a Plan must cost at least on a device, from its work (FLOPs and the minimum
// bytes it moves, the op costs of the IR) and the device's measured rates (DeviceInfo). A step is
// memory-bound when moving its bytes at the device bandwidth takes longer than doing its FLOPs at the
// device's FLOP rate, compute-bound otherwise; its floor is the larger of the two times, and its headroom is
// how many times slower than that floor it runs.
#pragma once

#include <string_view>

#include "backend/backend.h"
#include "backend/plan.h"
#include "ir/op_class.h"

namespace kiln::profile {

enum class Bound { memory, compute };
std::string_view bound_name(Bound bound);

struct RooflinePoint {
  double flops = 0;
  double bytes = 0;
  double memory_seconds = 0;   // bytes / bandwidth
  double compute_seconds = 0;  // flops / FLOP rate
  double floor_seconds = 0;    // the larger of the two
  Bound bound = Bound::memory;
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }  // FLOPs per byte
};

// A device without measured rates (0) is an invariant violation: every backend measures them.
RooflinePoint roofline_point(double flops, double bytes, const backend::DeviceInfo& device);

// A step's work: a generated kernel reads each of its parameters once and writes each output once, with the
// FLOPs of all its members; a library call or a reference fallback costs what its nodes' op costs say.
OpCost step_cost(const Graph& graph, const backend::Plan::Step& step);

// The class a step is reported under: the most specific class among its members (a group that quantizes is
// "quantize", a GEMM with an epilogue is "matmul"), in the order of ir/op_class.h.
OpClass step_op_class(const Graph& graph, const backend::Plan::Step& step);

}  // namespace kiln::profile
