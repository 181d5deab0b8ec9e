#include "tune/apply.h"

#include <fmt/format.h>

#include "tune/task.h"

namespace kiln::tune {

Result<AppliedSchedules> apply_tune_result(const TuneResult& result, const Graph& optimized, kernel::Target target,
                                           const std::string& source) {
  if (result.target != kernel::target_name(target)) {
    return make_error(ErrorCode::invalid_argument,
                      fmt::format("{} was tuned for target '{}', this run's backend compiles for '{}'; tune again "
                                  "with `kiln tune MODEL --backend {}`",
                                  source, result.target, kernel::target_name(target), kernel::target_name(target)));
  }
  KILN_ASSIGN_OR_RETURN(TaskList list, collect_tasks(optimized));
  std::map<std::string, const kernel::Kernel*> kernels;
  for (const TuneTask& t : list.tasks) {
    if (t.kind == TaskKind::kernel) kernels[t.hash] = &t.kernel;
  }
  AppliedSchedules applied;
  for (const auto& [hash, schedule] : result.schedules()) {
    auto it = kernels.find(hash);
    if (it == kernels.end()) {
      ++applied.ignored;
      continue;
    }
    Status st = kernel::can_implement(*it->second, schedule, target);
    if (!st.ok()) {
      return make_error(ErrorCode::invalid_argument,
                        fmt::format("{}: the schedule for kernel {} cannot run it: {}", source, hash, st.error().message));
    }
    applied.schedules[hash] = schedule;
    ++applied.matched;
  }
  if (applied.ignored > 0) {
    applied.notes.push_back(fmt::format("{}: {} of {} schedules match no kernel of this model (tuned for {}, other "
                                        "shapes or an older kiln) and are ignored",
                                        source, applied.ignored, applied.ignored + applied.matched, result.model));
  }
  if (applied.matched == 0) {
    applied.notes.push_back(source + ": no tuned schedule applies; every kernel runs its default schedule");
  } else {
    applied.notes.push_back(fmt::format("{}: tuned schedules for {} of {} kernels", source, applied.matched, kernels.size()));
  }
  return applied;
}

}  // namespace kiln::tune
