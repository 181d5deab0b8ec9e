// Deterministic graph inputs (splitmix64, Irwin-Hall normals: integer and exactly rounded IEEE arithmetic only,
// so values are bit-identical on every platform) and the safetensors reader and writer.
#include "models/weights.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>
#include <nlohmann/json.hpp>
#include <vector>

namespace kiln::models {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// ---- PRNG ----

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

class Rng {
 public:
  Rng(uint64_t seed, std::string_view stream) : state_(seed ^ fnv1a(stream)) { splitmix64(state_); }
  // [0, 1), 53 bits.
  double uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }
  // Mean 0, variance 1: the sum of four uniforms (Irwin-Hall), support +-3.46.
  double normal() { return (uniform() + uniform() + uniform() + uniform() - 2.0) * kIrwinHallScale; }
  uint64_t next() { return splitmix64(state_); }

 private:
  static constexpr double kIrwinHallScale = 1.7320508075688772;  // sqrt(12 / 4)
  uint64_t state_;
};

void fill(Tensor& t, const std::vector<double>& values) {
  const size_t size = dtype_size(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i) store_element(t.dtype(), values[i], t.data() + i * size);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// ---- weights ----

// Matrix-like weights [..., K]: N(0, 1/K); norm weights (rank 1, "norm" in the name, not a bias): 1 + N(0, 0.1^2);
// other vectors (biases): N(0, 0.05^2); embedding tables: N(0, 1).
std::vector<double> weight_values(const std::string& name, const Shape& shape, uint64_t seed) {
  Rng rng(seed, name);
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  double scale = 1.0, offset = 0.0;
  if (shape.size() <= 1) {
    if (contains(name, "norm") && !ends_with(name, ".bias")) {
      scale = 0.1;
      offset = 1.0;
    } else {
      scale = 0.05;
    }
  } else if (!contains(name, "embed_tokens")) {
    scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, shape.back())));
  }
  for (double& x : v) x = offset + scale * rng.normal();
  return v;
}

// FP8 weight w [N, K] and its scale s ([] per tensor, [N, 1] per channel, [ceil(N/128), ceil(K/128)] per
// block): s = amax(group) / 448 (rounded to f32), w = round_f8(value / s).
void quantize_weight(const std::vector<double>& values, Tensor& w, Tensor& s) {
  KILN_CHECK(w.rank() == 2);
  const int64_t rows = w.shape()[0], cols = w.shape()[1];
  const Shape& ss = s.shape();
  int64_t block_rows = rows, block_cols = cols;  // per tensor
  if (ss.size() == 2 && ss[0] == rows && ss[1] == 1 && rows > 1) {
    block_rows = 1;
  } else if (ss.size() == 2) {
    block_rows = 128;
    block_cols = 128;
  }
  const int64_t grid_rows = (rows + block_rows - 1) / block_rows, grid_cols = (cols + block_cols - 1) / block_cols;
  KILN_CHECK(s.numel() == grid_rows * grid_cols);
  const double fmax = dtype_max_finite(w.dtype());
  std::vector<double> scales(static_cast<size_t>(s.numel()), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double& m = scales[(r / block_rows) * grid_cols + c / block_cols];
      m = std::max(m, std::fabs(values[r * cols + c]));
    }
  }
  for (double& m : scales) m = m > 0 ? round_to_dtype(m / fmax, DType::f32) : 1.0;
  fill(s, scales);
  std::vector<double> q(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double scale = scales[(r / block_rows) * grid_cols + c / block_cols];
      q[r * cols + c] = std::clamp(values[r * cols + c] / scale, -fmax, fmax);
    }
  }
  fill(w, q);
}

// ---- positions ----

// An image of `tokens` patches as h x w rows and columns, h the largest divisor <= sqrt(tokens).
std::pair<int64_t, int64_t> image_grid(int64_t tokens) {
  int64_t h = 1;
  for (int64_t d = 1; d * d <= tokens; ++d) {
    if (tokens % d == 0) h = d;
  }
  return {h, tokens / h};
}

