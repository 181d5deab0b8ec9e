#include "kernel/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kernel/emit_cpu.h"

namespace kiln::kernel {
namespace {

// CUDA: row-buffer floats a thread may keep in registers at once (cuda_row_buffers); the rest go to shared memory.
constexpr int64_t kRegisterFloats = 64;

bool power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

Error field_error(const std::string& field, const std::string& why) {
  return make_error(ErrorCode::invalid_argument, "schedule field '" + field + "' " + why);
}

// CUDA: the fewest rows a block of `threads_per_row`-wide rows may hold: one whole warp.
int64_t rows_per_warp(int threads_per_row) { return std::max(1, 32 / threads_per_row); }

// Bytes of shared memory a CUDA block takes per row: its row buffers, and the word per warp each of a row's
// reductions exchanges through when the row spans several warps (emit.cpp's kiln_red). Without the exchange
// the check passed blocks ptxas then refused at 48 KiB + 32 bytes (session 30: 5 of the 139 schedules of the
// FP8 block's layernorm kernel).
int64_t local_buffer_bytes(const Kernel& k, const Schedule& s) {
  int64_t bytes = 0;
  const std::vector<RowBuffer> place = cuda_row_buffers(k, s);
  for (size_t i = 0; i < k.stages.size(); ++i) {
    if (place[i] == RowBuffer::shared) bytes += 4 * cuda_row_buffer_floats(k.stages[i].local_size, s);
  }
  if (s.threads_per_row > 32) bytes += 4 * int64_t{reduction_exchanges(k)} * (s.threads_per_row / 32);
  return bytes;
}

// Every read of a stage's buffer, as (reading stage, read expression): the reads reachable from each stage's
// expression, through the stages recomputed where read (optional ones the schedule does not keep).
std::vector<std::vector<std::pair<int, int>>> buffer_reads(const Kernel& k, const Schedule& s) {
  std::vector<std::vector<std::pair<int, int>>> reads(k.stages.size());
  for (size_t j = 0; j < k.stages.size(); ++j) {
    std::vector<bool> seen(k.exprs.size(), false);
    std::vector<int> todo = {k.stages[j].expr};
    while (!todo.empty()) {
      const int id = todo.back();
      todo.pop_back();
      if (id < 0 || seen[static_cast<size_t>(id)]) continue;
      seen[static_cast<size_t>(id)] = true;
      const Expr& e = k.exprs[static_cast<size_t>(id)];
      if (e.kind == ExprKind::read_stage) {
        const Stage& read = k.stages[static_cast<size_t>(e.stage)];
        if (read.optional && !s.cache_row) {
          todo.push_back(e.inline_fallback);
        } else {
          reads[static_cast<size_t>(e.stage)].push_back({static_cast<int>(j), id});
        }
      }
      for (int o : e.operands) todo.push_back(o);
    }
  }
  return reads;
}

// Whether every row cache (optional stage) costs less to recompute at each read than to keep on the CPU: a
// few loads, conversions, adds and multiplies (the f32 cast of a bf16 row, x - mean). Keeping such a row
// writes and re-reads an f32 buffer twice the size of a bf16 row (48 KiB for SwiGLU's 12288 columns, the
// whole L1), while the re-read comes from L1 anyway. Transcendentals (softmax's exp) stay cached.
bool row_caches_are_cheap(const Kernel& k) {
  bool any = false;
  for (const Stage& st : k.stages) {
    if (!st.optional) continue;
    any = true;
    std::vector<int> todo = {st.expr};
    int nodes = 0;
    while (!todo.empty()) {
      const Expr& e = k.exprs[static_cast<size_t>(todo.back())];
      todo.pop_back();
      if (++nodes > 8) return false;
      const bool arithmetic = e.kind == ExprKind::unary || e.kind == ExprKind::binary;
      if (arithmetic && !(e.op == Op::neg || e.op == Op::abs || e.op == Op::add || e.op == Op::sub || e.op == Op::mul)) {
        return false;
      }
      if (e.kind == ExprKind::read_stage && e.inline_fallback >= 0) todo.push_back(e.inline_fallback);  // recomputed too
      for (int o : e.operands) todo.push_back(o);
    }
  }
  return any;
}

}  // namespace

const char* target_name(Target target) { return target == Target::cpu ? "cpu" : "cuda"; }

bool general_reduction(const Stage& stage) {
  if (!stage.reduce) return false;
  bool seen = false;
  for (bool r : stage.reduced_axes) {
    if (seen && !r) return true;
    seen = seen || r;
  }
  return false;
}

int reduction_exchanges(const Kernel& k, size_t before) {
  int n = 0;
  for (size_t i = 0; i < std::min(before, k.stages.size()); ++i) {
    n += k.stages[i].reduce && !general_reduction(k.stages[i]) ? 1 : 0;
  }
  return n;
}

std::optional<UnrolledVectorLoop> unrolled_vector_loop(const Stage& stage, const Schedule& schedule) {
  const int width = schedule.vector_width;
  if (width <= 1 || general_reduction(stage)) return std::nullopt;
  size_t from = 0;
  if (stage.reduce) {
    while (from < stage.space.size() && !stage.reduced_axes[from]) ++from;
  }
  for (size_t a = stage.space.size(); a-- > from;) {
    if (stage.space_vars[a] < 0) continue;
    const int64_t extent = stage.space[a], step = int64_t{width} * schedule.threads_per_row;
    if (extent % step != 0 || extent / step > 8) return std::nullopt;
    return UnrolledVectorLoop{stage.space_vars[a], extent};
  }
  return std::nullopt;
}

VarExtents vector_split_extents(const Kernel& kernel, int var, int width) {
  const int step = vector_step_var(kernel), lane = vector_lane_var(kernel);
  const int64_t steps = std::max<int64_t>(1, kernel.extent(var) / width);
  return [&kernel, step, lane, steps, width](int v) -> int64_t {
    return v == step ? steps : v == lane ? int64_t{width} : kernel.extent(v);
  };
}

IndexExpr split_vector_var(const Kernel& kernel, const IndexExpr& e, int var, int width) {
  const IndexExpr split =
      index_add(index_scale(IndexExpr::of_var(vector_step_var(kernel)), width), IndexExpr::of_var(vector_lane_var(kernel)));
  return index_substitute(e, var, split, vector_split_extents(kernel, var, width));
}

std::optional<IndexExpr> offset_within_vector_step(const Kernel& kernel, const IndexExpr& offset, int var, int width) {
  // What is left of the offset past the step's base, width * s.
  const IndexExpr within = index_add(split_vector_var(kernel, offset, var, width),
                                     index_scale(IndexExpr::of_var(vector_step_var(kernel)), -width));
  for (int v : index_vars(within)) {
    if (v != vector_lane_var(kernel)) return std::nullopt;
  }
  const IndexRange r = index_range(within, vector_split_extents(kernel, var, width));
  if (r.lo < 0 || r.hi >= width) return std::nullopt;
  return within;
}

std::optional<VectorSpan> offset_in_vector_span(const Kernel& kernel, const IndexExpr& offset, int var, int width,
                                                int64_t span) {
  const VarExtents extents = vector_split_extents(kernel, var, width);
  const IndexExpr split = split_vector_var(kernel, offset, var, width);
  const int lane = vector_lane_var(kernel);
  // The start of the span holding element 0: its offset with j = 0, the constant rounded down to the span.
  IndexExpr base = index_substitute(split, lane, IndexExpr::of_constant(0), extents);
  base.constant -= ((base.constant % span) + span) % span;
  if (index_mentions(base, lane)) return std::nullopt;
  for (const IndexTerm& t : base.terms) {
    if (t.coefficient % span != 0) return std::nullopt;
  }
  const IndexExpr within = index_add(split, index_scale(base, -1));
  for (int v : index_vars(within)) {
    if (v != lane) return std::nullopt;
  }
  const IndexRange r = index_range(within, extents);
  if (r.lo < 0 || r.hi >= span) return std::nullopt;
  return VectorSpan{base, within};
}

int row_copy_of(const Kernel& k, int stage) {
  const Stage& st = k.stages[static_cast<size_t>(stage)];
  const Expr& e = k.exprs[static_cast<size_t>(st.expr)];
  if (st.reduce || e.kind != ExprKind::read_stage) return -1;
  const Stage& source = k.stages[static_cast<size_t>(e.stage)];
  int var = -1, axes = 0;
  for (int v : st.space_vars) {
    if (v >= 0) var = v, ++axes;
  }
  if (source.reduce || axes != 1 || source.local_size != st.local_size || !e.offset.is_var(var) || !st.target.is_var(var)) {
    return -1;
  }
  return e.stage;
}

std::vector<RowBuffer> cuda_row_buffers(const Kernel& k, const Schedule& s) {
  std::vector<RowBuffer> place(k.stages.size(), RowBuffer::none);
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& st = k.stages[i];
    if ((st.read_later && !(st.optional && !s.cache_row)) || general_reduction(st)) place[i] = RowBuffer::shared;
  }
  if (!s.registers || s.vector_width <= 1) return place;
  const auto reads = buffer_reads(k, s);
  // Register floats per thread a row buffer takes, counted only while it is live: from the stage that writes
  // it to the last stage that reads it (the compiler reuses a dead row's registers). A modulated layernorm with
  // its amax keeps three rows of 24 floats (the f32 cast, x - mean, the bf16 output the amax reads) but never
  // more than two at once.
  std::vector<int64_t> live(k.stages.size(), 0);
  std::vector<size_t> last_read(k.stages.size(), 0);
  for (size_t i = 0; i < k.stages.size(); ++i) {
    last_read[i] = i;
    for (const auto& [reader, id] : reads[i]) last_read[i] = std::max(last_read[i], static_cast<size_t>(reader));
  }
  auto fits = [&](size_t from, size_t to, int64_t need) {
    for (size_t p = from; p <= to; ++p) {
      if (live[p] + need > kRegisterFloats) return false;
    }
    return true;
  };
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& st = k.stages[i];
    if (place[i] != RowBuffer::shared || general_reduction(st)) continue;
    if (st.reduce) {
      if (st.local_size == 1) place[i] = RowBuffer::registers;
      continue;
    }
    const auto loop = unrolled_vector_loop(st, s);
    int axes = 0;
    for (int v : st.space_vars) axes += v >= 0 ? 1 : 0;
    if (!loop || axes != 1 || loop->extent != st.local_size || !st.target.is_var(loop->var) || reads[i].empty()) continue;
    bool own_step = true;
    for (const auto& [reader, id] : reads[i]) {
      const auto at = unrolled_vector_loop(k.stages[static_cast<size_t>(reader)], s);
      own_step = own_step && at && offset_within_vector_step(k, k.exprs[static_cast<size_t>(id)].offset, at->var, s.vector_width);
    }
    if (!own_step) continue;
    // A copy of a register row is that row's registers, which then stay live until the copy's last read.
    const int source = row_copy_of(k, static_cast<int>(i));
    const bool copy = source >= 0 && place[static_cast<size_t>(source)] == RowBuffer::registers;
    const size_t owner = copy ? static_cast<size_t>(source) : i;
    const int64_t need = k.stages[owner].local_size / s.threads_per_row;
    const size_t from = copy ? last_read[owner] + 1 : i;
    const size_t to = last_read[i];
    if (from > to || fits(from, to, need)) {
      place[i] = RowBuffer::registers;
      for (size_t p = from; p <= to; ++p) live[p] += need;
      if (copy) last_read[owner] = std::max(last_read[owner], to);
    }
  }
  return place;
}

