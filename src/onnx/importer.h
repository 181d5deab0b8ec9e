// The importer's working state, shared by its parts: what each ONNX value is while the graph is built (a
// constant known at import time, an IR value, or a deferred erf that only a GELU may consume), the emitter
// that folds constants through the reference implementations, and the hooks of the op lowerings
// (lower_ops.cpp) and the normalizing matchers (normalize.cpp). Internal to src/onnx/.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "onnx/import.h"

namespace onnx {
class NodeProto;
class AttributeProto;
class TensorProto;
}  // namespace onnx

namespace kiln::onnx {


// An ONNX value during import.
struct Sym {
  enum class Kind { absent, constant, value, erf } kind = Kind::absent;
  std::shared_ptr<const Tensor> tensor;  // constant
  ValueId value = -1;                    // value: the IR value; erf: the argument u
  double erf_offset = 0, erf_scale = 1;  // erf: erf_offset + erf_scale * erf(u)
  std::string name;                      // the ONNX name, for materialized constants
  bool initializer = false;              // an initializer: always a weight input (never a `full` splat)

  static Sym constant(Tensor t, std::string name = "") {
    Sym s;
    s.kind = Kind::constant;
    s.tensor = std::make_shared<const Tensor>(std::move(t));
    s.name = std::move(name);
    return s;
  }
  static Sym of(ValueId v) {
    Sym s;
    s.kind = Kind::value;
    s.value = v;
    return s;
  }
  bool is_constant() const { return kind == Kind::constant; }
  bool is_value() const { return kind == Kind::value; }
  bool present() const { return kind != Kind::absent; }
};

class Importer {
 public:
  Importer(const ImportOptions& options, int64_t opset) : options_(options), opset_(opset) {}

  Graph graph;
  std::map<std::string, Tensor> weights;
  int64_t opset() const { return opset_; }
  const ImportOptions& options() const { return options_; }

  // The type of a present, non-deferred symbol.
  Result<TensorType> type_of(const Sym& s) const;
  // An IR value for a symbol: constants become a `full` node (one value) or a weight input with their data.
  Result<ValueId> materialize(const Sym& s);
  // One kiln op: folded when every input is a constant, else a node (then the matchers run on it).
  Result<std::vector<Sym>> emit(Op op, const std::vector<Sym>& inputs, Attrs attrs = {});
  Result<Sym> emit1(Op op, const std::vector<Sym>& inputs, Attrs attrs = {});
  // A scalar constant of a dtype.
  static Sym scalar(double value, DType dtype);

  // Folding budget (ImportOptions::max_fold_elements): whether a constant of `numel` elements may be built,
  // charging it when it may.
  void note_initializer(int64_t numel) { largest_initializer_ = std::max(largest_initializer_, numel); }
  int64_t fold_cap() const { return std::max(options_.max_fold_elements, largest_initializer_); }
  bool try_charge_fold(int64_t numel);
  Status charge_fold(const Shape& shape);

  // The name new IR values get (the ONNX output name of the node being lowered).
  void set_stem(std::string stem) { stem_ = std::move(stem); }

  // The matchers (normalize.cpp): given a new node's output, a value that computes the same with kiln's
  // composite ops, or nullopt. They only read the graph and may add nodes.
  std::optional<ValueId> normalize(ValueId v);
  // Mul of an IR value by a deferred erf: the GELU forms (normalize.cpp). nullopt: not a GELU.
  Result<std::optional<Sym>> gelu_from_erf(const Sym& x, const Sym& erf);

  // Data of a constant IR value: a weight input's tensor, or nullptr.
  const Tensor* weight_data(ValueId v) const;
  // The one value of a constant IR value with a single element (full node or weight), or nullopt.
  std::optional<double> scalar_value(ValueId v) const;
  const Node* producer(ValueId v) const {
    const NodeId p = graph.value(v).producer;
    return p < 0 ? nullptr : &graph.node(p);
  }
  Result<ValueId> add_node1(Op op, std::vector<ValueId> inputs, Attrs attrs);

 private:
  ImportOptions options_;
  int64_t opset_;
  std::string stem_ = "v";
  // Keyed by the tensor, which the entry keeps alive (a freed tensor's address could be reused).
  std::map<const Tensor*, std::pair<std::shared_ptr<const Tensor>, ValueId>> materialized_;
  std::map<std::string, ValueId> splats_;  // one `full` node per dtype, shape and value
  int depth_ = 0;
  int64_t largest_initializer_ = 0;
  int64_t folded_total_ = 0;  // normalize() re-entry guard
};

// Lowers one ONNX node (lower_ops.cpp): `in` holds its input symbols (absent for empty names); returns one
// symbol per node output. Errors do not name the node; the caller adds that.
Result<std::vector<Sym>> lower_node(Importer& im, const ::onnx::NodeProto& node, const std::vector<Sym>& in);

// An ONNX name as a kiln value name: characters outside [A-Za-z0-9_.:/-] become '_', at most 200 of them.
std::string sanitize_name(const std::string& name);

// Decodes a TensorProto (import.cpp): raw, typed or external data, checked against its dims.
Result<Tensor> decode_tensor(const ::onnx::TensorProto& t, const std::string& base_dir);

// Host-side helpers for folding (fold.cpp).
namespace fold {
// numpy broadcasting of two shapes, or an error.
Result<Shape> broadcast(const Shape& a, const Shape& b);
// Elementwise over broadcast inputs: out[i] = fn(a[ia], b[ib]) with values as doubles (exact for integers
// below 2^53), stored in `dtype`.
// Each checks its output against the importer's folding budget first.
Result<Tensor> binary(Importer& im, const Tensor& a, const Tensor& b, DType dtype, double (*fn)(double, double));
Result<Tensor> where(Importer& im, const Tensor& cond, const Tensor& x, const Tensor& y);
// Integer arithmetic on i32/i64 (ONNX Add/Sub/Mul/Div semantics, truncating division).
Result<Tensor> integer_binary(Importer& im, const Tensor& a, const Tensor& b, char op);
Tensor trilu(const Tensor& x, int64_t k, bool upper);
Result<Tensor> gather_elements(const Tensor& data, const Tensor& indices, int64_t axis);
bool all_equal_to(const Tensor& t, double value);
std::vector<int64_t> to_ints(const Tensor& t);
Tensor from_ints(const std::vector<int64_t>& values, DType dtype = DType::i64, std::optional<Shape> shape = {});
}  // namespace fold

}  // namespace kiln::onnx
