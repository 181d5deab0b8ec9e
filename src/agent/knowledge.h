// The optimize loop's view of the knowledge base (src/kb, issue 9), through a small adapter so the loop does
// not depend on the database: before an attempt, what is already known about it on this model and device
// (a known failure is skipped and reported as reuse); after it, what happened. Until the knowledge base
// lands no adapter is given and the report's reuse section is empty.
#pragma once

#include <optional>
#include <string>

namespace kiln::agent {

struct AttemptRecord;

struct KnowledgeReuse {
  std::string opportunity;
  std::string what;  // e.g. "skipped: known to fail on this device (numerics, 2026-11-30)"
};

class OptimizeKnowledge {
 public:
  virtual ~OptimizeKnowledge() = default;
  // `model_key` names the model and its shapes; `device` the device (DeviceInfo::name).
  virtual std::optional<KnowledgeReuse> known_outcome(const std::string& model_key, const std::string& device,
                                                      const std::string& opportunity) = 0;
  virtual void record(const std::string& model_key, const std::string& device, const AttemptRecord& attempt) = 0;
};

}  // namespace kiln::agent