std::string schedule_to_json(const Schedule& s) {
  nlohmann::json j = {{"rows_per_task", s.rows_per_task}, {"threads", s.threads},
                            {"threads_per_row", s.threads_per_row}, {"vector_width", s.vector_width},
                            {"cache_row", s.cache_row}, {"unroll", s.unroll}, {"registers", s.registers}};
  // Written only when set, so a schedule from before these fields keeps its text (and stored recipes match).
  if (s.tables) j["tables"] = true;
  if (s.stream_stores) j["stream_stores"] = true;
  if (s.pairs) j["pairs"] = true;
  if (s.moments) j["moments"] = true;
  if (s.gathers) j["gathers"] = true;
  if (s.row_loop != 1) j["row_loop"] = s.row_loop;
  if (s.min_blocks != 0) j["min_blocks"] = s.min_blocks;
  if (s.early_loads) j["early_loads"] = true;
  return j.dump();
}

Result<Schedule> schedule_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::parse_error, std::string("schedule JSON: ") + e.what());
  }
  if (!j.is_object()) return make_error(ErrorCode::parse_error, "schedule JSON must be an object");
  Schedule s;
  for (auto item : j.items()) {
    // Named variables, not structured bindings: C++20 lets lambdas capture bindings, clang 14 does not yet.
    const std::string key = item.key();
    const nlohmann::json& value = item.value();
    auto integer = [&](auto& field) -> Status {
      if (!value.is_number_integer()) {
        return make_error(ErrorCode::parse_error, "schedule field '" + key + "' must be an integer");
      }
      field = value.get<std::remove_reference_t<decltype(field)>>();
      return ok_status();
    };
    if (key == "rows_per_task") {
      KILN_TRY(integer(s.rows_per_task));
    } else if (key == "threads") {
      KILN_TRY(integer(s.threads));
    } else if (key == "threads_per_row") {
      KILN_TRY(integer(s.threads_per_row));
    } else if (key == "vector_width") {
      KILN_TRY(integer(s.vector_width));
    } else if (key == "unroll") {
      KILN_TRY(integer(s.unroll));
    } else if (key == "row_loop") {
      KILN_TRY(integer(s.row_loop));
    } else if (key == "min_blocks") {
      KILN_TRY(integer(s.min_blocks));
    } else if (key == "registers" || key == "cache_row" || key == "tables" || key == "stream_stores" || key == "pairs" ||
               key == "moments" || key == "gathers" || key == "early_loads") {
      if (!value.is_boolean()) return make_error(ErrorCode::parse_error, "schedule field '" + key + "' must be a boolean");
      (key == "registers"       ? s.registers
       : key == "cache_row"     ? s.cache_row
       : key == "tables"        ? s.tables
       : key == "stream_stores" ? s.stream_stores
       : key == "pairs"         ? s.pairs
       : key == "moments"       ? s.moments
       : key == "early_loads"   ? s.early_loads
                                : s.gathers) = value.get<bool>();
    } else {
      return make_error(ErrorCode::parse_error,
                        "unknown schedule field '" + key +
                            "' (fields: rows_per_task, threads, threads_per_row, vector_width, cache_row, unroll, "
                            "registers, tables, stream_stores, pairs, moments, gathers, row_loop, min_blocks, early_loads)");
    }
  }
  return s;
}

