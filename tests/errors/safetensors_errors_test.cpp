// Expected diagnostics of the safetensors reader: each corrupt file gives its own error, naming the file and,
// where one is at fault, the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "models/weights.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;

class SafetensorsErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln_st_err_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes raw bytes to a file in the temp dir and returns its path.
  std::string write_raw(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  // A file with the given JSON header and `data_bytes` zero bytes of data.
  std::string write(const std::string& name, const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    return write_raw(name, bytes + header + std::string(data_bytes, '\0'));
  }
  // The error of reading `path`; fails the test if it reads.
  Error error_of(const std::string& path) {
    auto r = read_safetensors(path);
    EXPECT_FALSE(r.ok()) << path;
    if (r.ok()) return Error{ErrorCode::invalid_argument, ""};
    EXPECT_NE(r.error().message.find("file " + path + ": "), std::string::npos) << r.error().message;
    return r.error();
  }
  void expect_error(const std::string& path, ErrorCode code, const std::string& part) {
    const Error e = error_of(path);
    EXPECT_EQ(e.code, code) << e.message;
    EXPECT_NE(e.message.find(part), std::string::npos) << "wanted '" << part << "' in: " << e.message;
  }

  fs::path dir_;
};

TEST_F(SafetensorsErrors, MissingFile) {
  expect_error((dir_ / "nope.safetensors").string(), ErrorCode::io_error, "cannot open");
}

TEST_F(SafetensorsErrors, TruncatedBeforeTheHeaderLength) {
  expect_error(write_raw("short.safetensors", "abc"), ErrorCode::parse_error, "truncated: 3 bytes");
  expect_error(write_raw("empty.safetensors", ""), ErrorCode::parse_error, "truncated: 0 bytes");
}

TEST_F(SafetensorsErrors, HeaderLengthBeyondTheFile) {
  std::string bytes(8, '\0');
  bytes[0] = 100;  // 100 header bytes, only 2 present
  expect_error(write_raw("long.safetensors", bytes + "{}"), ErrorCode::parse_error,
               "header length 100 runs past the end of the file (10 bytes)");
}

TEST_F(SafetensorsErrors, TruncatedData) {
  // A valid file cut short: the last tensor's offsets now run past the data.
  const std::string path = (dir_ / "cut.safetensors").string();
  std::map<std::string, Tensor> t;
  t.emplace("w", Tensor(DType::f32, {4}));
  ASSERT_TRUE(save_safetensors(path, t).ok());
  fs::resize_file(path, fs::file_size(path) - 3);
  expect_error(path, ErrorCode::parse_error, "tensor 'w': data_offsets [0, 16] lie outside the data section (13 bytes)");
}

TEST_F(SafetensorsErrors, BadJson) {
  expect_error(write("json.safetensors", R"({"w": {"dtype": "F32",)", 0), ErrorCode::parse_error, "bad JSON header");
  expect_error(write("array.safetensors", "[1, 2]", 0), ErrorCode::parse_error, "not an object");
  expect_error(write("deep.safetensors", std::string(10000, '[') + std::string(10000, ']'), 0), ErrorCode::parse_error,
               "nested deeper");
  expect_error(write("meta.safetensors", R"({"__metadata__": {"k": 1}})", 0), ErrorCode::parse_error,
               "__metadata__ value of 'k' is not a string");
}

TEST_F(SafetensorsErrors, UnknownDType) {
  expect_error(write("f64.safetensors", R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8),
               ErrorCode::parse_error, "tensor 'w': unknown dtype 'F64' (kiln reads F32, F16, BF16, F8_E4M3");
}

TEST_F(SafetensorsErrors, MalformedEntries) {
  expect_error(write("noshape.safetensors", R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4),
               ErrorCode::parse_error, "tensor 'w': no \"shape\" array");
  expect_error(write("negdim.safetensors", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
               ErrorCode::parse_error, "tensor 'w': shape [-1] must hold non-negative integers");
  expect_error(write("offsets.safetensors", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
               ErrorCode::parse_error, "tensor 'w': \"data_offsets\" must be [begin, end]");
  expect_error(write("reversed.safetensors", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", 4),
               ErrorCode::parse_error, "tensor 'w': data_offsets [4, 0] end before they begin");
}

TEST_F(SafetensorsErrors, OffsetsOutOfRange) {
  expect_error(write("range.safetensors", R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [8, 16]}})", 12),
               ErrorCode::parse_error, "tensor 'w': data_offsets [8, 16] lie outside the data section (12 bytes)");
}

TEST_F(SafetensorsErrors, OverlappingTensors) {
  expect_error(write("overlap.safetensors",
                     R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                     12),
               ErrorCode::parse_error, "tensors 'a' and 'b' overlap");
}

TEST_F(SafetensorsErrors, SizeDoesNotMatchShapeAndDType) {
  expect_error(write("size.safetensors", R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})", 8),
               ErrorCode::parse_error, "tensor 'w': data_offsets [0, 8] hold 8 bytes, but BF16[2,3] needs 12");
}

TEST_F(SafetensorsErrors, WriterRejectsReservedNames) {
  std::map<std::string, Tensor> t;
  t.emplace("__metadata__", Tensor(DType::f32, {1}));
  const Status s = save_safetensors((dir_ / "bad.safetensors").string(), t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  const Status unwritable = save_safetensors((dir_ / "no" / "such" / "dir.safetensors").string(), {});
  ASSERT_FALSE(unwritable.ok());
  EXPECT_EQ(unwritable.error().code, ErrorCode::io_error);
}

}  // namespace
}  // namespace kiln::models
