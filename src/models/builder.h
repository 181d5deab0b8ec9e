// models::Builder: a thin typed layer over Graph for writing model graphs the way PyTorch modules read.
//
// Name scopes give weights their PyTorch state_dict names ("double_blocks.3.img_attn.qkv.weight") and
// activations readable ones ("double_blocks.3.img_attn.qkv/linear"): weights use only '.', activations add a
// '/' stem, so the two never collide. Layer helpers (linear, layer_norm, rms_norm, ...) create their weights.
// A node the builder cannot add is a bug in the model code, not a user error: it aborts with the message.
//
// FP8: with `GemmPrecision::fp8` set, linear() inside an fp8 region (Builder::Fp8Region) stores its weight as
// f8e4m3 plus an f32 "<name>.weight_scale" input and quantizes its activation first (quantize +
// scaled_linear); elsewhere linears keep the activation dtype.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace kiln::models {

// How FP8 scales are laid out: one per tensor; per token x per output channel; or 1x128 activation blocks x
// 128x128 weight blocks.
enum class Fp8Scaling { tensor, channel, block };
const char* fp8_scaling_name(Fp8Scaling scaling);

struct GemmPrecision {
  bool fp8 = false;
  Fp8Scaling scaling = Fp8Scaling::channel;
};

class Builder {
 public:
  // `act` is the dtype of activations and of unquantized weights.
  Builder(std::string graph_name, DType act, GemmPrecision gemm = {});

  DType act_dtype() const { return act_; }
  Graph& graph() { return graph_; }
  // Hands the graph over; the builder must not be used afterwards.
  Graph finish();

  // ---- names ----

  // RAII scope: pushes a name component ("double_blocks", "3") for its lifetime.
  class Scope {
   public:
    Scope(Builder* builder, size_t depth) : builder_(builder), depth_(depth) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope();

   private:
    Builder* builder_;
    size_t depth_;
  };
  [[nodiscard]] Scope scope(const std::string& name);
  [[nodiscard]] Scope scope(int64_t index) { return scope(std::to_string(index)); }
  // "scope.path.leaf" (just "leaf" at the root).
  std::string scoped(const std::string& leaf) const;

  // RAII: linears created while one is alive are quantized when the precision is fp8.
  class Fp8Region {
   public:
    explicit Fp8Region(Builder* builder) : builder_(builder), saved_(builder->fp8_region_) {
      builder->fp8_region_ = true;
    }
    Fp8Region(const Fp8Region&) = delete;
    Fp8Region& operator=(const Fp8Region&) = delete;
    ~Fp8Region() { builder_->fp8_region_ = saved_; }

   private:
    Builder* builder_;
    bool saved_;
  };

  // ---- inputs and outputs ----

  // A graph input named exactly `name` (not scoped).
  ValueId input(const std::string& name, DType dtype, Shape shape, Binding binding);
  // A weight named scoped(leaf).
  ValueId weight(const std::string& leaf, Shape shape, std::optional<DType> dtype = std::nullopt);
  void output(const std::string& name, ValueId value);

  const TensorType& type(ValueId v) const { return graph_.value(v).type; }
  const Shape& shape(ValueId v) const { return graph_.value(v).type.shape; }
  DType dtype(ValueId v) const { return graph_.value(v).type.dtype; }

  // ---- raw nodes ----

  // One node; outputs are named scoped-stem ("<scope>/<stem>", stem defaulting to the op name).
  std::vector<ValueId> nodes(Op op, std::vector<ValueId> inputs, Attrs attrs = {}, const std::string& stem = "");
  ValueId node(Op op, std::vector<ValueId> inputs, Attrs attrs = {}, const std::string& stem = "");