int64_t cuda_row_buffer_floats(int64_t local_size, const Schedule& s) {
  if (local_size <= 1) return 1;  // a reduction's one value per row: every thread reads the same word
  const int64_t block = s.vector_width > 1 ? int64_t{s.vector_width} * s.threads_per_row : 1;
  const int64_t padded = (local_size + block - 1) / block * block;
  return padded + (s.threads_per_row < 32 && s.rows_per_task > 1 ? s.threads_per_row : 0);
}

std::string schedule_to_string(const Schedule& s) {
  return fmt::format("rows={} threads={} tpr={} vec={} {} unroll={}{}{}{}{}{}{}{}{}{}", s.rows_per_task, s.threads,
                     s.threads_per_row, s.vector_width, s.cache_row ? "cache" : "reread", s.unroll,
                     s.registers ? "" : " smem", s.tables ? " tables" : "", s.gathers ? " gathers" : "",
                     s.stream_stores ? " stream" : "", s.pairs ? " pairs" : "", s.moments ? " moments" : "",
                     s.row_loop == 1 ? "" : s.row_loop == 0 ? " loop=resident" : fmt::format(" loop={}", s.row_loop),
                     s.min_blocks == 0 ? "" : fmt::format(" min_blocks={}", s.min_blocks), s.early_loads ? " early" : "");
}

