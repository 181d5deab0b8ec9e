// ONNX import: reads an ONNX model (ModelProto, any opset the importer knows the op forms of) into kiln's IR.
//
// Initializers become weight inputs with their data (external data files are read relative to the model);
// graph inputs become per-call inputs (or per-step ones, by name); symbolic dimensions are bound from the
// options, and an unbound one is an error naming the input and the dimension. With every shape static,
// shape arithmetic (Shape, Gather, Concat, Range, masks built from Trilu/Where, ...) folds to constants.
// Decomposed forms are normalized to kiln's composite ops (layernorm, rmsnorm, gelu, linear, attention, rope)
// by matchers over the IR as it is built, so the passes see the same graph a zoo builder writes.
// Any input gives a value or an error naming the node (name, op type, opset), never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>

#include "ir/graph.h"

namespace kiln::onnx {

struct ImportOptions {
  std::map<std::string, int64_t> dims;  // symbolic dimension name -> value (e.g. batch=1, seq=64)
  std::set<std::string> per_step;       // graph inputs that change once per step (timestep, guidance)
  bool normalize = true;                // recognize decomposed forms (off: primitives as exported)
  // Constant folding builds no tensor above max(this, the largest initializer) elements, and all folded
  // tensors together stay under 16 times that; beyond, a foldable op stays a node (or, for an op kiln can only
  // fold, is an error). Bounds memory for any input.
  int64_t max_fold_elements = int64_t{1} << 26;
};

struct ImportedModel {
  Graph graph;
  std::map<std::string, Tensor> weights;  // every weight input of `graph`, by value name
  int64_t opset = 0;                      // the default-domain opset the model was exported with
};

// Whether this build can import ONNX (it needs libonnx-dev and libprotobuf-dev at configure time).
bool onnx_available();

// Reads `path`; external data files are looked up beside it.
Result<ImportedModel> import_onnx_file(const std::string& path, const ImportOptions& options = {});
// Parses a model from memory. `base_dir` is where external data files are; empty: external data is an error.
// `source` names the model in errors.
Result<ImportedModel> import_onnx_bytes(std::span<const std::byte> bytes, const std::string& base_dir,
                                        const std::string& source, const ImportOptions& options = {});

}  // namespace kiln::onnx