  // ---- elementwise ----
  ValueId add(ValueId a, ValueId b) { return node(Op::add, {a, b}); }
  ValueId sub(ValueId a, ValueId b) { return node(Op::sub, {a, b}); }
  ValueId mul(ValueId a, ValueId b) { return node(Op::mul, {a, b}); }
  ValueId div(ValueId a, ValueId b) { return node(Op::div, {a, b}); }
  ValueId silu(ValueId x) { return node(Op::silu, {x}); }
  ValueId exp(ValueId x) { return node(Op::exp, {x}); }
  ValueId cos(ValueId x) { return node(Op::cos, {x}); }
  ValueId sin(ValueId x) { return node(Op::sin, {x}); }
  ValueId gelu_tanh(ValueId x) { return node(Op::gelu, {x}, {{"approximate", std::string("tanh")}}); }
  ValueId swiglu(ValueId x) { return node(Op::swiglu, {x}); }
  // Casts unless `x` already has `dtype`.
  ValueId cast(ValueId x, DType dtype);
  // A scalar constant (one `full` node per value and dtype, shared).
  ValueId scalar(double value, DType dtype);
  ValueId scalar(double value) { return scalar(value, act_); }
  ValueId add_scalar(ValueId x, double value) { return add(x, scalar(value, dtype(x))); }
  ValueId mul_scalar(ValueId x, double value) { return mul(x, scalar(value, dtype(x))); }
  ValueId arange(int64_t size, double start, double step, DType dtype = DType::f32);

  // ---- data movement ----
  ValueId reshape(ValueId x, Shape shape);
  ValueId transpose(ValueId x, std::vector<int64_t> perm);
  ValueId concat(std::vector<ValueId> xs, int64_t axis);
  std::vector<ValueId> split(ValueId x, int64_t axis, std::vector<int64_t> sizes);
  // `parts` equal pieces along `axis` (torch.chunk for divisible sizes).
  std::vector<ValueId> chunk(ValueId x, int64_t axis, int64_t parts);
  ValueId slice(ValueId x, int64_t axis, int64_t start, int64_t end);
  ValueId gather(ValueId data, ValueId indices, int64_t axis);

  // ---- layers (weights created under the current scope) ----

  // nn.Linear(in, out, bias) named `name`: weights "<name>.weight" [out, in] and "<name>.bias" [out].
  ValueId linear(ValueId x, const std::string& name, int64_t in, int64_t out, bool bias);
  // LayerNorm over the last axis without affine parameters.
  ValueId layer_norm(ValueId x, double eps);
  // RMSNorm over the last axis with a weight "<weight_name>" [dim] (a full leaf such as "query_norm.scale").
  ValueId rms_norm(ValueId x, const std::string& weight_name, int64_t dim, double eps);
  ValueId rope(ValueId x, ValueId cos, ValueId sin, const std::string& style);
  // q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]; scale 1/sqrt(D).
  ValueId attention(ValueId q, ValueId k, ValueId v, bool causal);

 private:
  std::string activation_name(const std::string& stem) const;

  Graph graph_;
  DType act_;
  GemmPrecision gemm_;
  bool fp8_region_ = false;
  std::vector<std::string> scope_;
  std::map<std::pair<double, DType>, ValueId> scalars_;
};

// ---- shared model pieces ----

// The sinusoidal timestep embedding of BFL FLUX / diffusers Timesteps(flip_sin_to_cos=True, shift 0):
// t [B] f32 -> [B, dim] f32 = cat(cos(a), sin(a)), a = (t * time_factor) * exp(-ln(max_period) * i / (dim/2)).
ValueId timestep_embedding(Builder& b, ValueId t, int64_t dim, double time_factor = 1000.0,
                           double max_period = 10000.0);

// Rotary angles from positions: ids [S, n_axes] f32 -> (cos, sin), each [S, sum(axes_dim)/2] f32, axis i
// contributing pos_i * theta^(-2j/d_i) for j < d_i/2 (BFL EmbedND, concatenated along the pair axis).
std::pair<ValueId, ValueId> rope_tables(Builder& b, ValueId ids, const std::vector<int64_t>& axes_dim, double theta);

// [B, S, H*D] -> [B, H, S, D] (reshape + transpose).
ValueId split_heads(Builder& b, ValueId x, int64_t heads, int64_t head_dim);
// [B, H, S, D] -> [B, S, H*D].
ValueId merge_heads(Builder& b, ValueId x);

}  // namespace kiln::models
