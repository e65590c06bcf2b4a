// The MPS control client's contract (machine/mps_control.h), against stand-in control programs
// (shell scripts): what it sends and returns, its errors as Status with the program's exit code
// and stderr, the timeout that ends a program that does not answer, and an exit status no
// process-wide reaper can take first.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "machine/mps_control.h"
#include "scratch_dir.h"

namespace gpufrac::machine {
namespace {

using namespace std::chrono_literals;

class MpsControlTest : public ::testing::Test {
 protected:
  // A stand-in control program running `script` (sh).
  MpsControlOptions Program(const std::string& script) {
    const std::string path = dir_.File("control-" + std::to_string(++programs_));
    std::ofstream(path) << "#!/bin/sh\n" << script << "\n";
    chmod(path.c_str(), 0755);
    return {.control = path, .pipe_dir = dir_.File("pipe"), .log_dir = dir_.File("log")};
  }

  testing::ScratchDir dir_{"mps-control-test"};
  int programs_ = 0;
};

TEST_F(MpsControlTest, SendsTheCommandsAndReturnsTheRepliesAsPrinted) {
  MpsControlOptions options = Program(
      "while read -r line; do echo \"reply to $line\"; done\n"
      "echo \"pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY\"\n"
      "echo \"devices=${CUDA_VISIBLE_DEVICES-unset} extra=$EXTRA\"");
  options.env = {"EXTRA=given"};
  StatusOr<std::string> reply = SendMpsControlCommands(options, "get_server_list\nquit\n");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(*reply, "reply to get_server_list\nreply to quit\npipe=" + dir_.File("pipe") +
                        " log=" + dir_.File("log") + "\ndevices=unset extra=given\n");
}

TEST_F(MpsControlTest, TheCallersCudaVariablesAreLeftOutAndTheOptionsReplaceItsOwn) {
  setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10", 1);
  setenv("MPS_CONTROL_TEST_VAR", "caller", 1);
  MpsControlOptions options = Program(
      "echo \"${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} $MPS_CONTROL_TEST_VAR\"; "
      "env | grep -c '^MPS_CONTROL_TEST_VAR='");
  options.env = {"MPS_CONTROL_TEST_VAR=options"};
  StatusOr<std::string> reply = SendMpsControlCommands(options, "");
  unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  unsetenv("MPS_CONTROL_TEST_VAR");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(*reply, "unset options\n1\n");
}

TEST_F(MpsControlTest, AFailureNamesTheExitCodeOrSignalAndWhatTheProgramSaid) {
  Status failed = StartMpsControlDaemon(Program("echo \"cannot: $1\" >&2; exit 3"));
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.message().find("failed (exit code 3): cannot: -d"), std::string::npos)
      << failed.message();
  StatusOr<std::string> killed = SendMpsControlCommands(Program("kill -TERM $$"), "x\n");
  EXPECT_EQ(killed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(killed.status().message().find("failed (signal 15)"), std::string::npos)
      << killed.status().message();
  MpsControlOptions missing = Program("");
  missing.control = dir_.File("no-such-program");
  StatusOr<std::string> absent = SendMpsControlCommands(missing, "x\n");
  EXPECT_NE(absent.status().message().find("failed (exit code 127)"), std::string::npos)
      << absent.status().message();
}

TEST_F(MpsControlTest, AProgramThatDoesNotAnswerIsKilledAtTheTimeout) {
  const std::string pid_file = dir_.File("pid");
  MpsControlOptions options = Program("echo $$ > " + pid_file + "; exec sleep 30");
  options.timeout = 300ms;
  const auto begin = std::chrono::steady_clock::now();
  StatusOr<std::string> reply = SendMpsControlCommands(options, "get_server_list\n");
  const auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(reply.status().message().find("did not answer within 300 ms"), std::string::npos)
      << reply.status().message();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 3s);
  // Killed and reaped: no such process any more.
  pid_t pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_NE(kill(pid, 0), 0);
  EXPECT_EQ(errno, ESRCH);
}

// gpufracd's job runner reaps with waitpid(-1) from its loop while the MPS workers run the
// control program: the program's exit status must still be the client's to read.
TEST_F(MpsControlTest, AProcessWideReaperDoesNotTakeTheProgramsExitStatus) {
  std::atomic<bool> done{false};
  std::thread reaper([&] {
    while (!done) {
      while (waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      std::this_thread::sleep_for(100us);
    }
  });
  const MpsControlOptions options = Program("exit 3");
  int named = 0;
  for (int i = 0; i < 40; ++i) {
    StatusOr<std::string> reply = SendMpsControlCommands(options, "x\n");
    named += !reply.ok() && reply.status().message().find("(exit code 3)") != std::string::npos;
  }
  done = true;
  reaper.join();
  EXPECT_EQ(named, 40);
}

}  // namespace
}  // namespace gpufrac::machine