Status can_implement(const Kernel& k, const Schedule& s, Target target) {
  if (s.rows_per_task < 1) return field_error("rows_per_task", fmt::format("must be >= 1, got {}", s.rows_per_task));
  if (s.threads < 1 || s.threads > 1024) return field_error("threads", fmt::format("must be in 1..1024, got {}", s.threads));
  if (!power_of_two(s.vector_width) || s.vector_width > 64) {
    return field_error("vector_width", fmt::format("must be a power of two <= 64, got {}", s.vector_width));
  }
  if (s.unroll < 1 || s.unroll > 16) return field_error("unroll", fmt::format("must be in 1..16, got {}", s.unroll));
  if (s.row_loop < 0 || s.row_loop > 16) return field_error("row_loop", fmt::format("must be in 0..16, got {}", s.row_loop));
  if (!power_of_two(s.threads_per_row) || s.threads_per_row > 1024) {
    return field_error("threads_per_row", fmt::format("must be a power of two <= 1024, got {}", s.threads_per_row));
  }
  if (target == Target::cpu) {
    // `omp simd` must sit directly on its loop, so a vectorized loop cannot also carry `GCC unroll` (GCC:
    // "'#pragma' is not allowed here"); the vectorizer unrolls simd loops itself.
    if (s.unroll > 1 && s.vector_width > 1) {
      return field_error("unroll", fmt::format("must be 1 on the CPU when vector_width > 1 (got unroll {} with "
                                               "vector_width {}): simd loops are unrolled by the vectorizer",
                                               s.unroll, s.vector_width));
    }
    if (s.threads_per_row != 1) {
      return field_error("threads_per_row", fmt::format("must be 1 on the CPU (rows are split across tasks), got {}",
                                                        s.threads_per_row));
    }
    if (s.tables && !has_tabulated_exprs(k)) {
      return field_error("tables", "is set but no value of the kernel is a transcendental of one bf16/f16 element");
    }
    if (s.gathers && !s.tables) return field_error("gathers", "needs tables (it is how a table is read)");
    if (s.pairs) {
      if (s.tables) return field_error("pairs", "and tables are exclusive (a table is read an element at a time)");
      if (s.vector_width < 2) return field_error("pairs", "needs vector_width >= 2 (pairs are a vector layout)");
      bool optional = false;
      for (const Stage& st : k.stages) optional = optional || st.optional;
      if (s.cache_row && optional) {
        return field_error("pairs", "needs cache_row off where the kernel has optional row caches (they are per element)");
      }
      if (!has_pairs(k)) {
        return field_error("pairs", "is set but the kernel's loops do not read and write bf16 rows a word at a time");
      }
    }
    if (s.min_blocks != 0) {
      return field_error("min_blocks", fmt::format("is a CUDA field (blocks an SM holds); must be 0 on the CPU, got {}",
                                                   s.min_blocks));
    }
    if (s.early_loads) {
      return field_error("early_loads", "is a CUDA field (loads issued before a row's reductions); must be false on the CPU");
    }
    if (s.row_loop != 1) {
      return field_error("row_loop", fmt::format("is a CUDA field (rows a block's row slot takes in turn); must be 1 on "
                                                 "the CPU, got {}", s.row_loop));
    }
    if (s.moments) {
      if (s.vector_width < 2) return field_error("moments", "needs vector_width >= 2 (the lanes of a row's reduction)");
      if (!has_central_moments(k)) {
        return field_error("moments", "is set but no stage of the kernel is a variance about another stage's mean");
      }
    }
  } else {
    if (s.tables) return field_error("tables", "is a CPU field (lookup tables are not emitted for CUDA)");
    if (s.gathers) return field_error("gathers", "is a CPU field (table lookups by vector gather)");
    if (s.stream_stores) return field_error("stream_stores", "is a CPU field (non-temporal row stores)");
    if (s.pairs) return field_error("pairs", "is a CPU field (bf16 words of two elements)");
    if (s.moments) return field_error("moments", "is a CPU field (one-pass mean and variance in a row's lanes)");
    if (s.threads != 1) return field_error("threads", "is a CPU field; on CUDA use threads_per_row (got " +
                                                          std::to_string(s.threads) + ")");
    // Rows narrower than a warp share one: the block must still be whole warps, which the shuffles of a
    // row's reduction take part in as a whole.
    if (s.threads_per_row < 32 && (s.threads_per_row * s.rows_per_task) % 32 != 0) {
      return field_error("threads_per_row",
                         fmt::format("{} x rows_per_task {} is not a whole number of warps (32 threads) on CUDA",
                                     s.threads_per_row, s.rows_per_task));
    }
    if (s.row_loop > 1 && s.rows_per_task * s.row_loop > k.rows) {  // a block would take no second task
      return field_error("row_loop", fmt::format("x rows_per_task = {} exceeds the kernel's {} rows",
                                                 s.rows_per_task * s.row_loop, k.rows));
    }
    if (s.min_blocks < 0 || s.min_blocks * s.rows_per_task * s.threads_per_row > 2048) {
      return field_error("min_blocks", fmt::format("x {} threads a block must be in 0..2048 threads an SM, got {}",
                                                   s.rows_per_task * s.threads_per_row, s.min_blocks));
    }
    if (s.rows_per_task * s.threads_per_row > 1024) {
      return field_error("rows_per_task", fmt::format("x threads_per_row = {} exceeds 1024 threads per block",
                                                      s.rows_per_task * s.threads_per_row));
    }
    const int64_t shared = local_buffer_bytes(k, s) * s.rows_per_task;
    if (shared > 48 * 1024) {
      return field_error("rows_per_task",
                         fmt::format("needs {} bytes of shared memory per block (row buffers and reduction exchange of {} rows), over 48 KiB; "
                                     "use fewer rows per block or cache_row = false",
                                     shared, s.rows_per_task));
    }
  }
  return ok_status();
}

