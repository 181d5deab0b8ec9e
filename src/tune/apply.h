// Applying a tune result to a plan (`kiln run --schedules FILE`): the winners whose kernel hash is a kernel
// of this optimized graph become backend::PlanOptions::schedules. A file tuned for another target is an error;
// a winner the kernel cannot implement (a file edited or from another kiln) is an error naming the hash and
// the field; winners for kernels this graph does not have (another model, another shape, an older kiln) are
// ignored with a note, so a stale file never changes what runs silently.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernel/schedule.h"
#include "tune/tuner.h"

namespace kiln::tune {

struct AppliedSchedules {
  std::map<std::string, kernel::Schedule> schedules;  // for PlanOptions::schedules
  int matched = 0;
  int ignored = 0;
  std::vector<std::string> notes;
};

Result<AppliedSchedules> apply_tune_result(const TuneResult& result, const Graph& optimized, kernel::Target target,
                                           const std::string& source);

}  // namespace kiln::tune