// ids [S, axes]. FLUX.1: text (0, 0, 0), image (0, row, col). FLUX.2 (4 axes): text (0, 0, 0, l), image
// (0, row, col, 0). Qwen-Image: image rows/cols centred (-(h - h/2) .. h/2 - 1), text tokens at
// max(h/2, w/2) + l on every axis.
std::vector<double> ids_values(const Graph& graph, bool is_text, const Shape& shape) {
  const int64_t seq = shape[0], axes = shape[1];
  std::vector<double> v(static_cast<size_t>(seq * axes), 0.0);
  int64_t image_tokens = seq;
  if (is_text) {
    auto img = graph.find_value("img_ids");
    image_tokens = img ? graph.value(*img).type.shape[0] : 1;
  }
  const auto [h, w] = image_grid(image_tokens);
  const bool qwen = graph.name.rfind("qwen", 0) == 0;
  for (int64_t i = 0; i < seq; ++i) {
    double* row = &v[i * axes];
    if (is_text) {
      if (qwen) {
        for (int64_t a = 0; a < axes; ++a) row[a] = static_cast<double>(std::max(h / 2, w / 2) + i);
      } else if (axes == 4) {
        row[3] = static_cast<double>(i);
      }
    } else if (axes >= 3) {
      row[1] = static_cast<double>(i / w - (qwen ? h - h / 2 : 0));
      row[2] = static_cast<double>(i % w - (qwen ? w - w / 2 : 0));
    }
  }
  return v;
}

// Index inputs feeding a gather get values in [0, size of the gathered axis).
int64_t index_limit(const Graph& graph, ValueId id) {
  for (const Node& n : graph.nodes()) {
    if (n.op == Op::gather && n.inputs.size() == 2 && n.inputs[1] == id) {
      const Shape& data = graph.value(n.inputs[0]).type.shape;
      int64_t axis = n.attrs.get_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(data.size());
      if (axis >= 0 && axis < static_cast<int64_t>(data.size()) && data[axis] > 0) return data[axis];
    }
  }
  return 100;
}

std::vector<double> activation_values(const Graph& graph, const Value& value, uint64_t seed) {
  const std::string& name = value.name;
  const Shape& shape = value.type.shape;
  const int64_t n = shape_numel(shape);
  Rng rng(seed, name);
  std::vector<double> v(static_cast<size_t>(n));
  if ((name == "img_ids" || name == "txt_ids") && shape.size() == 2) return ids_values(graph, name == "txt_ids", shape);
  if (name == "position_ids") {
    int64_t offset = 0;  // decode: positions continue after the KV cache
    if (auto past = graph.find_value("past_k.0")) offset = graph.value(*past).type.shape.at(2);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(offset + i);
    return v;
  }
  if (name == "cos" || name == "sin") {
    Rng angles(seed, "rope_angles");
    for (double& x : v) {
      const double a = angles.uniform() * 2.0 * std::numbers::pi;
      x = name == "cos" ? std::cos(a) : std::sin(a);
    }
    return v;
  }
  if (name == "timesteps" || name == "timestep") {
    for (double& x : v) x = 0.1 + 0.8 * rng.uniform();
    return v;
  }
  if (name == "guidance" || name == "guidance_scale") {
    std::fill(v.begin(), v.end(), name == "guidance" ? 3.5 : 4.0);
    return v;
  }
  for (double& x : v) x = rng.normal();
  return v;
}

}  // namespace

std::map<std::string, Tensor> random_inputs(const Graph& graph, uint64_t seed) {
  std::map<std::string, Tensor> out;
  for (const GraphInput& in : graph.inputs()) {
    const Value& value = graph.value(in.value);
    if (out.count(value.name)) continue;  // a scale filled with its FP8 weight
    Tensor t(value.type.dtype, value.type.shape);
    if (dtype_is_integer(value.type.dtype) || value.type.dtype == DType::boolean) {
      Rng rng(seed, value.name);
      const uint64_t limit = value.type.dtype == DType::boolean ? 2 : static_cast<uint64_t>(index_limit(graph, in.value));
      for (int64_t i = 0; i < t.numel(); ++i) t.set_int(i, static_cast<int64_t>(rng.next() % limit));
    } else if (in.binding != Binding::weight) {
      fill(t, activation_values(graph, value, seed));
    } else if (value.type.dtype == DType::f8e4m3 || value.type.dtype == DType::f8e5m2) {
      const std::vector<double> values = weight_values(value.name, value.type.shape, seed);
      auto scale_id = graph.find_value(value.name + "_scale");
      if (scale_id && graph.is_graph_input(*scale_id) && t.rank() == 2) {
        const Value& sv = graph.value(*scale_id);
        Tensor s(sv.type.dtype, sv.type.shape);
        quantize_weight(values, t, s);
        out.emplace(sv.name, std::move(s));
      } else {
        fill(t, values);
      }
    } else if (ends_with(value.name, "_scale") && value.type.dtype == DType::f32) {
      std::vector<double> ones(static_cast<size_t>(t.numel()), 1.0);  // a scale without its FP8 weight
      fill(t, ones);
    } else {
      fill(t, weight_values(value.name, value.type.shape, seed));
    }
    out.insert_or_assign(value.name, std::move(t));
  }
  return out;
}

