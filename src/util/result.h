// Result<T>: the value channel for expected failures (bad model file, unsupported op, shape mismatch,
// compile error, timeout). Every error has a code from a closed set and a message for a person that names
// the file, node or field at fault.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "util/check.h"

namespace kiln {

enum class ErrorCode {
  invalid_argument,  // a bad option or value given by the user
  parse_error,       // malformed text/JSON/binary input
  shape_error,       // shapes or dtypes that do not fit an op
  unknown_op,        // an op name the registry does not know
  unsupported,       // valid input that this build cannot handle
  io_error,          // a file that cannot be read or written
  verify_error,      // a graph that breaks an IR invariant
  device_error,      // a GPU driver, compiler or library call that failed at run time
};

const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

// Prefixes context ("node %q (linear)", "file x.json") to an error's message.
inline Error with_context(Error error, const std::string& context) {
  error.message = context + ": " + error.message;
  return error;
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  Result(Error error) : state_(std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    KILN_CHECK(ok());
    return std::get<0>(state_);
  }
  const T& value() const& {
    KILN_CHECK(ok());
    return std::get<0>(state_);
  }
  T&& value() && {
    KILN_CHECK(ok());
    return std::get<0>(std::move(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    KILN_CHECK(!ok());
    return std::get<1>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

// Status: a Result with no value.
struct Ok {};
using Status = Result<Ok>;
inline Status ok_status() { return Ok{}; }

inline Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

}  // namespace kiln

// Propagates an error from a Result-returning expression; otherwise yields nothing.
#define KILN_TRY(expr)                          \
  do {                                          \
    auto kiln_try_result_ = (expr);             \
    if (!kiln_try_result_.ok()) return kiln_try_result_.error(); \
  } while (0)

// Declares `var` from a Result-returning expression, or propagates its error.
#define KILN_ASSIGN_CONCAT_INNER(a, b) a##b
#define KILN_ASSIGN_CONCAT(a, b) KILN_ASSIGN_CONCAT_INNER(a, b)
#define KILN_ASSIGN_OR_RETURN(var, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_ASSIGN_CONCAT(kiln_result_, __LINE__), var, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, var, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.error();               \
  var = std::move(tmp).value()
