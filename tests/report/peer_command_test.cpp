// kiln optimize --peer-command: a real /bin/sh child whose last line of output is the peer's figures.
#include "report/peer_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kiln {
namespace {

class PeerCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_peer_command_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "work");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Result<std::map<std::string, double>> run(const std::string& command, double wall_seconds = 30) {
    return report::run_peer_command({command, (dir_ / "work").string(), (dir_ / "scratch").string(), wall_seconds});
  }
  std::filesystem::path dir_;
};

TEST_F(PeerCommandTest, TheLastLineHoldsTheFigures) {
  auto r = run("echo compiling...; echo 'torch.compile=2.37 eager=3.5'; echo");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_DOUBLE_EQ(r->at("torch.compile"), 2.37e-3);
  EXPECT_DOUBLE_EQ(r->at("eager"), 3.5e-3);
}

TEST_F(PeerCommandTest, RunsInItsWorkingDirectory) {
  std::ofstream(dir_ / "work" / "figure.txt") << "peer=1.25\n";
  auto r = run("cat figure.txt");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(r->at("peer"), 1.25e-3);
}

TEST_F(PeerCommandTest, FailuresNameTheCommandAndWhatWentWrong) {
  auto failed = run("echo peer=1; echo 'no GPU here' >&2; exit 3");
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("exit 3"), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find("exited 3"), std::string::npos) << failed.error().message;
  EXPECT_NE(failed.error().message.find("no GPU here"), std::string::npos) << failed.error().message;

  auto garbled = run("echo 'peer=1.0 done'");
  ASSERT_FALSE(garbled.ok());
  EXPECT_EQ(garbled.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(garbled.error().message.find("peer=1.0 done"), std::string::npos) << garbled.error().message;

  auto silent = run("true");
  ASSERT_FALSE(silent.ok());
  EXPECT_NE(silent.error().message.find("no figures"), std::string::npos) << silent.error().message;

  auto slow = run("sleep 5; echo peer=1", 0.3);
  ASSERT_FALSE(slow.ok());
  EXPECT_NE(slow.error().message.find("ran past its 0.3 s"), std::string::npos) << slow.error().message;
}

}  // namespace
}  // namespace kiln
