// Garbage collection of a knowledge base: removes recipes that can no longer be exact hits here (measured
// under another fingerprint than the current one), recipes older than a number of days, and orphans
// (fingerprints nothing refers to; references to runs that are gone, possible in a file another tool wrote
// with foreign keys off). Runs, lessons and decisions are history and are kept. One transaction; the report
// says what went.
#pragma once

#include <optional>
#include <string>

#include "kb/kb.h"

namespace kiln::kb {

struct GcOptions {
  Fingerprint current;                  // recipes under another fingerprint are removed
  bool keep_other_devices = false;      // only remove other fingerprints of current's device (kind and name)
  std::optional<int> older_than_days;   // also remove recipes created more than this many days ago
  int64_t now = 0;                      // Unix seconds; 0: the clock
};

struct GcReport {
  int64_t recipes_other_fingerprint = 0;
  int64_t recipes_too_old = 0;
  int64_t orphan_fingerprints = 0;
  int64_t dangling_run_references = 0;  // recipe/lesson run_ids cleared, decisions of missing runs removed
  std::string summary() const;          // "removed 3 recipes (2 under another fingerprint, 1 older than ...)..."
};

Result<GcReport> collect_garbage(KnowledgeBase& kb, const GcOptions& options);

}  // namespace kiln::kb
