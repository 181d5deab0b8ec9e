// The tuner's result as JSON (`kiln tune -o FILE`): the winners keyed by kernel hash, which `kiln run
// --schedules FILE` and the optimize loop read, and all the evidence (every candidate: schedule, round,
// outcome class, summary, timings), so a later run can reuse it and a person can audit it.
//
//   {"format": "kiln-tune/1", "model": ..., "target": "cpu", "device": ..., "protocol": ..., "compiler": ...,
//    "schedules": {HASH: SCHEDULE, ...},
//    "kernels": [{"hash", "label", "shape", "occurrences", "default_schedule", "winner", "tuned", "decision",
//                 "winner_seconds", "default_seconds", "worst_seconds", "baseline_seconds", "baseline_kernels",
//                 "baseline_note", "ab_summary", "budget_exhausted", "seconds",
//                 "candidates": [{"schedule", "round", "outcome", "summary", "timed", "time": {median, min, max,
//                                 ci_low, ci_high, samples}, "quarantined", "contended"}]}],
//    "library": [{"hash", "label", "shape", "occurrences", "seconds", "note"}], "notes": [...]}
#pragma once

#include <string>

#include "tune/tuner.h"

namespace kiln::tune {

inline constexpr const char* kTuneFormat = "kiln-tune/1";

std::string tune_result_to_json(const TuneResult& result);
// Errors name the field at fault; `source` (a file name) prefixes them.
Result<TuneResult> tune_result_from_json(const std::string& text, const std::string& source = "tune result");

Status save_tune_result(const std::string& path, const TuneResult& result);
Result<TuneResult> load_tune_result(const std::string& path);

}  // namespace kiln::tune