std::map<std::string, Tensor> weights_of(const Graph& graph, const std::map<std::string, Tensor>& values) {
  std::map<std::string, Tensor> out;
  for (const GraphInput& in : graph.inputs()) {
    if (in.binding != Binding::weight) continue;
    auto it = values.find(graph.value(in.value).name);
    if (it != values.end()) out.emplace(it->first, it->second);
  }
  return out;
}

Status check_weights_match(const Graph& graph, const std::map<std::string, Tensor>& weights) {
  std::vector<std::string> problems;
  size_t missing = 0, mistyped = 0;
  for (const GraphInput& in : graph.inputs()) {
    if (in.binding != Binding::weight) continue;
    const Value& v = graph.value(in.value);
    auto it = weights.find(v.name);
    if (it == weights.end()) {
      ++missing;
      problems.push_back("missing " + v.name + " (" + type_to_string(v.type) + ")");
    } else if (it->second.dtype() != v.type.dtype || it->second.shape() != v.type.shape) {
      ++mistyped;
      problems.push_back(v.name + " is " + std::string(dtype_name(it->second.dtype())) +
                         shape_to_string(it->second.shape()) + ", the graph needs " + type_to_string(v.type));
    }
  }
  if (problems.empty()) return ok_status();
  std::string message = "the weights do not fit graph " + graph.name + " (" + std::to_string(missing) +
                        " missing, " + std::to_string(mistyped) + " mistyped): ";
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) message += (i ? "; " : "") + problems[i];
  if (problems.size() > kShown) message += "; and " + std::to_string(problems.size() - kShown) + " more";
  return make_error(ErrorCode::invalid_argument, message);
}

// ---- safetensors ----

namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kSafetensorsDTypes[] = {
    {DType::f32, "F32"},        {DType::f16, "F16"},        {DType::bf16, "BF16"}, {DType::f8e4m3, "F8_E4M3"},
    {DType::f8e5m2, "F8_E5M2"}, {DType::i32, "I32"},        {DType::i64, "I64"},   {DType::boolean, "BOOL"},
};
static_assert(std::size(kSafetensorsDTypes) == kDTypeCount);

// The safetensors library's own bound on the header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxJsonDepth = 4;

Error file_error(ErrorCode code, const std::string& path, const std::string& message) {
  return make_error(code, "file " + path + ": " + message);
}

