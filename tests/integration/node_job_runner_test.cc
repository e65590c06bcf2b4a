// The job runner and gpufrac-shim end to end: real jobs started through the two-phase protocol
// on a simulated GPU under libgpufrac.so, cancelled, abandoned, and outliving their service.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "launch/budgets.h"
#include "limiter/budget.h"
#include "limiter/limit_config.h"
#include "node/job_runner.h"

namespace gpufrac::node {
namespace {

using gpufrac::testing::BuildPath;
using gpufrac::testing::ProbePath;
using gpufrac::testing::RunResult;
using gpufrac::testing::SimMachine;
using std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uid_t kNobody = 65534;

std::atomic<int> g_counter{0};

// The shim and the limiter where the jobs' users can reach them.
std::string Shim() { return BuildPath("bin/gpufrac-shim"); }
std::string Limiter() { return BuildPath("lib/libgpufrac.so"); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = 30s) {
  auto deadline = steady_clock::now() + timeout;
  while (!done()) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::optional<Outcome> WaitOutcome(const std::string& job_dir) {
  std::optional<Outcome> outcome;
  WaitFor([&] { return (outcome = JobRunner::ReadOutcome(job_dir)).has_value(); });
  return outcome;
}

// "key=value" lookups in a log, as cuda_probe prints them.
RunResult Parsed(const std::string& text) {
  RunResult r;
  r.out = text;
  return r;
}

// Field `index` (1-based, as proc(5) counts) of /proc/PID/stat, or "" if the process is gone.
std::string StatField(pid_t pid, int index) {
  std::string text = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream rest(text.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= index && rest >> field; ++i) {
  }
  return field;
}

// Gone or a zombie: either way it runs no more.
bool Gone(pid_t pid) {
  std::string state = StatField(pid, 3);
  return state.empty() || state == "Z";
}

std::set<pid_t> ChildrenOfThisProcess() {
  std::set<pid_t> children;
  DIR* proc = opendir("/proc");
  while (dirent* e = readdir(proc)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid > 0 && StatField(pid, 4) == std::to_string(getpid())) children.insert(pid);
  }
  closedir(proc);
  return children;
}

// Names of the budget segments of `workload` in /dev/shm.
std::vector<std::string> BudgetsOf(const std::string& workload) {
  return testing::BudgetsStartingWith(workload + ".");
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  stat(path.c_str(), &st);
  return st.st_mode & 07777;
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// `text`, or its start and its size where it is too long to print in a failure.
std::string Head(const std::string& text) {
  if (text.size() <= 1024) return text;
  return text.substr(0, 200) + "... (" + std::to_string(text.size()) + " bytes)";
}

// Bytes process `pid` has passed to write(2) and its kin so far (/proc/PID/io's wchar).
uint64_t BytesWritten(pid_t pid) {
  std::istringstream io(ReadFile("/proc/" + std::to_string(pid) + "/io"));
  for (std::string key; io >> key;) {
    uint64_t value = 0;
    io >> value;
    if (key == "wchar:") return value;
  }
  return 0;
}

class JobRunnerTest : public ::testing::Test {
 protected:
  JobRunnerTest() : machine_("2xA100-40GB") {}

  void SetUp() override {
    char tmpl[] = "/tmp/gpufrac-runner-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    // Jobs of another user must be able to reach their directories below this one.
    chmod(base_.c_str(), 0711);
    workload_ = "runner-test-" + std::to_string(getpid()) + "-" + std::to_string(g_counter++);
    uuid_ = machine_.Uuid(0);
    ASSERT_FALSE(uuid_.empty());
    StatusOr<launch::BudgetDir> budgets = launch::BudgetDir::Make(0711);
    ASSERT_TRUE(budgets.ok()) << budgets.status();
    budget_dir_ = budgets->path();
    runner_ = std::make_unique<JobRunner>(Shim(), std::move(*budgets));
  }

  void TearDown() override {
    // Every shim this test started has ended and is reaped, whatever the test did.
    for (const proc::ProcessId& shim : shims_) {
      if (!WaitFor([&] { return !proc::IsRunning(shim); }, 15s)) kill(shim.pid, SIGKILL);
      waitpid(shim.pid, nullptr, 0);
    }
    runner_.reset();
    if (!budget_dir_.empty()) {
      NewRunner().Cleanup(JobDir(), workload_, {machine_.Uuid(0), machine_.Uuid(1)});
      std::filesystem::remove_all(budget_dir_);
    }
    std::error_code ec;
    std::filesystem::remove_all(base_, ec);
  }

  std::string JobDir() const { return base_ + "/job"; }
  // Another runner on the same budget directory (as a restarted service has).
  JobRunner NewRunner(const std::string& shim = Shim()) const {
    StatusOr<launch::BudgetDir> budgets = launch::BudgetDir::Open(budget_dir_);
    EXPECT_TRUE(budgets.ok()) << budgets.status();
    return JobRunner(shim, std::move(*budgets));
  }
  std::string Log(const char* name) const { return ReadFile(JobDir() + "/" + name); }

  LaunchSpec Spec(std::vector<std::string> command) const {
    LaunchSpec spec;
    spec.job_dir = JobDir();
    spec.workload = workload_;
    spec.command = std::move(command);
    spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "GREETING=hello world",
                "PROBE=" + ProbePath()};
    spec.cwd = base_;
    spec.uid = getuid();
    spec.gid = getgid();
    spec.gpus = {{uuid_, 2 * kGiB, 256 * kMiB}};
    spec.limiter_path = Limiter();
    for (const auto& [name, value] : machine_.Env()) spec.extra_env.push_back(name + "=" + value);
    spec.kill_grace_seconds = 1;
    return spec;
  }

  // Step 1 of the protocol; the shim is remembered so that TearDown reaps it.
  proc::ProcessId Prepare(const LaunchSpec& spec) {
    StatusOr<proc::ProcessId> shim = runner_->Prepare(spec);
    EXPECT_TRUE(shim.ok()) << shim.status();
    if (!shim.ok()) return {};
    shims_.push_back(*shim);
    return *shim;
  }

  proc::ProcessId Start(const LaunchSpec& spec) {
    proc::ProcessId shim = Prepare(spec);
    if (shim.pid > 0) {
      EXPECT_TRUE(runner_->Release(shim).ok());
    }
    return shim;
  }

  std::optional<Outcome> Run(const LaunchSpec& spec) {
    proc::ProcessId shim = Start(spec);
    if (shim.pid <= 0) return std::nullopt;
    return WaitOutcome(spec.job_dir);
  }

  // Waits until the job has printed `text` on its stdout.
  bool WaitForOutput(const std::string& text) {
    return WaitFor([&] { return Log(JobRunner::kStdout).find(text) != std::string::npos; });
  }

  SimMachine machine_;
  std::string base_, workload_, uuid_, budget_dir_;
  std::unique_ptr<JobRunner> runner_;
  std::vector<proc::ProcessId> shims_;
};

TEST_F(JobRunnerTest, RecordsTheExitCode) {
  std::optional<Outcome> outcome = Run(Spec({"sh", "-c", "exit 3"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kExited);
  EXPECT_EQ(outcome->code, 3);
  EXPECT_EQ(outcome->Describe(), "exit code 3");
  EXPECT_EQ(ReadFile(JobDir() + "/outcome"), "exited 3\n");
  EXPECT_FALSE(Exists(JobDir() + "/outcome.tmp"));
  // The shim ends once it has recorded the outcome.
  EXPECT_TRUE(WaitFor([&] { return !proc::IsRunning(shims_[0]); }));
}

TEST_F(JobRunnerTest, RecordsADeathBySignal) {
  std::optional<Outcome> outcome = Run(Spec({"sh", "-c", "kill -KILL $$"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kSignaled);
  EXPECT_EQ(outcome->code, SIGKILL);
  EXPECT_EQ(outcome->Describe(), "killed by signal 9 (Killed)");
}

TEST_F(JobRunnerTest, OutputGoesToTheLogsAndTheJobDirectoryIsPrivate) {
  std::optional<Outcome> outcome =
      Run(Spec({"sh", "-c", "echo to-stdout; echo to-stderr >&2; read x || echo stdin-empty"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kExited);
  EXPECT_EQ(Log(JobRunner::kStdout), "to-stdout\nstdin-empty\n");
  EXPECT_EQ(Log(JobRunner::kStderr), "to-stderr\n");
  EXPECT_EQ(ModeOf(JobDir()), 0711u);
  EXPECT_EQ(ModeOf(JobDir() + "/" + JobRunner::kStdout), 0600u);
  EXPECT_EQ(ModeOf(JobDir() + "/" + JobRunner::kStderr), 0600u);
  EXPECT_EQ(ModeOf(JobDir() + "/limits"), 0444u);
  EXPECT_EQ(ModeOf(JobDir() + "/spec.json"), 0600u);
  // The job's pid is recorded.
  EXPECT_GT(std::atoi(ReadFile(JobDir() + "/pid").c_str()), 0);
}

TEST_F(JobRunnerTest, OutputUnderTheCapIsKeptByteForByte) {
  // Every byte value, no newline at the end, more than a pipe holds; the background part is
  // written by a grandchild while the job waits for it.
  std::mt19937 random(7);
  auto make = [&](const std::string& name, size_t size) {
    std::string data(size, '\0');
    for (char& c : data) c = static_cast<char>(random());
    std::ofstream(base_ + "/" + name, std::ios::binary) << data;
    return data;
  };
  const std::string out = make("out.bin", 300 * 1024), err = make("err.bin", 200 * 1024),
                    bg = make("bg.bin", 250 * 1024);
  LaunchSpec spec = Spec({"sh", "-c",
                          "(while [ ! -e go ]; do sleep 0.01; done; cat bg.bin) & "
                          "cat out.bin; : > go; cat err.bin >&2; wait"});
  spec.max_log_bytes = kMiB;
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0");
  // Compared without printing: a failure would print 750 KiB of binary.
  EXPECT_TRUE(Log(JobRunner::kStdout) == out + bg) << Log(JobRunner::kStdout).size();
  EXPECT_TRUE(Log(JobRunner::kStderr) == err) << Log(JobRunner::kStderr).size();
}

TEST_F(JobRunnerTest, EachLogKeepsTheOrderOfTheJobsWrites) {
  std::optional<Outcome> outcome =
      Run(Spec({"sh", "-c",
                "for i in $(seq 100); do echo out $i; echo err $i >&2; "
                "sh -c \"echo sub-out $i; echo sub-err $i >&2\"; done"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0");
  std::string out, err;
  for (int i = 1; i <= 100; ++i) {
    std::string n = std::to_string(i);
    out += "out " + n + "\nsub-out " + n + "\n";
    err += "err " + n + "\nsub-err " + n + "\n";
  }
  EXPECT_EQ(Log(JobRunner::kStdout), out);
  EXPECT_EQ(Log(JobRunner::kStderr), err);
}

TEST_F(JobRunnerTest, OutputPastTheCapIsDroppedWithoutStoppingTheJob) {
  // 20 MiB on stdout, then 20 MiB on stderr, against a cap of 1 MiB for both together.
  LaunchSpec spec =
      Spec({"sh", "-c", "yes | head -c 20971520 && yes | head -c 20971520 >&2 && exit 0"});
  spec.max_log_bytes = kMiB;
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  // `head` wrote all of it: the job was neither blocked nor killed by SIGPIPE.
  EXPECT_EQ(outcome->Describe(), "exit code 0");
  std::string kept;
  for (uint64_t i = 0; i < kMiB / 2; ++i) kept += "y\n";
  const std::string out = Log(JobRunner::kStdout);
  EXPECT_EQ(out.size(), kMiB);
  EXPECT_TRUE(out == kept) << "stdout.log is not the job's first 1 MiB";
  EXPECT_EQ(Head(Log(JobRunner::kStderr)),
            "[gpufrac: this job's output passed 1 MiB; the rest is dropped (gpufracd "
            "--max-log-bytes)]\n"
            "[gpufrac: dropped 19922944 bytes of stdout and 20971520 bytes of stderr]\n");
}

TEST_F(JobRunnerTest, AJobThatWritesWithoutEndIsCancelledAndItsLogsStayWithinTheCap) {
  LaunchSpec spec = Spec({"sh", "-c", "yes err >&2 & exec yes out"});
  spec.max_log_bytes = kMiB;
  proc::ProcessId shim = Start(spec);
  const std::string out_log = JobDir() + "/" + JobRunner::kStdout;
  const std::string err_log = JobDir() + "/" + JobRunner::kStderr;
  auto logged = [&] { return FileSize(out_log) + FileSize(err_log); };
  // Bounded, so that logs without a cap cannot fill the disk before the test gives up.
  ASSERT_TRUE(WaitFor([&] {
    return Log(JobRunner::kStderr).find("the rest is dropped") != std::string::npos ||
           logged() > 4 * kMiB;
  }));
  // Past the cap the job goes on writing, never blocked.
  pid_t job = static_cast<pid_t>(std::atoi(ReadFile(JobDir() + "/pid").c_str()));
  ASSERT_GT(job, 0);
  uint64_t written = BytesWritten(job);
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(BytesWritten(job), written + kMiB);
  EXPECT_FALSE(JobRunner::ReadOutcome(JobDir()));

  ASSERT_TRUE(runner_->Signal(shim, SIGTERM).ok());
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "killed by signal 15 (Terminated)");
  EXPECT_LE(logged(), kMiB + 256);
  const std::string err = Log(JobRunner::kStderr);
  // The marker starts a line of its own, even where the cap cut one of the job's.
  size_t marker = err.find("[gpufrac: this job's output passed 1 MiB; the rest is dropped");
  ASSERT_NE(marker, std::string::npos);
  EXPECT_TRUE(marker == 0 || err[marker - 1] == '\n');
  EXPECT_NE(err.find("\n[gpufrac: dropped "), std::string::npos) << Head(err.substr(marker));
}

TEST_F(JobRunnerTest, TheJobRunsInItsDirectoryWithTheUsersEnvironmentAndTheLimiter) {
  std::string cwd = base_ + "/work dir";
  ASSERT_EQ(mkdir(cwd.c_str(), 0755), 0);
  LaunchSpec spec = Spec({"sh", "-c",
                          "pwd; echo \"greeting=$GREETING\"; echo \"cvd=$CUDA_VISIBLE_DEVICES\"; "
                          "echo \"preload=$LD_PRELOAD\"; echo \"limits=$GPUFRAC_LIMIT_FILE\"; "
                          "echo \"sim=$SIMGPU_NAMESPACE\""});
  spec.cwd = cwd;
  // The user's own settings of the variables the runner sets: CUDA_VISIBLE_DEVICES is replaced
  // (twice, so that no duplicate can shadow it), LD_PRELOAD is kept after the limiter.
  spec.env.push_back("CUDA_VISIBLE_DEVICES=0");
  spec.env.push_back("LD_PRELOAD=libm.so.6");
  spec.env.push_back("CUDA_VISIBLE_DEVICES=1");
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0") << Log(JobRunner::kStderr);
  std::string expected = cwd + "\ngreeting=hello world\ncvd=" + uuid_ +
                         "\npreload=" + Limiter() + ":libm.so.6\nlimits=" + JobDir() +
                         "/limits\nsim=" + machine_.name_space() + "\n";
  EXPECT_EQ(Log(JobRunner::kStdout), expected);
}

TEST_F(JobRunnerTest, CudaSeesTheLimitAndCannotAllocatePastIt) {
  std::optional<Outcome> outcome = Run(Spec({ProbePath(), "info"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0") << Log(JobRunner::kStderr);
  RunResult info = Parsed(Log(JobRunner::kStdout));
  EXPECT_EQ(info.GetInt("total"), static_cast<long long>(2 * kGiB));
  EXPECT_EQ(info.GetInt("device_total"), static_cast<long long>(2 * kGiB));
}

TEST_F(JobRunnerTest, AnAllocationOverTheLimitFails) {
  std::optional<Outcome> outcome =
      Run(Spec({ProbePath(), "alloc", "mem", std::to_string(3 * kGiB)}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(Parsed(Log(JobRunner::kStdout)).GetInt("alloc"), 2);  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_NE(Log(JobRunner::kStderr).find("out of GPU memory"), std::string::npos)
      << Log(JobRunner::kStderr);
}

TEST_F(JobRunnerTest, MemoryInUseIsWhatTheJobHoldsAndCancelEndsIt) {
  proc::ProcessId shim = Start(Spec({ProbePath(), "hold", std::to_string(kGiB)}));
  ASSERT_TRUE(WaitForOutput("hold=")) << Log(JobRunner::kStderr);
  ASSERT_NE(Log(JobRunner::kStdout).find("hold=0"), std::string::npos);
  EXPECT_GE(runner_->MemoryInUse(workload_, uuid_), kGiB);
  EXPECT_LE(runner_->MemoryInUse(workload_, uuid_), 2 * kGiB);
  ASSERT_TRUE(runner_->Signal(shim, SIGTERM).ok());
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kSignaled);
  EXPECT_EQ(outcome->code, SIGTERM);

  // Cleanup drops the limit file and the budget; the logs and the outcome stay.
  ASSERT_EQ(BudgetsOf(workload_).size(), 1u);
  runner_->Cleanup(JobDir(), workload_, {uuid_});
  EXPECT_TRUE(BudgetsOf(workload_).empty());
  EXPECT_EQ(runner_->MemoryInUse(workload_, uuid_), 0u);
  EXPECT_FALSE(Exists(JobDir() + "/limits"));
  EXPECT_TRUE(Exists(JobDir() + "/" + JobRunner::kStdout));
  EXPECT_TRUE(JobRunner::ReadOutcome(JobDir()));
  runner_->Cleanup(JobDir(), workload_, {uuid_});  // Twice is harmless.
}

TEST_F(JobRunnerTest, SeveralGpusAreVisibleInTheGivenOrderEachWithItsLimit) {
  std::string uuid1 = machine_.Uuid(1);
  LaunchSpec spec = Spec({"sh", "-c",
                          "echo \"cvd=$CUDA_VISIBLE_DEVICES\"; \"$PROBE\" uuid && "
                          "exec \"$PROBE\" info"});
  spec.gpus = {{uuid1, 3 * kGiB, 0}, {uuid_, 2 * kGiB, 0}};
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0") << Log(JobRunner::kStderr);
  RunResult r = Parsed(Log(JobRunner::kStdout));
  EXPECT_EQ(r.Get("cvd"), uuid1 + "," + uuid_);
  EXPECT_EQ(r.Get("uuid"), uuid1);
  EXPECT_EQ(r.GetInt("total"), static_cast<long long>(3 * kGiB));

  std::string text = ReadFile(JobDir() + "/limits");
  limiter::LimitConfig config;
  char err[256];
  ASSERT_TRUE(limiter::ParseLimitConfig(text.data(), text.size(), &config, err, sizeof(err)))
      << err;
  EXPECT_EQ(std::string(config.workload), workload_);
  ASSERT_EQ(config.gpu_count, 2);
  EXPECT_EQ(std::string(config.gpus[0].uuid), uuid1);
  EXPECT_EQ(config.gpus[0].limit_bytes, 3 * kGiB);
  EXPECT_EQ(std::string(config.gpus[1].uuid), uuid_);
  EXPECT_EQ(config.gpus[1].limit_bytes, 2 * kGiB);
  EXPECT_EQ(BudgetsOf(workload_).size(), 2u);
}

TEST_F(JobRunnerTest, ACommandThatIsNotFoundIsAnExecFailureWithItsErrno) {
  std::optional<Outcome> outcome = Run(Spec({"no-such-command-gpufrac"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kExecFailed);
  EXPECT_EQ(outcome->code, ENOENT);
  EXPECT_EQ(outcome->Describe(), "could not start the command: No such file or directory");
  EXPECT_NE(Log(JobRunner::kStderr).find("cannot run no-such-command-gpufrac"), std::string::npos)
      << Log(JobRunner::kStderr);
  EXPECT_FALSE(Exists(JobDir() + "/pid"));
}

TEST_F(JobRunnerTest, AMissingWorkingDirectoryIsAnExecFailure) {
  LaunchSpec spec = Spec({"true"});
  spec.cwd = base_ + "/missing";
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kExecFailed);
  EXPECT_EQ(outcome->code, ENOENT);
}

TEST_F(JobRunnerTest, TheCommandIsSearchedForInTheJobsPath) {
  std::string bin = base_ + "/bin";
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  std::ofstream(bin + "/gpufrac-test-hello") << "#!/bin/sh\necho hello from the PATH of the job\n";
  chmod((bin + "/gpufrac-test-hello").c_str(), 0755);
  LaunchSpec spec = Spec({"gpufrac-test-hello"});
  spec.env[0] = "PATH=" + bin + ":/usr/bin:/bin";
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0");
  EXPECT_EQ(Log(JobRunner::kStdout), "hello from the PATH of the job\n");
}

TEST_F(JobRunnerTest, AJobRunsAsItsUserAndCanUseItsLimitAndBudget) {
  if (geteuid() != 0) GTEST_SKIP() << "starting a job as another user needs root";
  std::string cwd = base_ + "/nobody";
  ASSERT_EQ(mkdir(cwd.c_str(), 0755), 0);
  LaunchSpec spec =
      Spec({"sh", "-c",
            "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G)\"; "
            "cat \"$GPUFRAC_LIMIT_FILE\" >/dev/null && echo read=yes; "
            "if (echo x >> \"$GPUFRAC_LIMIT_FILE\") 2>/dev/null; then echo write=yes; else echo "
            "write=no; fi; "
            "\"$PROBE\" info && exec \"$PROBE\" alloc mem 1073741824"});
  spec.uid = kNobody;
  spec.gid = kNobody;
  spec.cwd = cwd;
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0") << Log(JobRunner::kStderr);
  RunResult r = Parsed(Log(JobRunner::kStdout));
  EXPECT_EQ(r.Get("uid"), "65534");
  EXPECT_EQ(r.Get("gid"), "65534");
  EXPECT_EQ(r.Get("groups"), "65534");  // None of root's groups.
  EXPECT_EQ(r.Get("read"), "yes");
  EXPECT_EQ(r.Get("write"), "no");
  EXPECT_EQ(r.GetInt("total"), static_cast<long long>(2 * kGiB));
  EXPECT_EQ(r.GetInt("alloc"), 0) << Log(JobRunner::kStderr);
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm/" + BudgetsOf(workload_).at(0)).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  // The logs stay the service's.
  ASSERT_EQ(stat((JobDir() + "/" + JobRunner::kStdout).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(JobRunnerTest, AnotherUserRacingForTheBudgetNamesChangesNoJobsLimit) {
  if (geteuid() != 0) GTEST_SKIP() << "acting as another user needs root";
  // Another user creates, in a loop, everything it can under the names the next jobs' budgets
  // would have had in /dev/shm (budgets with a 70 GiB limit, directories), and tries to create
  // them in the runner's budget directory, while jobs start.
  constexpr int kJobs = 6;
  std::vector<std::string> names;
  for (int i = 0; i < kJobs; ++i) {
    char name[200];
    std::string workload = workload_ + "-" + std::to_string(i);
    ASSERT_TRUE(limiter::BudgetName(workload.c_str(), uuid_.c_str(), name, sizeof(name)));
    names.push_back(name);
  }
  const std::string budget_dir = budget_dir_;
  int stop[2];
  ASSERT_EQ(pipe(stop), 0);
  pid_t racer = fork();
  if (racer == 0) {
    close(stop[1]);
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
    fcntl(stop[0], F_SETFL, O_NONBLOCK);
    int planted = 0;
    for (char c; read(stop[0], &c, 1) != 0;) {
      for (size_t i = 0; i < names.size(); ++i) {
        limiter::Budget big;
        char err[400];
        if (i % 2 == 0 && big.Open(names[i].c_str(), 70 * kGiB, 0, err, sizeof(err))) {
          big.Close();
          ++planted;
        }
        if (i % 2 == 1 && mkdir(("/dev/shm" + names[i]).c_str(), 0777) == 0) ++planted;
        int fd = open((budget_dir + names[i]).c_str(), O_RDWR | O_CREAT | O_EXCL, 0666);
        if (fd >= 0) _exit(4);  // It must never get a name in there.
      }
    }
    _exit(planted > 0 ? 0 : 5);
  }
  close(stop[0]);
  for (int i = 0; i < kJobs; ++i) {
    LaunchSpec spec = Spec({"sh", "-c", "\"$PROBE\" info"});
    spec.workload = workload_ + "-" + std::to_string(i);
    spec.job_dir = base_ + "/job-" + std::to_string(i);
    spec.gpus = {{uuid_, (1 + i) * kGiB, 256 * kMiB}};
    std::optional<Outcome> outcome = Run(spec);
    ASSERT_TRUE(outcome);
    EXPECT_EQ(outcome->Describe(), "exit code 0") << ReadFile(spec.job_dir + "/stderr.log");
    // The job saw its own limit, and its budget holds it.
    RunResult r = Parsed(ReadFile(spec.job_dir + "/stdout.log"));
    EXPECT_EQ(r.GetInt("total"), static_cast<long long>((1 + i) * kGiB)) << i;
    limiter::Budget budget;
    char err[400];
    ASSERT_TRUE(budget.AttachIn(budget_dir_.c_str(), names[i].c_str() + 1, err, sizeof(err)))
        << err;
    EXPECT_EQ(budget.limit(), static_cast<uint64_t>((1 + i) * kGiB));
    budget.Close();
    runner_->Cleanup(spec.job_dir, spec.workload, {uuid_});
  }
  close(stop[1]);
  int status = 0;
  ASSERT_EQ(waitpid(racer, &status, 0), racer);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "racer status " << status << " (4: it created a name in the budget directory)";
  for (size_t i = 0; i < names.size(); ++i) {
    limiter::Budget::Unlink(names[i].c_str());
    rmdir(("/dev/shm" + names[i]).c_str());
  }
}

TEST_F(JobRunnerTest, ANonRootServiceRunsJobsAsItself) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user for the test";
  std::string home = base_ + "/service";
  ASSERT_EQ(mkdir(home.c_str(), 0755), 0);
  ASSERT_EQ(chown(home.c_str(), kNobody, kNobody), 0);
  std::string job_dir = home + "/job";
  pid_t service = fork();
  if (service == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(10);
    StatusOr<launch::BudgetDir> budgets = launch::BudgetDir::Make(0711);
    if (!budgets.ok()) _exit(15);
    const std::string budget_dir = budgets->path();
    JobRunner runner(Shim(), std::move(*budgets));
    LaunchSpec spec = Spec({"sh", "-c", "exit $(id -u | cut -c1-2)"});  // 65534 -> 65
    spec.job_dir = job_dir;
    spec.uid = spec.gid = 0;
    // Another user's job is refused, and leaves nothing behind.
    StatusOr<proc::ProcessId> refused = runner.Prepare(spec);
    if (refused.ok() || refused.status().code() != StatusCode::kPermissionDenied) _exit(11);
    if (Exists(job_dir)) _exit(12);
    spec.uid = spec.gid = kNobody;
    StatusOr<proc::ProcessId> shim = runner.Prepare(spec);
    if (!shim.ok() || !runner.Release(*shim).ok()) _exit(13);
    std::optional<Outcome> outcome = WaitOutcome(job_dir);
    runner.Cleanup(job_dir, workload_, {uuid_});
    std::filesystem::remove_all(budget_dir);
    if (!outcome || outcome->kind != Outcome::Kind::kExited) _exit(14);
    _exit(outcome->code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(service, &status, 0), service);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 65) << ReadFile(job_dir + "/stderr.log");
}

TEST_F(JobRunnerTest, AWriterThatEscapedTheJobDelaysItsOutcomeOnlyBriefly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user for the test";
  // A service not running as root makes no cgroup, so a process that left the job's session
  // outlives the job, holding its stdout open.
  std::string home = base_ + "/service";
  ASSERT_EQ(mkdir(home.c_str(), 0755), 0);
  ASSERT_EQ(chown(home.c_str(), kNobody, kNobody), 0);
  const std::string job_dir = home + "/job", pid_file = home + "/escaped.pid";
  pid_t service = fork();
  if (service == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(10);
    StatusOr<launch::BudgetDir> budgets = launch::BudgetDir::Make(0711);
    if (!budgets.ok()) _exit(11);
    const std::string budget_dir = budgets->path();
    JobRunner runner(Shim(), std::move(*budgets));
    LaunchSpec spec = Spec({"sh", "-c",
                            "setsid sh -c 'echo escaped; exec sleep 60' & echo $! > " + pid_file +
                                "; sleep 0.2; echo main"});
    spec.job_dir = job_dir;
    spec.uid = spec.gid = kNobody;
    spec.cwd = home;
    auto started = steady_clock::now();
    StatusOr<proc::ProcessId> shim = runner.Prepare(spec);
    if (!shim.ok() || !runner.Release(*shim).ok()) _exit(12);
    std::optional<Outcome> outcome = WaitOutcome(job_dir);
    auto took = steady_clock::now() - started;
    runner.Cleanup(job_dir, workload_, {uuid_});
    std::filesystem::remove_all(budget_dir);
    if (!outcome || outcome->Describe() != "exit code 0") _exit(13);
    _exit(took < 10s ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(waitpid(service, &status, 0), service);
  pid_t escaped = static_cast<pid_t>(std::atoi(ReadFile(pid_file).c_str()));
  // It did escape: still running after the job's end.
  EXPECT_FALSE(escaped <= 0 || Gone(escaped)) << "pid " << escaped;
  if (escaped > 0) kill(escaped, SIGKILL);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "13: not exit code 0; 14: the outcome waited for it";
  const std::string out = ReadFile(job_dir + "/" + JobRunner::kStdout);
  EXPECT_NE(out.find("escaped\n"), std::string::npos) << out;
  EXPECT_NE(out.find("main\n"), std::string::npos) << out;
}

TEST_F(JobRunnerTest, NothingTheJobStartedOutlivesItEvenOutsideItsSession) {
  if (!launch::WorkloadCgroup::Available()) GTEST_SKIP() << "needs root and a cgroup hierarchy";
  // A grandchild in a session of its own (what killing the job's process group misses).
  const std::string pid_file = base_ + "/daemon.pid";
  std::optional<Outcome> outcome = Run(
      Spec({"sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > " + pid_file}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0") << Log(JobRunner::kStderr);
  pid_t daemon = static_cast<pid_t>(std::atoi(ReadFile(pid_file).c_str()));
  ASSERT_GT(daemon, 0);
  // Gone by the time the outcome is written (it may linger as a zombie of init for a moment).
  EXPECT_TRUE(WaitFor([&] { return StatField(daemon, 3).empty() || StatField(daemon, 3) == "Z"; }))
      << "pid " << daemon << " is " << StatField(daemon, 3);
  runner_->Cleanup(JobDir(), workload_, {uuid_});
  EXPECT_FALSE(launch::WorkloadCgroup::Find(workload_).has_value());
}

TEST_F(JobRunnerTest, AJobCannotOpenTheDeviceNodesOfGpusItWasNotGiven) {
  if (!launch::WorkloadCgroup::Available()) GTEST_SKIP() << "needs root and a cgroup hierarchy";
  // Made here: no driver is behind them, so an allowed open fails with ENXIO, a denied one with
  // EPERM.
  const std::string other = base_ + "/nvidia9", own = base_ + "/nvidia0";
  ASSERT_EQ(mknod(other.c_str(), S_IFCHR | 0666, makedev(launch::kNvidiaMajor, 9)), 0);
  ASSERT_EQ(mknod(own.c_str(), S_IFCHR | 0666, makedev(launch::kNvidiaMajor, 0)), 0);
  LaunchSpec spec = Spec({"sh", "-c", "cat " + other + "; cat " + own + "; exit 0"});
  spec.denied_devices = {{launch::kNvidiaMajor, 9}};
  std::optional<Outcome> outcome = Run(spec);
  ASSERT_TRUE(outcome);
  const std::string err = Log(JobRunner::kStderr);
  EXPECT_NE(err.find(other + ": Operation not permitted"), std::string::npos) << err;
  EXPECT_NE(err.find(own + ": No such device or address"), std::string::npos) << err;
}

TEST_F(JobRunnerTest, CancelSendsSigtermToTheJob) {
  proc::ProcessId shim = Start(Spec(
      {"sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done"}));
  ASSERT_TRUE(WaitForOutput("ready"));
  ASSERT_TRUE(runner_->Signal(shim, SIGTERM).ok());
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 7");
  EXPECT_EQ(Log(JobRunner::kStdout), "ready\ngot-term\n");
}

TEST_F(JobRunnerTest, SigintAndSighupToTheShimAlsoCancelWithSigterm) {
  for (int sig : {SIGINT, SIGHUP}) {
    SCOPED_TRACE(sig);
    std::filesystem::remove_all(JobDir());
    proc::ProcessId shim =
        Start(Spec({"sh", "-c",
                    "trap 'exit 7' TERM; trap 'exit 8' INT HUP; echo ready; while :; do sleep "
                    "0.1; done"}));
    ASSERT_TRUE(WaitForOutput("ready"));
    ASSERT_TRUE(runner_->Signal(shim, sig).ok());
    std::optional<Outcome> outcome = WaitOutcome(JobDir());
    ASSERT_TRUE(outcome);
    EXPECT_EQ(outcome->Describe(), "exit code 7");
  }
}

TEST_F(JobRunnerTest, AJobThatIgnoresSigtermIsKilledAfterTheGrace) {
  proc::ProcessId shim =
      Start(Spec({"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"}));
  ASSERT_TRUE(WaitForOutput("ready"));
  auto cancelled = steady_clock::now();
  ASSERT_TRUE(runner_->Signal(shim, SIGTERM).ok());
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  auto took = steady_clock::now() - cancelled;
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "killed by signal 9 (Killed)");
  EXPECT_GE(took, 900ms);  // The grace is 1 s.
  EXPECT_LT(took, 10s);
}

TEST_F(JobRunnerTest, WhatTheJobLeftRunningIsKilledWhenItsMainProcessEnds) {
  std::optional<Outcome> outcome =
      Run(Spec({"sh", "-c", "sleep 1000 & echo $! > bg.pid; sleep 1000 & exit 4"}));
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 4");
  pid_t background = static_cast<pid_t>(std::atoi(ReadFile(base_ + "/bg.pid").c_str()));
  ASSERT_GT(background, 0);
  // Already gone when the outcome is written: nothing of the job outlives it.
  EXPECT_TRUE(Gone(background)) << StatField(background, 3);
}

TEST_F(JobRunnerTest, AnAbandonedJobNeverStarts) {
  std::string marker = base_ + "/marker";
  proc::ProcessId shim = Prepare(Spec({"touch", marker}));
  ASSERT_GT(shim.pid, 0);
  EXPECT_TRUE(proc::IsRunning(shim));
  runner_->Abandon(shim);
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kNotStarted);
  EXPECT_EQ(outcome->Describe(), "never started");
  EXPECT_FALSE(Exists(marker));
  EXPECT_FALSE(Exists(JobDir() + "/pid"));
  EXPECT_EQ(runner_->Release(shim).code(), StatusCode::kNotFound);
}

TEST_F(JobRunnerTest, DestroyingTheRunnerBeforeReleaseMeansTheJobNeverStarts) {
  std::string marker = base_ + "/marker";
  proc::ProcessId shim = Prepare(Spec({"touch", marker}));
  ASSERT_GT(shim.pid, 0);
  runner_.reset();
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kNotStarted);
  EXPECT_TRUE(WaitFor([&] { return !proc::IsRunning(shim); }));
  EXPECT_FALSE(Exists(marker));
}

TEST_F(JobRunnerTest, CancellingBeforeReleaseMeansNeverStartedAndReleaseThenFails) {
  std::string marker = base_ + "/marker";
  proc::ProcessId shim = Prepare(Spec({"touch", marker}));
  ASSERT_TRUE(runner_->Signal(shim, SIGTERM).ok());
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->kind, Outcome::Kind::kNotStarted);
  ASSERT_TRUE(WaitFor([&] { return !proc::IsRunning(shim); }));
  // The go-ahead now meets a closed pipe: an error, not a SIGPIPE that would end the service.
  EXPECT_EQ(runner_->Release(shim).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(Exists(marker));
  EXPECT_EQ(runner_->Signal(shim, SIGTERM).code(), StatusCode::kNotFound);
  runner_->ReapChildren();
  EXPECT_TRUE(StatField(shim.pid, 3).empty());
}

TEST_F(JobRunnerTest, ReleaseOfAnUnknownShimIsNotFound) {
  EXPECT_EQ(runner_->Release(proc::ProcessId{getpid(), 1}).code(), StatusCode::kNotFound);
  runner_->Abandon(proc::ProcessId{getpid(), 1});  // Nothing to give up: no effect.
}

TEST_F(JobRunnerTest, TheJobOutlivesAKilledServiceAndItsOutcomeIsRecorded) {
  std::string marker = base_ + "/marker";
  LaunchSpec spec = Spec({"sh", "-c", "sleep 1; echo done > \"$0\"; exit 5", marker});
  int report[2], hold[2];
  ASSERT_EQ(pipe(report), 0);
  ASSERT_EQ(pipe(hold), 0);
  pid_t service = fork();
  if (service == 0) {
    // A service: prepares and releases the job, says which shim runs it, and is then killed.
    close(report[0]);
    close(hold[1]);
    JobRunner runner = NewRunner();
    StatusOr<proc::ProcessId> shim = runner.Prepare(spec);
    proc::ProcessId ref;
    if (shim.ok() && runner.Release(*shim).ok()) ref = *shim;
    (void)!write(report[1], &ref, sizeof(ref));
    char c;
    (void)!read(hold[0], &c, 1);
    _exit(0);
  }
  close(report[1]);
  close(hold[0]);
  proc::ProcessId shim;
  ASSERT_EQ(read(report[0], &shim, sizeof(shim)), static_cast<ssize_t>(sizeof(shim)));
  close(report[0]);
  kill(service, SIGKILL);
  ASSERT_EQ(waitpid(service, nullptr, 0), service);
  close(hold[1]);
  ASSERT_GT(shim.pid, 0);

  // Another service sees the job still running, then its outcome.
  EXPECT_TRUE(proc::IsRunning(shim));
  EXPECT_FALSE(JobRunner::ReadOutcome(JobDir()));
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 5");
  EXPECT_EQ(ReadFile(marker), "done\n");
  EXPECT_TRUE(WaitFor([&] { return !proc::IsRunning(shim); }));
}

TEST_F(JobRunnerTest, NoFileOfTheServiceLeaksIntoTheShimOrTheJob) {
  std::string secret = base_ + "/service-secret";
  int fd = open(secret.c_str(), O_WRONLY | O_CREAT, 0600);  // Deliberately not close-on-exec.
  ASSERT_GE(fd, 0);
  proc::ProcessId shim = Prepare(Spec({"sh", "-c", "ls -l /proc/$$/fd/"}));
  ASSERT_GT(shim.pid, 0);
  std::string fd_dir = "/proc/" + std::to_string(shim.pid) + "/fd";
  std::set<std::string> shim_files;
  ASSERT_TRUE(WaitFor([&] {
    // Wait for the exec: until then the child still has the service's files.
    return ReadFile("/proc/" + std::to_string(shim.pid) + "/comm") == "gpufrac-shim\n";
  }));
  for (const auto& entry : std::filesystem::directory_iterator(fd_dir)) {
    std::error_code ec;
    shim_files.insert(std::filesystem::read_symlink(entry.path(), ec).string());
  }
  EXPECT_EQ(shim_files.count(secret), 0u);
  EXPECT_TRUE(runner_->Release(shim).ok());
  std::optional<Outcome> outcome = WaitOutcome(JobDir());
  close(fd);
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->Describe(), "exit code 0");
  EXPECT_EQ(Log(JobRunner::kStdout).find("service-secret"), std::string::npos)
      << Log(JobRunner::kStdout);
  // Nor its logs: the job writes into pipes (so it cannot write past the logs' cap).
  EXPECT_EQ(Log(JobRunner::kStdout).find(".log"), std::string::npos) << Log(JobRunner::kStdout);
  EXPECT_NE(Log(JobRunner::kStdout).find("1 -> pipe:"), std::string::npos)
      << Log(JobRunner::kStdout);
}

TEST_F(JobRunnerTest, AFailedPrepareLeavesNothingBehind) {
  std::set<pid_t> children = ChildrenOfThisProcess();

  // The job directory exists already: it is left exactly as it was.
  ASSERT_EQ(mkdir(JobDir().c_str(), 0700), 0);
  std::ofstream(JobDir() + "/keep") << "keep";
  StatusOr<proc::ProcessId> shim = runner_->Prepare(Spec({"true"}));
  EXPECT_FALSE(shim.ok());
  EXPECT_NE(shim.status().message().find("File exists"), std::string::npos) << shim.status();
  EXPECT_EQ(ReadFile(JobDir() + "/keep"), "keep");
  EXPECT_FALSE(Exists(JobDir() + "/limits"));
  EXPECT_TRUE(BudgetsOf(workload_).empty());
  std::filesystem::remove_all(JobDir());

  // Its parent is not a directory.
  std::ofstream(base_ + "/file") << "x";
  LaunchSpec spec = Spec({"true"});
  spec.job_dir = base_ + "/file/job";
  shim = runner_->Prepare(spec);
  // ENOTDIR: what is on disk is in the way (common/posix.h's rule), not worth retrying as is.
  EXPECT_EQ(shim.status().code(), StatusCode::kFailedPrecondition) << shim.status();
  EXPECT_TRUE(BudgetsOf(workload_).empty());

  // The shim cannot be run: by then the directory and the budgets were made, and are undone.
  JobRunner broken = NewRunner("/nonexistent/gpufrac-shim");
  spec = Spec({"true"});
  spec.gpus.push_back({machine_.Uuid(1), kGiB, 0});
  shim = broken.Prepare(spec);
  EXPECT_EQ(shim.status().code(), StatusCode::kNotFound) << shim.status();  // ENOENT
  EXPECT_NE(shim.status().message().find("cannot run the job supervisor"), std::string::npos)
      << shim.status();
  EXPECT_FALSE(Exists(JobDir()));
  EXPECT_TRUE(BudgetsOf(workload_).empty());

  // Bad input is refused before anything is made.
  std::vector<std::function<void(LaunchSpec&)>> bad = {
      [](LaunchSpec& s) { s.workload = "no/slash"; },
      [](LaunchSpec& s) { s.workload = std::string(64, 'w'); },
      [](LaunchSpec& s) { s.command.clear(); },
      [](LaunchSpec& s) { s.cwd = "relative"; },
      [](LaunchSpec& s) { s.job_dir = "relative/job"; },
      [](LaunchSpec& s) { s.gpus.clear(); },
      [](LaunchSpec& s) { s.gpus[0].uuid = "GPU-not-a-uuid"; },
      [](LaunchSpec& s) { s.gpus[0].uuid = "../GPU-00000000-0000-0000-0000-000000000000"; },
      [](LaunchSpec& s) { s.gpus.push_back(s.gpus[0]); },
      [](LaunchSpec& s) { s.gpus[0].limit_bytes = 0; },
      [](LaunchSpec& s) { s.env.push_back("NOEQUALS"); },
      [](LaunchSpec& s) { s.limiter_path = "libgpufrac.so"; },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(i);
    spec = Spec({"true"});
    bad[i](spec);
    shim = runner_->Prepare(spec);
    EXPECT_EQ(shim.status().code(), StatusCode::kInvalidArgument) << shim.status();
    EXPECT_FALSE(Exists(JobDir()));
    EXPECT_TRUE(BudgetsOf(workload_).empty());
  }
  // No process was left running or unreaped.
  EXPECT_EQ(ChildrenOfThisProcess(), children);
}

TEST(JobRunnerOutcomeTest, ReadsOnlyWholeOutcomes) {
  char tmpl[] = "/tmp/gpufrac-outcome-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto read_back = [&](const std::string& text) {
    std::ofstream(dir + "/outcome") << text;
    return JobRunner::ReadOutcome(dir);
  };
  EXPECT_FALSE(JobRunner::ReadOutcome(dir));  // None yet.
  EXPECT_FALSE(read_back(""));
  EXPECT_FALSE(read_back("exited 3"));  // Not a whole line.
  EXPECT_FALSE(read_back("exited\n"));
  EXPECT_FALSE(read_back("exited -1\n"));
  EXPECT_FALSE(read_back("exited 3 4\n"));
  EXPECT_FALSE(read_back("finished 3\n"));
  EXPECT_FALSE(read_back("not-started 1\n"));
  std::optional<Outcome> o = read_back("exited 3\n");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, Outcome::Kind::kExited);
  EXPECT_EQ(o->code, 3);
  o = read_back("signaled 15\n");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->Describe(), "killed by signal 15 (Terminated)");
  o = read_back("not-started\n");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->Describe(), "never started");
  o = read_back("exec-failed 13\n");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->Describe(), "could not start the command: Permission denied");
  std::filesystem::remove_all(dir);
}

TEST(JobRunnerProcessTest, ReapsChildrenThatHaveExited) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(StatField(child, 3), "Z");
  // The runner reaps it (any child of the service is a shim).
  StatusOr<launch::BudgetDir> budgets = launch::BudgetDir::Make(0700);
  ASSERT_TRUE(budgets.ok()) << budgets.status();
  const std::string budget_dir = budgets->path();
  JobRunner runner(Shim(), std::move(*budgets));
  runner.ReapChildren();
  std::filesystem::remove_all(budget_dir);
  EXPECT_TRUE(StatField(child, 3).empty());
}

}  // namespace
}  // namespace gpufrac::node
