// Names of the records' enums and the stored form of shapes and dtypes (records.h).
#include "kb/records.h"

#include "ir/dtype.h"

namespace kiln::kb {
namespace {

template <class E, size_t N>
std::optional<E> parse_name(const std::string& name, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

constexpr const char* kRunStatusNames[] = {"running", "succeeded", "failed", "interrupted"};
constexpr const char* kImplementationKindNames[] = {"schedule", "library"};
constexpr const char* kLessonOutcomeNames[] = {"improved", "neutral", "regressed", "incorrect", "failed"};

}  // namespace

const char* run_status_name(RunStatus status) { return kRunStatusNames[static_cast<int>(status)]; }
std::optional<RunStatus> parse_run_status(const std::string& name) {
  return parse_name<RunStatus>(name, kRunStatusNames);
}

const char* implementation_kind_name(ImplementationKind kind) {
  return kImplementationKindNames[static_cast<int>(kind)];
}
std::optional<ImplementationKind> parse_implementation_kind(const std::string& name) {
  return parse_name<ImplementationKind>(name, kImplementationKindNames);
}

const char* lesson_outcome_name(LessonOutcome outcome) { return kLessonOutcomeNames[static_cast<int>(outcome)]; }
std::optional<LessonOutcome> parse_lesson_outcome(const std::string& name) {
  return parse_name<LessonOutcome>(name, kLessonOutcomeNames);
}
bool is_negative(LessonOutcome outcome) {
  return outcome == LessonOutcome::regressed || outcome == LessonOutcome::incorrect ||
         outcome == LessonOutcome::failed;
}

std::string shapes_json(const std::vector<TensorType>& types) {
  nlohmann::json j = nlohmann::json::array();
  for (const TensorType& t : types) j.push_back(t.shape);
  return j.dump();
}

std::string dtypes_json(const std::vector<TensorType>& types) {
  nlohmann::json j = nlohmann::json::array();
  for (const TensorType& t : types) j.push_back(std::string(dtype_name(t.dtype)));
  return j.dump();
}

Result<std::vector<TensorType>> types_from_json(const std::string& shapes, const std::string& dtypes) {
  const nlohmann::json s = nlohmann::json::parse(shapes, nullptr, false);
  const nlohmann::json d = nlohmann::json::parse(dtypes, nullptr, false);
  if (s.is_discarded() || !s.is_array()) return make_error(ErrorCode::parse_error, "shapes is not a JSON array: " + shapes);
  if (d.is_discarded() || !d.is_array()) return make_error(ErrorCode::parse_error, "dtypes is not a JSON array: " + dtypes);
  if (s.size() != d.size()) {
    return make_error(ErrorCode::parse_error, "shapes has " + std::to_string(s.size()) + " entries but dtypes has " +
                                                  std::to_string(d.size()));
  }
  std::vector<TensorType> types;
  for (size_t i = 0; i < s.size(); ++i) {
    TensorType t;
    if (!d[i].is_string() || !parse_dtype(d[i].get<std::string>())) {
      return make_error(ErrorCode::parse_error, "dtypes[" + std::to_string(i) + "] is not a kiln dtype: " + d[i].dump());
    }
    t.dtype = *parse_dtype(d[i].get<std::string>());
    if (!s[i].is_array()) return make_error(ErrorCode::parse_error, "shapes[" + std::to_string(i) + "] is not an array");
    for (const nlohmann::json& dim : s[i]) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
        return make_error(ErrorCode::parse_error,
                          "shapes[" + std::to_string(i) + "] has a dimension that is not a size: " + dim.dump());
      }
      t.shape.push_back(dim.get<int64_t>());
    }
    types.push_back(std::move(t));
  }
  return types;
}

}  // namespace kiln::kb
