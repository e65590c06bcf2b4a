// `gpufrac exec` end to end on a simulated GPU: the command sees exactly its limit, exit statuses
// pass through, and bad input is one line on stderr with exit status 2.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <map>
#include <string>

#include "harness.h"
#include "scratch_dir.h"
#include "service_budget_dir.h"

namespace gpufrac::testing {
namespace {

constexpr long long kMiB = 1ll << 20;
constexpr long long kGiB = 1ll << 30;

class ExecTest : public ::testing::Test {
 protected:
  ExecTest() : machine_("2xA100-40GB") {}
  // `gpufrac exec` keeps its compute arbiters in a directory its user's state directory records:
  // the test's own home, removed with what it records.
  ~ExecTest() override {
    RemoveRecordedBudgetDir(home_.File(".local/state/gpufrac/exec-arbiters"));
  }
  std::map<std::string, std::string> Env() const {
    return Merge(machine_.Env(), {{"HOME", home_.path()}});
  }
  RunResult Exec(std::vector<std::string> args) {
    args.insert(args.begin(), {BuildPath("bin/gpufrac"), "exec"});
    return RunCommand(args, Env());
  }
  SimMachine machine_;
  ScratchDir home_{"gpufrac-exec-home"};
};

TEST_F(ExecTest, TheCommandSeesItsLimit) {
  RunResult r = Exec({"--gpu-memory", "4G", "--", ProbePath(), "info"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.GetInt("total"), 4 * kGiB);
  EXPECT_EQ(r.GetInt("device_total"), 4 * kGiB);
}

TEST_F(ExecTest, AllSizeSpellingsMeanBinaryUnits) {
  for (const char* size : {"4G", "4GiB", "4096M", "4096Mi", "4294967296"}) {
    SCOPED_TRACE(size);
    RunResult r = Exec({"--gpu-memory", size, "--", ProbePath(), "info"});
    EXPECT_EQ(r.GetInt("total"), 4 * kGiB) << r.err;
  }
  RunResult r = Exec({"--gpu-memory", "1024Mi", "--", ProbePath(), "info"});
  EXPECT_EQ(r.GetInt("total"), 1024 * kMiB) << r.err;
}

TEST_F(ExecTest, AFractionIsAShareOfTheGpusMemory) {
  RunResult r = Exec({"--gpu-fraction", "0.25", "--gpu", "1", "--", ProbePath(), "info"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.GetInt("total"), 40960 * kMiB / 4);
}

TEST_F(ExecTest, OneWholeGpuIsAllOfItsMemory) {
  RunResult r =
      Exec({"--gpus", "1", "--gpu-model", "A100-40GB", "--gpu", "1", "--", ProbePath(), "info"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.GetInt("total"), 40960 * kMiB);
}

TEST_F(ExecTest, OnlyTheChosenGpuIsVisible) {
  std::string uuid1 = machine_.Uuid(1);
  RunResult r = Exec({"--gpu-memory", "1G", "--gpu", "1", "--", ProbePath(), "uuid"});
  EXPECT_EQ(r.Get("uuid"), uuid1) << r.err;
}

TEST_F(ExecTest, OverTheLimitIsAnOrdinaryOutOfMemoryError) {
  RunResult r =
      Exec({"--gpu-memory", "2G", "--", ProbePath(), "alloc", "mem", std::to_string(2 * kGiB)});
  EXPECT_EQ(r.GetInt("alloc"), 2);  // the context takes part of the 2 GiB
  EXPECT_NE(r.err.find("out of GPU memory"), std::string::npos) << r.err;
  RunResult quiet = Exec({"--gpu-memory", "2G", "--quiet", "--", ProbePath(), "alloc", "mem",
                          std::to_string(2 * kGiB)});
  EXPECT_EQ(quiet.GetInt("alloc"), 2);
  EXPECT_EQ(quiet.err.find("out of GPU memory"), std::string::npos) << quiet.err;
}

TEST_F(ExecTest, ARelativeLimiterPathStillAppliesAfterCd) {
  std::string dir = BuildPath("");
  auto env = Merge(Env(), {{"GPUFRAC_LIBRARY", "lib/libgpufrac.so"}});
  std::string cmd = "cd " + dir + " && exec " + BuildPath("bin/gpufrac") +
                    " exec --gpu-memory 2G -- sh -c 'cd / && exec " + ProbePath() + " info'";
  RunResult r = RunCommand({"sh", "-c", cmd}, env);
  EXPECT_EQ(r.GetInt("total"), 2 * kGiB) << r.err;
}

TEST_F(ExecTest, PassesTheExitStatusThrough) {
  EXPECT_EQ(Exec({"--gpu-memory", "1G", "--", "sh", "-c", "exit 7"}).status, 7);
  EXPECT_EQ(Exec({"--gpu-memory", "1G", "--", "sh", "-c", "kill -TERM $$"}).status, 128 + 15);
  EXPECT_EQ(Exec({"--gpu-memory", "1G", "--", "/nonexistent/cmd"}).status, 127);
  // Even when started with SIGCHLD ignored (which would make children unwaitable).
  std::string cmd =
      "trap '' CHLD; exec " + BuildPath("bin/gpufrac") + " exec --gpu-memory 1G -- sh -c 'exit 7'";
  EXPECT_EQ(RunCommand({"sh", "-c", cmd}, Env()).status, 7);
}

TEST_F(ExecTest, ATerminatedRunStopsTheCommandAndCleansUp) {
  std::string seen;
  pid_t pid = Start({BuildPath("bin/gpufrac"), "exec", "--gpu-memory", "2G", "--", ProbePath(),
                     "hold", std::to_string(kGiB)},
                    Env(), "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;
  std::string budget_prefix = "exec-" + std::to_string(pid) + "-";
  auto budget_exists = [&] { return !testing::BudgetsStartingWith(budget_prefix).empty(); };
  EXPECT_TRUE(budget_exists());
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // The command's fate, passed through: gpufrac ends by the same signal, after cleaning up.
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_FALSE(budget_exists());
}

TEST_F(ExecTest, BadInputIsOneLineAndExitStatusTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--gpu-memory", "4X", "--", "true"}, "unknown size unit"},
      {{"--gpu-memory", "0", "--", "true"}, "greater than zero"},
      {{"--gpu-memory", "-1G", "--", "true"}, "--gpu-memory"},
      {{"--gpu-memory", "41G", "--", "true"}, "is more than GPU 0"},
      {{"--gpu-memory", "100M", "--", "true"}, "cannot hold even the CUDA context"},
      // More than the A100's bare context (400 MiB), less than its charge with the 256 MiB for
      // the kernels frameworks load into it.
      {{"--gpu-memory", "600M", "--", "true"},
       "context on GPU 0 (NVIDIA A100-SXM4-40GB) (about 656 MiB)"},
      {{"--gpu-fraction", "1.5", "--", "true"}, "--gpu-fraction"},
      {{"--gpu-fraction", "0", "--", "true"}, "--gpu-fraction"},
      {{"--gpu-memory", "1G", "--gpu", "7", "--", "true"}, "--gpu"},
      {{"--gpu-memory", "1G"}, "missing the command"},
      {{"--", "true"}, "exactly one of --gpu-memory"},
      {{"--gpu-memory", "1G", "--gpu-fraction", "0.5", "--", "true"}, "exactly one of"},
      {{"--gpu-fraction", "1", "--", "true"}, "is a whole GPU; write --gpus 1"},
      {{"--gpus", "2", "--", "true"}, "exec runs a command on one GPU"},
      {{"--mig-profile", "1g.10gb", "--", "true"}, "exec does not create MIG slices"},
      {{"--gpus", "1", "--gpu-compute", "0.5", "--", "true"},
       "whole GPUs have all of their compute"},
      {{"--gpu-memory", "40G", "--gpu-compute", "0.5", "--", "true"},
       "need a share of the GPU, not all of its memory"},
      {{"--gpus", "1", "--gpu-model", "A30-24GB", "--", "true"}, ", not A30-24GB"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.args[1]);
    RunResult r = Exec(c.args);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace gpufrac::testing