// Nesting depth of JSON text outside strings: checked before parsing so hostile headers cannot recurse deep.
int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Result<Entry> parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j,
                          uint64_t data_size) {
  auto bad = [&](const std::string& why) { return file_error(ErrorCode::parse_error, path, "tensor '" + name + "': " + why); };
  if (!j.is_object()) return bad("its header entry is not an object");
  if (!j.contains("dtype") || !j["dtype"].is_string()) return bad("no \"dtype\" string");
  const std::string dtype_text = j["dtype"].get<std::string>();
  const std::optional<DType> dtype = parse_safetensors_dtype(dtype_text);
  if (!dtype) {
    std::string known;
    for (const DTypeName& d : kSafetensorsDTypes) known += (known.empty() ? "" : ", ") + std::string(d.name);
    return bad("unknown dtype '" + dtype_text + "' (kiln reads " + known + ")");
  }
  if (!j.contains("shape") || !j["shape"].is_array()) return bad("no \"shape\" array");
  Shape shape;
  uint64_t numel = 1;
  for (const nlohmann::json& d : j["shape"]) {
    if (!d.is_number_integer() || (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)) {
      return bad("shape " + j["shape"].dump() + " must hold non-negative integers");
    }
    const uint64_t dim = d.get<uint64_t>();
    if (dim > (uint64_t{1} << 40) || (dim && numel > (uint64_t{1} << 50) / dim)) return bad("shape " + j["shape"].dump() + " is too large");
    numel *= dim;
    shape.push_back(static_cast<int64_t>(dim));
  }
  if (!j.contains("data_offsets") || !j["data_offsets"].is_array() || j["data_offsets"].size() != 2 ||
      !j["data_offsets"][0].is_number_unsigned() || !j["data_offsets"][1].is_number_unsigned()) {
    return bad("\"data_offsets\" must be [begin, end], two non-negative integers");
  }
  const uint64_t begin = j["data_offsets"][0].get<uint64_t>(), end = j["data_offsets"][1].get<uint64_t>();
  const std::string offsets = "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) return bad(offsets + " end before they begin");
  if (end > data_size) {
    return bad(offsets + " lie outside the data section (" + std::to_string(data_size) + " bytes)");
  }
  const uint64_t need = numel * dtype_size(*dtype);
  if (end - begin != need) {
    return bad(offsets + " hold " + std::to_string(end - begin) + " bytes, but " + dtype_text +
               shape_to_string(shape) + " needs " + std::to_string(need));
  }
  return Entry{name, *dtype, std::move(shape), begin, end};
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kSafetensorsDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  KILN_CHECK(false);
  return "";
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeName& d : kSafetensorsDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

Status save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || name.empty()) {
      return make_error(ErrorCode::invalid_argument, "file " + path + ": '" + name + "' cannot name a tensor");
    }
    header[name] = {{"dtype", std::string(safetensors_dtype_name(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.byte_size()}}};
    offset += t.byte_size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return file_error(ErrorCode::io_error, path, std::string("cannot open for writing: ") + std::strerror(errno));
  const uint64_t n = text.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) f.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.byte_size()));
  f.close();
  if (!f) return file_error(ErrorCode::io_error, path, "write failed");
  return ok_status();
}

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return file_error(ErrorCode::io_error, path, std::string("cannot open: ") + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  if (file_size < 8) {
    return file_error(ErrorCode::parse_error, path,
                      "truncated: " + std::to_string(file_size) + " bytes, but a safetensors file starts with an "
                      "8-byte header length");
  }
  uint64_t header_size = 0;
  f.read(reinterpret_cast<char*>(&header_size), 8);
  if (header_size > file_size - 8) {
    return file_error(ErrorCode::parse_error, path,
                      "header length " + std::to_string(header_size) + " runs past the end of the file (" +
                          std::to_string(file_size) + " bytes): truncated or not a safetensors file");
  }
  if (header_size > kMaxHeaderBytes) {
    return file_error(ErrorCode::parse_error, path, "header length " + std::to_string(header_size) +
                                                        " exceeds the safetensors limit of 100 MB");
  }
  std::string text(header_size, '\0');
  f.read(text.data(), static_cast<std::streamsize>(header_size));
  if (!f) return file_error(ErrorCode::io_error, path, "read of the header failed");
  if (json_depth(text) > kMaxJsonDepth) {
    return file_error(ErrorCode::parse_error, path, "bad JSON header: nested deeper than a safetensors header");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return file_error(ErrorCode::parse_error, path, std::string("bad JSON header: ") + e.what());
  }
  if (!header.is_object()) return file_error(ErrorCode::parse_error, path, "the JSON header is not an object");

  const uint64_t data_start = 8 + header_size, data_size = file_size - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, j] : header.items()) {
    if (name == "__metadata__") {
      if (!j.is_object()) return file_error(ErrorCode::parse_error, path, "__metadata__ is not an object");
      for (const auto& [key, value] : j.items()) {
        if (!value.is_string()) {
          return file_error(ErrorCode::parse_error, path, "__metadata__ value of '" + key + "' is not a string");
        }
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Entry e, parse_entry(path, name, j, data_size));
    entries.push_back(std::move(e));
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) {
    if (e.end > e.begin) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return file_error(ErrorCode::parse_error, path,
                        "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
    }
  }
  for (const Entry& e : entries) {
    Tensor t(e.dtype, e.shape);
    f.seekg(static_cast<std::streamoff>(data_start + e.begin));
    f.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.byte_size()));
    if (!f) return file_error(ErrorCode::io_error, path, "tensor '" + e.name + "': read failed");
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

Result<std::map<std::string, Tensor>> load_safetensors(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(SafetensorsFile file, read_safetensors(path));
  return std::move(file.tensors);
}

}  // namespace kiln::models