bool vector_gathers_pay() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

Schedule default_schedule(const Kernel& k, Target target, int cores, int64_t cache_bytes) {
  Schedule s;
  if (target == Target::cuda) {
    // 16 bytes per thread and step (8 bf16, 4 f32) where the row length allows, and a block width that
    // divides the row's vector steps, so no thread idles on the last step.
    const int64_t row = std::max<int64_t>(1, k.max_row_elements());
    size_t narrowest = 4;
    for (const KernelParam& p : k.inputs) narrowest = std::min(narrowest, std::max<size_t>(1, dtype_size(p.type.dtype)));
    for (const KernelParam& p : k.outputs) narrowest = std::min(narrowest, std::max<size_t>(1, dtype_size(p.type.dtype)));
    int width = static_cast<int>(std::min<size_t>(8, 16 / narrowest));
    while (width > 1 && row % width != 0) width /= 2;
    const int64_t steps = row / width;
    int tpr = 32;
    for (int t : {256, 128, 64}) {
      if (steps % t == 0) {
        tpr = t;
        break;
      }
    }
    if (steps % tpr != 0 && steps >= 1024) tpr = 256;
    // Rows of fewer than 32 vector steps (a head's 128 bf16: 16) take that many threads each, several rows
    // to a warp, instead of a warp with idle lanes.
    if (steps < 32) {
      tpr = 1;
      while (tpr * 2 <= steps && steps % (tpr * 2) == 0) tpr *= 2;
      tpr = std::max(tpr, 4);
    }
    s.threads_per_row = tpr;
    s.threads = 1;
    s.vector_width = width;
    // Short rows: several rows per block so a block has at least 128 threads (and no more rows than there are,
    // beyond one whole warp).
    const int64_t warp_rows = rows_per_warp(tpr);
    s.rows_per_task = std::clamp<int64_t>(128 / tpr, warp_rows, std::max(warp_rows, k.rows));
    if (!can_implement(k, s, target).ok()) s.rows_per_task = warp_rows;
    if (!can_implement(k, s, target).ok()) s.cache_row = false;
    // Early loads where a row's reduction crosses warps (its exchange waits at a barrier, which the loads can
    // overlap). On an H100 (session 38, each kernel against its variants twice in turn) the FLUX blocks'
    // layernorm kernels of 128 threads a row ran level or 2-13% faster with them and none slower (the LN +
    // modulate ones 4-13%, the 100 MB one 2%, the 9, 75 and 85 MB ones level); the q/k norms + RoPE of 16
    // threads a row, whose reduction is a few shuffles, level to 5.5% slower (their registers cost blocks an SM).
    s.early_loads = tpr > 32 && k.has_reduction();
    return s;
  }
  // Tasks of ~128K elements, at least one task per core. Rows handed out one at a time ran slower than in runs
  // of 16: a SwiGLU [1024, 12288] and a GELU [1024, 12288] at 2 threads of an AVX-512 Xeon took 1.22 -> 1.05 ms
  // and 1.24 -> 1.12 ms (session 27, the rows' kernel under a spinning two-thread pool, interleaved).
  const int64_t row = std::max<int64_t>(1, k.max_row_elements());
  s.threads = k.rows * row >= 32768 ? std::max(1, cores) : 1;
  s.rows_per_task = std::clamp<int64_t>(kTaskElements / row, 1, std::max<int64_t>(1, k.rows / std::max(1, s.threads)));
  s.vector_width = row >= 16 ? 16 : 1;
  s.cache_row = !row_caches_are_cheap(k);
  s.tables = has_tabulated_exprs(k) && k.rows * row >= kTableMinElements;
  s.gathers = s.tables && vector_gathers_pay();
  // Streaming pays where the outputs leave the cache anyway and rows are long: on the 2-core AVX2 VM, rows of
  // 3072-12288 bf16 wrote 1.03-1.12x faster streamed, the q/k heads' rows of 128 0.88x (session 22, A/B).
  s.stream_stores = cache_bytes > 0 && k.bytes > static_cast<double>(cache_bytes) && row >= kStreamMinRow;
  // Pairs where they apply, no table is read and rows are long. From cache on one thread of the 2-core AVX2 VM
  // (session 23), a modulated bf16 layernorm [64, 3072] took 0.122 -> 0.083 ms paired, an rmsnorm 0.076 ->
  // 0.063 ms; the q/k heads' rows of 128 0.095 -> 0.106 ms (one 64-word block a row, its lanes summed per row).
  s.pairs = !s.tables && s.vector_width > 1 && row >= kPairMinRow && has_pairs(k);
  if (s.pairs && !can_implement(k, s, target).ok()) s.pairs = false;
  // A paired row is streamed through a row of words, a copy more: at 2 threads from memory, rmsnorm, layernorm
  // and the gated residual ran 0.87-0.95x as fast paired and streamed as paired alone (session 23, two runs).
  if (s.pairs) s.stream_stores = false;
  // One pass for a layernorm's mean and variance: a modulated bf16 layernorm [4096, 3072] at 2 threads of the
  // AVX2 VM ran 1.15x [1.12, 1.16] as fast (session 24, the bench's A/B).
  s.moments = s.vector_width > 1 && has_central_moments(k);
  return s;
}

