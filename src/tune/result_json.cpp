#include "tune/result_json.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kiln::tune {
namespace {

using nlohmann::json;

json schedule_json(const kernel::Schedule& s) { return json::parse(kernel::schedule_to_json(s)); }

json timing_json(const harness::TimingStats& t) {
  return {{"median", t.median}, {"min", t.min},         {"max", t.max},
          {"ci_low", t.ci_low}, {"ci_high", t.ci_high}, {"samples", t.samples}};
}

// Reading: every field is looked up through these, so an error names the path of the field at fault.
struct Reader {
  std::string source;

  Error fail(const std::string& where, const std::string& why) const {
    return make_error(ErrorCode::parse_error, source + ": " + where + " " + why);
  }
  Result<const json*> field(const json& j, const std::string& where, const std::string& key) const {
    if (!j.is_object()) return fail(where, "must be an object");
    auto it = j.find(key);
    if (it == j.end()) return fail(where, "has no field '" + key + "'");
    return &*it;
  }
  template <typename T>
  Status get(const json& j, const std::string& where, const std::string& key, T& out) const {
    KILN_ASSIGN_OR_RETURN(const json* v, field(j, where, key));
    try {
      out = v->get<T>();
    } catch (const std::exception&) {
      return fail(where + "." + key, "has the wrong type");
    }
    return ok_status();
  }
  Status schedule(const json& j, const std::string& where, const std::string& key, kernel::Schedule& out) const {
    KILN_ASSIGN_OR_RETURN(const json* v, field(j, where, key));
    auto s = kernel::schedule_from_json(v->dump());
    if (!s.ok()) return fail(where + "." + key, s.error().message);
    out = *s;
    return ok_status();
  }
  Result<const json*> array(const json& j, const std::string& where, const std::string& key) const {
    KILN_ASSIGN_OR_RETURN(const json* v, field(j, where, key));
    if (!v->is_array()) return fail(where + "." + key, "must be an array");
    return v;
  }
};

Result<CandidateRecord> read_candidate(const Reader& r, const json& j, const std::string& where) {
  CandidateRecord c;
  KILN_TRY(r.schedule(j, where, "schedule", c.schedule));
  KILN_TRY(r.get(j, where, "round", c.round));
  KILN_TRY(r.get(j, where, "outcome", c.outcome));
  KILN_TRY(r.get(j, where, "summary", c.summary));
  KILN_TRY(r.get(j, where, "timed", c.timed));
  KILN_TRY(r.get(j, where, "quarantined", c.quarantined));
  KILN_TRY(r.get(j, where, "contended", c.contended));
  if (c.timed) {
    KILN_ASSIGN_OR_RETURN(const json* t, r.field(j, where, "time"));
    const std::string tw = where + ".time";
    KILN_TRY(r.get(*t, tw, "median", c.time.median));
    KILN_TRY(r.get(*t, tw, "min", c.time.min));
    KILN_TRY(r.get(*t, tw, "max", c.time.max));
    KILN_TRY(r.get(*t, tw, "ci_low", c.time.ci_low));
    KILN_TRY(r.get(*t, tw, "ci_high", c.time.ci_high));
    KILN_TRY(r.get(*t, tw, "samples", c.time.samples));
  }
  return c;
}

Result<KernelTuneResult> read_kernel(const Reader& r, const json& j, const std::string& where) {
  KernelTuneResult k;
  KILN_TRY(r.get(j, where, "hash", k.hash));
  KILN_TRY(r.get(j, where, "label", k.label));
  KILN_TRY(r.get(j, where, "shape", k.shape));
  KILN_TRY(r.get(j, where, "occurrences", k.occurrences));
  KILN_TRY(r.schedule(j, where, "default_schedule", k.default_schedule));
  KILN_TRY(r.schedule(j, where, "winner", k.winner));
  KILN_TRY(r.get(j, where, "tuned", k.tuned));
  KILN_TRY(r.get(j, where, "decision", k.decision));
  KILN_TRY(r.get(j, where, "winner_seconds", k.winner_seconds));
  KILN_TRY(r.get(j, where, "default_seconds", k.default_seconds));
  KILN_TRY(r.get(j, where, "worst_seconds", k.worst_seconds));
  KILN_TRY(r.get(j, where, "baseline_seconds", k.baseline_seconds));
  KILN_TRY(r.get(j, where, "baseline_kernels", k.baseline_kernels));
  KILN_TRY(r.get(j, where, "baseline_note", k.baseline_note));
  KILN_TRY(r.get(j, where, "ab_summary", k.ab_summary));
  KILN_TRY(r.get(j, where, "budget_exhausted", k.budget_exhausted));
  KILN_TRY(r.get(j, where, "seconds", k.seconds));
  KILN_ASSIGN_OR_RETURN(const json* candidates, r.array(j, where, "candidates"));
  for (size_t i = 0; i < candidates->size(); ++i) {
    KILN_ASSIGN_OR_RETURN(CandidateRecord c, read_candidate(r, (*candidates)[i], where + ".candidates[" + std::to_string(i) + "]"));
    k.candidates.push_back(std::move(c));
  }
  return k;
}

}  // namespace

