// The knowledge base's schema and its version. A kiln KB is a SQLite file marked with kiln's application_id
// and a schema version (PRAGMA user_version). Opening checks both: a new, empty file gets the current schema;
// a file of another application, of a newer schema version, or of an older one that has no migration is
// refused with a message saying what to do; it is never silently reused.
//
// Tables (schema version 1), all STRICT:
//   fingerprints (hash, canonical, device_kind, device_name)
//   runs      (id, started_at, finished_at, command, model, workload, backend, fingerprint, status)
//   recipes   (id, run_id, created_at, task_hash, shapes, dtypes, fingerprint, implementation_kind,
//              implementation, source_hash, seconds, timings, verification, e2e_gain)
//   lessons   (id, run_id, created_at, pattern, device_kind, device_name, outcome, reason, evidence)
//   decisions (id, run_id, created_at, opportunity, predicted_gain, measured_gain, kept, reason)
// Times are Unix seconds; JSON columns hold compact JSON text.
#pragma once

#include <cstdint>

#include "kb/sqlite.h"

namespace kiln::kb {

inline constexpr int kSchemaVersion = 1;
inline constexpr int64_t kApplicationId = 0x6b696c6e;  // "kiln"

// Sets WAL mode and foreign keys on the connection, then creates, migrates or refuses the schema (above).
Status prepare_schema(Database& db);

}  // namespace kiln::kb
