// The importer's entry points in a build without libonnx-dev: every call says so.
#include "onnx/import.h"

namespace kiln::onnx {
namespace {

Error unavailable(const std::string& source) {
  return make_error(ErrorCode::unsupported,
                    source + ": kiln was built without ONNX support (install libonnx-dev and libprotobuf-dev, "
                             "then reconfigure)");
}

}  // namespace

bool onnx_available() { return false; }

Result<ImportedModel> import_onnx_file(const std::string& path, const ImportOptions&) { return unavailable(path); }

Result<ImportedModel> import_onnx_bytes(std::span<const std::byte>, const std::string&, const std::string& source,
                                        const ImportOptions&) {
  return unavailable(source);
}

}  // namespace kiln::onnx
