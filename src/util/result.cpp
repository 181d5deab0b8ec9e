#include "util/result.h"

namespace kiln {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::parse_error: return "parse error";
    case ErrorCode::shape_error: return "shape error";
    case ErrorCode::unknown_op: return "unknown op";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::io_error: return "i/o error";
    case ErrorCode::verify_error: return "verify error";
    case ErrorCode::device_error: return "device error";
  }
  return "error";
}

}  // namespace kiln