std::vector<Schedule> schedule_space(const Kernel& k, Target target, int cores) {
  std::vector<Schedule> out;
  const int64_t row = std::max<int64_t>(1, k.max_row_elements());
  bool has_optional = false;
  for (const Stage& s : k.stages) has_optional = has_optional || s.optional;
  std::vector<bool> caches = has_optional ? std::vector<bool>{true, false} : std::vector<bool>{true};
  if (target == Target::cpu) {
    const bool tabulable = has_tabulated_exprs(k);
    const std::vector<bool> pairings = has_pairs(k) ? std::vector<bool>{false, true} : std::vector<bool>{false};
    const std::vector<bool> one_pass = has_central_moments(k) ? std::vector<bool>{false, true} : std::vector<bool>{false};
    // Streaming stores only where the outputs could outgrow a core's share of cache (under 1 MiB they stay).
    const std::vector<bool> streams = k.bytes > (1 << 20) ? std::vector<bool>{false, true} : std::vector<bool>{false};
    std::vector<int> thread_counts = {1};
    if (cores > 1 && k.rows > 1) thread_counts.push_back(cores);
    for (int threads : thread_counts) {
      for (int64_t rpt = 1; rpt <= std::max<int64_t>(1, k.rows / threads); rpt *= 4) {
        for (int vec : {1, 8, 16}) {
          if (vec > 1 && vec > row) continue;
          for (bool cache : caches) {
            for (int unroll : {1, 4}) {
              for (int table : tabulable ? std::vector<int>{0, 1, 2} : std::vector<int>{0}) {  // 2: by gathers
                for (bool stream : streams) {
                  for (bool pair : pairings) {
                    for (bool moments : one_pass) {
                      Schedule s{rpt, threads, 1, vec, cache, unroll};
                      s.tables = table > 0;
                      s.gathers = table == 2;
                      s.stream_stores = stream;
                      s.pairs = pair;
                      s.moments = moments;
                      if (can_implement(k, s, target).ok()) out.push_back(s);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
    return out;
  }
  for (int tpr : {4, 8, 16, 32, 64, 128, 256, 512, 1024}) {
    if (tpr < 32 && row > 512) continue;  // sub-warp rows only where a warp would have lanes with little work
    if (tpr > 32 && tpr / 2 >= row) break;
    const int64_t warp_rows = rows_per_warp(tpr);
    for (int64_t warps : {1, 2, 4, 8}) {
      const int64_t rpt = warps * warp_rows;
      if (rpt > std::max(k.rows, warp_rows)) break;
      for (int vec : {1, 2, 4, 8}) {
        for (bool cache : caches) {
          Schedule s{rpt, 1, tpr, vec, cache, 1};
          if (!can_implement(k, s, target).ok()) continue;
          out.push_back(s);
          // A kernel with several passes over a row: rows taken in turns, the next one's loads in flight.
          for (int turns : {0, 2, 4}) {
            Schedule turned = s;
            turned.row_loop = turns;
            if (k.has_reduction() && can_implement(k, turned, target).ok()) out.push_back(turned);
          }
          // Later passes' loads issued before the first reduction, in a block a task and in one resident wave.
          for (int turns : {1, 0}) {
            Schedule early = s;
            early.row_loop = turns;
            early.early_loads = true;
            if (k.has_reduction() && can_implement(k, early, target).ok()) out.push_back(early);
          }
          // The same rows with every buffer in shared memory, where some would be in registers.
          const std::vector<RowBuffer> place = cuda_row_buffers(k, s);
          s.registers = false;
          if (std::count(place.begin(), place.end(), RowBuffer::registers) > 0 && can_implement(k, s, target).ok()) {
            out.push_back(s);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace kiln::kernel
