// libFuzzer target: the ONNX importer on arbitrary bytes (seeds: tests/fuzz/corpus/onnx/, small models
// written with protoc, and the GPT-2 block whose weights are external data). Besides "no crash, no hang, no
// unbounded memory", it checks what the importer promises: an error names the source, and an accepted model
// verifies, carries data for every weight, and (when small) runs on the reference executor to a value or an
// error. External data is read from the GPT-2 block's folder (read only; locations cannot leave it).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "models/weights.h"
#include "onnx/import.h"
#include "ref/executor.h"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_onnx: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::onnx::ImportOptions options;
  options.dims = {{"batch", 1}, {"seq", 4}};
  options.max_fold_elements = int64_t{1} << 16;
  auto model = kiln::onnx::import_onnx_bytes(std::span(reinterpret_cast<const std::byte*>(data), size),
                                             KILN_FUZZ_ONNX_DATA_DIR, "fuzz.onnx", options);
  if (!model.ok()) {
    if (model.error().message.rfind("fuzz.onnx", 0) != 0) fail("error does not name the source", model.error().message);
    return 0;
  }
  kiln::Status verified = kiln::verify_graph(model->graph);
  if (!verified.ok()) fail("imported graph does not verify", verified.error().message);
  kiln::Status weights = kiln::models::check_weights_match(model->graph, model->weights);
  if (!weights.ok()) fail("imported weights do not match the graph", weights.error().message);
  const kiln::GraphCost cost = kiln::graph_cost(model->graph);
  double bytes = 0;
  for (const kiln::Value& v : model->graph.values()) bytes += static_cast<double>(kiln::type_bytes(v.type));
  if (cost.flops < 2e7 && bytes < 64e6) {
    std::map<std::string, kiln::Tensor> inputs = kiln::models::random_inputs(model->graph, 1);
    for (auto& [name, t] : model->weights) inputs[name] = t;
    (void)kiln::ref::run_graph(model->graph, inputs);
  }
  return 0;
}