std::string tune_result_to_json(const TuneResult& result) {
  json j = {{"format", kTuneFormat},     {"model", result.model},       {"target", result.target},
            {"device", result.device},   {"protocol", result.protocol}, {"compiler", result.compiler},
            {"notes", result.notes}};
  j["schedules"] = json::object();
  for (const auto& [hash, s] : result.schedules()) j["schedules"][hash] = schedule_json(s);
  j["kernels"] = json::array();
  for (const KernelTuneResult& k : result.kernels) {
    json candidates = json::array();
    for (const CandidateRecord& c : k.candidates) {
      json cj = {{"schedule", schedule_json(c.schedule)}, {"round", c.round}, {"outcome", c.outcome},
                 {"summary", c.summary}, {"timed", c.timed}, {"quarantined", c.quarantined},
                 {"contended", c.contended}};
      if (c.timed) cj["time"] = timing_json(c.time);
      candidates.push_back(std::move(cj));
    }
    j["kernels"].push_back({{"hash", k.hash},
                            {"label", k.label},
                            {"shape", k.shape},
                            {"occurrences", k.occurrences},
                            {"default_schedule", schedule_json(k.default_schedule)},
                            {"winner", schedule_json(k.winner)},
                            {"tuned", k.tuned},
                            {"decision", k.decision},
                            {"winner_seconds", k.winner_seconds},
                            {"default_seconds", k.default_seconds},
                            {"worst_seconds", k.worst_seconds},
                            {"baseline_seconds", k.baseline_seconds},
                            {"baseline_kernels", k.baseline_kernels},
                            {"baseline_note", k.baseline_note},
                            {"ab_summary", k.ab_summary},
                            {"budget_exhausted", k.budget_exhausted},
                            {"seconds", k.seconds},
                            {"candidates", std::move(candidates)}});
  }
  j["library"] = json::array();
  for (const LibraryTuneResult& l : result.library) {
    j["library"].push_back({{"hash", l.hash}, {"label", l.label}, {"shape", l.shape},
                            {"occurrences", l.occurrences}, {"seconds", l.seconds}, {"note", l.note}});
  }
  return j.dump(1);
}

Result<TuneResult> tune_result_from_json(const std::string& text, const std::string& source) {
  const Reader r{source};
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::parse_error, source + ": not JSON: " + e.what());
  }
  std::string format;
  KILN_TRY(r.get(j, "the top level", "format", format));
  if (format != kTuneFormat) {
    return r.fail("field 'format'", "is '" + format + "', expected '" + kTuneFormat + "' (a `kiln tune -o` file)");
  }
  TuneResult result;
  KILN_TRY(r.get(j, "the top level", "model", result.model));
  KILN_TRY(r.get(j, "the top level", "target", result.target));
  KILN_TRY(r.get(j, "the top level", "device", result.device));
  KILN_TRY(r.get(j, "the top level", "protocol", result.protocol));
  KILN_TRY(r.get(j, "the top level", "compiler", result.compiler));
  KILN_TRY(r.get(j, "the top level", "notes", result.notes));
  KILN_ASSIGN_OR_RETURN(const json* kernels, r.array(j, "the top level", "kernels"));
  for (size_t i = 0; i < kernels->size(); ++i) {
    KILN_ASSIGN_OR_RETURN(KernelTuneResult k, read_kernel(r, (*kernels)[i], "kernels[" + std::to_string(i) + "]"));
    result.kernels.push_back(std::move(k));
  }
  KILN_ASSIGN_OR_RETURN(const json* library, r.array(j, "the top level", "library"));
  for (size_t i = 0; i < library->size(); ++i) {
    const std::string where = "library[" + std::to_string(i) + "]";
    LibraryTuneResult l;
    const json& lj = (*library)[i];
    KILN_TRY(r.get(lj, where, "hash", l.hash));
    KILN_TRY(r.get(lj, where, "label", l.label));
    KILN_TRY(r.get(lj, where, "shape", l.shape));
    KILN_TRY(r.get(lj, where, "occurrences", l.occurrences));
    KILN_TRY(r.get(lj, where, "seconds", l.seconds));
    KILN_TRY(r.get(lj, where, "note", l.note));
    result.library.push_back(std::move(l));
  }
  // "schedules" is derived from the kernels; a file whose two disagree has been edited by hand.
  KILN_ASSIGN_OR_RETURN(const json* schedules, r.field(j, "the top level", "schedules"));
  const auto derived = result.schedules();
  if (!schedules->is_object() || schedules->size() != derived.size()) {
    return r.fail("field 'schedules'", "does not list exactly the tuned kernels' winners");
  }
  for (const auto& [hash, s] : derived) {
    kernel::Schedule listed;
    KILN_TRY(r.schedule(*schedules, "field 'schedules'", hash, listed));
    if (!(listed == s)) return r.fail("schedules." + hash, "differs from that kernel's winner");
  }
  return result;
}

Status save_tune_result(const std::string& path, const TuneResult& result) {
  std::ofstream out(path);
  if (!out) return make_error(ErrorCode::io_error, "cannot write tune result '" + path + "'");
  out << tune_result_to_json(result) << "\n";
  if (!out) return make_error(ErrorCode::io_error, "cannot write tune result '" + path + "'");
  return ok_status();
}

Result<TuneResult> load_tune_result(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::io_error, "cannot read schedules file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return tune_result_from_json(text.str(), "'" + path + "'");
}

}  // namespace kiln::tune
