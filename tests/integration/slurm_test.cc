// gpufrac on a real Slurm: Debian's munged, slurmctld and slurmd on loopback in a temporary
// directory (tests/slurm/cluster.sh), two simulated A100-40GB GPUs declared in gres.conf with 8
// shards each, gpufrac's SPANK plugin in plugstack.conf and its job-submit rule as job_submit.lua.
// Jobs run as `nobody` and their CUDA programs (cuda_probe) on the simulated GPUs. SlurmMpsTest
// runs a second such cluster whose GPUs declare Slurm's `mps` GRES (100 each) instead of shards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int kCudaErrorOutOfMemory = 2;

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together.
};

Result Shell(const std::string& command) {
  Result r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return done();
}

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartCluster("shard", 8); }

  // A cluster whose two GPUs are shared through Slurm's `sharing` GRES, `units` of it each.
  static void StartCluster(const std::string& sharing, int units) {
    if (geteuid() != 0) {
      skip_reason_ = "needs root: slurmd runs jobs as their users";
      return;
    }
    // Not under /tmp: the state directory's path must be writable by root only.
    char tmpl[] = "/run/gpufrac-slurm-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    chmod(dir_.c_str(), 0755);
    // Copies of what the jobs run, where `nobody` can read them whatever the checkout's modes.
    const std::string build = GPUFRAC_BUILD_DIR;
    fs::create_directories(dir_ + "/bin");
    fs::copy(build + "/bin/cuda_probe", dir_ + "/bin/cuda_probe");
    fs::copy(build + "/lib/libgpufrac.so", dir_ + "/bin/libgpufrac.so");
    fs::copy(GPUFRAC_SIMGPU_DIR, dir_ + "/simgpu", fs::copy_options::recursive);
    fs::create_directories(dir_ + "/out");
    chmod((dir_ + "/out").c_str(), 01777);
    Result started =
        Shell("GPUFRAC_SLURM_SHARING=" + sharing + " " + std::string(GPUFRAC_SOURCE_DIR) +
              "/tests/slurm/cluster.sh start " + dir_ + " 2 " + std::to_string(units) + " " +
              build + "/lib/libgpufrac_spank.so " + dir_ + "/bin/libgpufrac.so " + dir_ +
              "/simgpu " + GPUFRAC_SOURCE_DIR + "/src/slurm/job_submit.lua");
    ASSERT_EQ(started.code, 0) << started.out << Logs();
    started_ = true;
  }

  static void TearDownTestSuite() {
    if (dir_.empty()) return;
    Shell(std::string(GPUFRAC_SOURCE_DIR) + "/tests/slurm/cluster.sh stop " + dir_);
    std::error_code ec;
    std::ifstream record(dir_ + "/gpufrac/budget-dir");
    std::string budgets;
    if (std::getline(record, budgets) && budgets.rfind("/dev/shm/gpufrac-", 0) == 0) {
      // The jobs' budget tmpfs the tests left, then the directory's own.
      for (const auto& entry : fs::directory_iterator(budgets, ec)) {
        if (entry.path().filename().string().rfind("job-", 0) == 0) {
          umount2(entry.path().c_str(), MNT_DETACH);
        }
      }
      umount2(budgets.c_str(), MNT_DETACH);
      fs::remove_all(budgets, ec);
    }
    // The simulated machine's shared memory, one per user that ran it.
    std::ifstream env(dir_ + "/env");
    std::string line;
    while (std::getline(env, line)) {
      const std::string key = "export SIMGPU_NAMESPACE=";
      if (line.rfind(key, 0) != 0) continue;
      const std::string ns = line.substr(key.size());
      for (const auto& entry : fs::directory_iterator("/dev/shm", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("simgpu.", 0) == 0 && name.size() > ns.size() &&
            name.compare(name.size() - ns.size(), ns.size(), ns) == 0) {
          fs::remove(entry.path(), ec);
        }
      }
    }
    fs::remove_all(dir_, ec);
    dir_.clear();
    started_ = false;
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(started_) << "the cluster did not start";
  }

  static std::string Logs() {
    return "\n--- slurmctld.log (tail) ---\n" +
           Shell("tail -n 30 " + dir_ + "/log/slurmctld.log").out +
           "\n--- slurmd.log (tail) ---\n" + Shell("tail -n 40 " + dir_ + "/log/slurmd.log").out;
  }

  // Runs `script` (bash) as `nobody` with the cluster's client environment; $P is cuda_probe.
  static Result AsUser(const std::string& script) {
    static int counter = 0;
    const std::string path = dir_ + "/out/script-" + std::to_string(++counter) + ".sh";
    const std::string text = "#!/bin/bash\n. " + dir_ + "/env\ncd " + dir_ + "/out\nP=" + dir_ +
                             "/bin/cuda_probe\nexport P\n" + script + "\n";
    // Close-on-exec: a command another thread starts meanwhile (a watcher's squeue) must not
    // inherit the script open for writing, or its exec fails with "Text file busy".
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    EXPECT_GE(fd, 0) << path;
    fchmod(fd, 0755);
    EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    return Shell("timeout 60 runuser -u nobody -- " + path);
  }

  static Result AsRoot(const std::string& command) {
    return Shell(". " + dir_ + "/env; " + command);
  }

  // The job ids whose gpufrac state is on the node now (state_dir/job-<id>).
  static std::vector<std::string> JobsWithState() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_ + "/gpufrac", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("job-", 0) == 0) out.push_back(name.substr(4));
    }
    return out;
  }

  static std::string BudgetDir() {
    std::ifstream record(dir_ + "/gpufrac/budget-dir");
    std::string path;
    std::getline(record, path);
    return path;
  }

  // Budgets of job `job` in the plugin's budget directory (in the job's own directory there,
  // job-<id>), and those directories; of any job when `job` is "".
  static int BudgetsOf(const std::string& job) {
    const std::string prefix = job.empty() ? "gpufrac.slurm-" : "gpufrac.slurm-" + job + ".";
    const std::string dir = job.empty() ? "job-" : "job-" + job;
    int n = 0;
    std::error_code ec;
    // Without exceptions: the plugin may remove what is being listed.
    for (auto it = fs::recursive_directory_iterator(BudgetDir(), ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const fs::directory_entry& entry = *it;
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0) ++n;
      if (entry.path().parent_path() == BudgetDir() &&
          (job.empty() ? name.rfind(dir, 0) == 0 : name == dir)) {
        ++n;
      }
    }
    return n;
  }

  // Whether shards (or MPS units, on SlurmMpsTest's cluster) are in use on the node: Slurm 22.05
  // shows "GresUsed=gpu:0,shard:(null):0(IDX:N/A)" when none is (the number is not the count of
  // shards in use, but 0 only when none is).
  static int ShardsInUse() {
    std::string out = AsRoot("scontrol show node -d").out;
    std::smatch m;
    if (!std::regex_search(out, m, std::regex(R"(GresUsed=\S*(?:shard|mps):(?:[^:,]*:)?(\d+))"))) {
      return -1;
    }
    return std::stoi(m[1]);
  }

  static bool NoJobsLeft() { return AsRoot("squeue -h").out.empty(); }

  // After a step ended however it ended: nothing of gpufrac's is left and the shards are free.
  static void ExpectAllReleased(const std::string& job) {
    EXPECT_TRUE(WaitFor([&] { return JobsWithState().empty() && BudgetsOf(job) == 0; }, 15s))
        << "state of jobs left: " << JobsWithState().size() << ", budgets of job " << job << ": "
        << BudgetsOf(job) << Logs();
    EXPECT_TRUE(WaitFor([] { return NoJobsLeft() && ShardsInUse() == 0; }, 20s))
        << "squeue: " << AsRoot("squeue").out << " shards in use: " << ShardsInUse();
  }

  // Starts `script` as nobody in the background; waits until its step's limit file exists and
  // returns the job id ("" if it never appeared).
  static std::string StartHeldStep(const std::string& script, std::thread* runner, Result* result) {
    *runner = std::thread([script, result] { *result = AsUser(script); });
    std::string job;
    WaitFor(
        [&] {
          auto jobs = JobsWithState();
          if (jobs.size() != 1) return false;
          job = jobs[0];
          return fs::exists(dir_ + "/gpufrac/job-" + job + "/limits");
        },
        30s);
    return job;
  }

  static std::string dir_;
  static std::string skip_reason_;
  static bool started_;
};

std::string SlurmTest::dir_;
std::string SlurmTest::skip_reason_;
bool SlurmTest::started_ = false;

std::string Value(const std::string& text, const std::string& key, size_t nth = 0) {
  std::regex re("(?:^|\\s)" + key + "=(\\S*)");
  auto it = std::sregex_iterator(text.begin(), text.end(), re);
  for (size_t i = 0; it != std::sregex_iterator(); ++it, ++i) {
    if (i == nth) return (*it)[1];
  }
  return "";
}

TEST_F(SlurmTest, TwoMemoryJobsShareOneGpuAndEachSeesItsLimit) {
  // Each job: the GPU it got, the memory its CUDA program sees, an allocation past its limit,
  // and then 9 GiB held for a while, so that both hold their memory on the GPU at once.
  const std::string step = "$P uuid; $P info; $P alloc mem " + std::to_string(11 * kGiB) +
                           "; $P work " + std::to_string(9 * kGiB) + " 4";
  std::thread watcher;
  int most_running = 0;
  std::atomic<bool> done{false};
  watcher = std::thread([&] {
    while (!done) {
      std::string out = AsRoot("squeue -h -t R -o %i").out;
      most_running = std::max(most_running, Count(out, "\n"));
      std::this_thread::sleep_for(200ms);
    }
  });
  Result r = AsUser("srun --gpu-memory 10G bash -c '" + step + "' > a.out 2>&1 &\n" +
                    "srun --gpu-memory 10G bash -c '" + step + "' > b.out 2>&1 &\nwait");
  done = true;
  watcher.join();
  ASSERT_EQ(r.code, 0) << r.out;
  std::string a, b;
  std::getline(std::ifstream(dir_ + "/out/a.out"), a, '\0');
  std::getline(std::ifstream(dir_ + "/out/b.out"), b, '\0');
  for (const std::string& out : {a, b}) {
    EXPECT_EQ(Value(out, "total"), std::to_string(10 * kGiB)) << out;
    EXPECT_EQ(Value(out, "alloc"), std::to_string(kCudaErrorOutOfMemory)) << out;
    EXPECT_EQ(Value(out, "work"), "0") << out;
    EXPECT_NE(Value(out, "uuid"), "") << out;
  }
  EXPECT_EQ(Value(a, "uuid"), Value(b, "uuid")) << "the jobs were placed on different GPUs";
  EXPECT_EQ(most_running, 2) << "the two jobs never ran at the same time";
  ExpectAllReleased("");
}

TEST_F(SlurmTest, ARequestNoGpuHoldsIsRefusedAtSubmitWithTheReason) {
  Result r = AsUser("srun --gpu-memory 50G true");
  EXPECT_NE(r.code, 0);
  // The model's memory as NVML reports it (the rule's table), not its marketing size.
  EXPECT_NE(r.out.find("gpufrac: --gpu-memory 50G is more than any GPU here has: the largest "
                       "GPU here (A100-40GB) has 40.0 GiB"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("queued"), std::string::npos) << "it was queued: " << r.out;
}

// What every step would refuse is refused at submission (issue 29: such jobs were booked and each
// step then failed): a request smaller than the limiter's charge for a CUDA context, and a
// --gpu-compute above the share of the GPU its memory books (which the steps ran cut to that
// share, unseen). Within a job, a step asking such a compute share is refused with the reason.
TEST_F(SlurmTest, WhatEveryStepWouldRefuseIsRefusedAtSubmit) {
  Result tiny = AsUser("srun --gpu-memory 300M true");
  EXPECT_NE(tiny.code, 0);
  EXPECT_NE(tiny.out.find("gpufrac: --gpu-memory 300M cannot hold even a CUDA context (about "
                          "656 MiB on an A100-40GB): ask for more"),
            std::string::npos)
      << tiny.out;
  Result compute = AsUser("srun --gpu-memory 5G --gpu-compute 0.5 true");
  EXPECT_NE(compute.code, 0);
  EXPECT_NE(compute.out.find("gpufrac: --gpu-compute 0.5 is more than the share of the GPU that "
                             "--gpu-memory 5G books on an A100-40GB, 0.125: ask for at most "
                             "0.125, or for more memory"),
            std::string::npos)
      << compute.out;
  for (const Result& r : {tiny, compute}) {
    EXPECT_EQ(r.out.find("queued"), std::string::npos) << "it was queued: " << r.out;
  }
  Result step = AsUser(
      "sbatch --gres=shard:2 --wait -o step.out --wrap 'srun --gpu-memory 10G --gpu-compute 0.5 "
      "$P info'; cat step.out");
  EXPECT_NE(step.out.find("gpufrac: --gpu-compute 0.5 is more than the share of GPU "),
            std::string::npos)
      << step.out;
  EXPECT_NE(step.out.find("ask for at most 0.25"), std::string::npos) << step.out;
  EXPECT_EQ(Value(step.out, "total"), "") << step.out;
  ExpectAllReleased("");
}

TEST_F(SlurmTest, ABadOptionGetsOneLineAndNoJob) {
  Result r = AsUser("srun --gpu-memory lots true");
  EXPECT_NE(r.code, 0);
  // One line of gpufrac's, saying what is wrong (srun adds its own "Invalid ... argument").
  EXPECT_EQ(Count(r.out, "gpufrac: --gpu-memory: size \"lots\" is not a number"), 1) << r.out;
  EXPECT_EQ(Count(r.out, "gpufrac:"), 1) << r.out;
  EXPECT_EQ(r.out.find("queued"), std::string::npos) << r.out;
  // Both shares: the plugin's own words, naming its options only (not the CLI's --gpus or
  // --mig-profile).
  Result both = AsUser("srun --gpu-memory 1G --gpu-fraction 0.1 true");
  EXPECT_NE(both.code, 0);
  EXPECT_EQ(Count(both.out,
                  "gpufrac: give one of --gpu-memory SIZE and --gpu-fraction F, not "
                  "both"),
            1)
      << both.out;
  EXPECT_EQ(both.out.find("--gpus"), std::string::npos) << both.out;
  EXPECT_EQ(both.out.find("--mig-profile"), std::string::npos) << both.out;
  EXPECT_EQ(both.out.find("queued"), std::string::npos) << both.out;
}

TEST_F(SlurmTest, TheTasksOfAStepShareOneBudget) {
  // Two tasks each holding 6 GiB for a while: together past the step's 10 GiB, so exactly one
  // of them is refused.
  Result r = AsUser("srun -n2 --gpu-memory 10G $P work " + std::to_string(6 * kGiB) + " 3");
  EXPECT_EQ(Count(r.out, "work=0 "), 1) << r.out;
  EXPECT_EQ(Count(r.out, "work=" + std::to_string(kCudaErrorOutOfMemory) + " "), 1) << r.out;
  EXPECT_NE(r.out.find("workload slurm-"), std::string::npos) << r.out;
}

TEST_F(SlurmTest, TheStepsOfAJobShareOneBudget) {
  const std::string work = "$P work " + std::to_string(6 * kGiB) + " 3";
  // Two steps at once, each with one of the job's two shards, without gpufrac's options: they
  // join the job's budget, which its batch step holds to the job's two shards (10 GiB), and both
  // take 6 GiB of it.
  Result r = AsUser(
      "cat > steps.sh <<EOS\n#!/bin/bash\n"
      "srun -n1 --exact --gres=shard:1 " +
      work +
      " &\n"
      "srun -n1 --exact --gres=shard:1 " +
      work +
      " &\nwait\nEOS\n"
      "sbatch -n2 --gres=shard:2 --wait -o steps.out steps.sh; cat steps.out");
  EXPECT_EQ(Count(r.out, "work=0 "), 1) << r.out;
  EXPECT_EQ(Count(r.out, "work=" + std::to_string(kCudaErrorOutOfMemory) + " "), 1) << r.out;
}

// The batch step's GPUs are the job's, as Slurm sets them, whatever the user's environment says:
// a SLURM_STEP_GPUS exported before sbatch (here naming a GPU the node lacks) is not read.
TEST_F(SlurmTest, TheBatchStepsGpusAreSlurmsNotTheUsersEnvironments) {
  Result r = AsUser(
      "SLURM_STEP_GPUS=7 sbatch --gpu-memory 10G --wait -o batch.out --wrap '$P info'; "
      "cat batch.out");
  EXPECT_EQ(Value(r.out, "total"), std::to_string(10 * kGiB)) << r.out;
  EXPECT_EQ(r.out.find("GPU 7"), std::string::npos) << r.out;
}

TEST_F(SlurmTest, ScancelledStepLeavesNothing) {
  std::thread runner;
  Result result;
  const std::string job =
      StartHeldStep("srun --gpu-memory 10G $P hold " + std::to_string(5 * kGiB), &runner, &result);
  ASSERT_FALSE(job.empty()) << Logs();
  // While it runs: a limit file only root can change (0440: the group bits are its ACL's mask,
  // the job's user's read), and one budget on its GPU, in the job's budget directory.
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/gpufrac/job-" + job + "/limits").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0440u);
  EXPECT_TRUE(WaitFor([&] { return BudgetsOf(job) == 2; }, 5s)) << BudgetsOf(job);
  // The job-submit rule booked 10 GiB of an A100-40GB with 8 shards: 2 shards of one GPU.
  EXPECT_NE(AsRoot("scontrol show job -d " + job).out.find("GRES=shard:2(IDX:"), std::string::npos)
      << AsRoot("scontrol show job -d " + job).out;
  EXPECT_GT(ShardsInUse(), 0);
  EXPECT_EQ(AsRoot("scancel " + job).code, 0);
  runner.join();
  EXPECT_NE(result.code, 0) << result.out;
  ExpectAllReleased(job);
}

TEST_F(SlurmTest, SigkilledTaskLeavesNothing) {
  std::thread runner;
  Result result;
  const std::string job =
      StartHeldStep("srun --gpu-memory 10G $P hold " + std::to_string(5 * kGiB), &runner, &result);
  ASSERT_FALSE(job.empty()) << Logs();
  // The step's task, as Slurm lists the job's processes (only this job's: other tests on the
  // machine may run cuda_probe too).
  pid_t task = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        std::istringstream lines(AsRoot("scontrol listpids " + job).out);
        for (std::string line; std::getline(lines, line);) {
          pid_t pid = 0;
          if (std::sscanf(line.c_str(), "%d", &pid) != 1 || pid <= 0) continue;
          std::string comm;
          std::getline(std::ifstream("/proc/" + std::to_string(pid) + "/comm"), comm);
          if (comm == "cuda_probe") task = pid;
        }
        return task > 0;
      },
      10s))
      << AsRoot("scontrol listpids " + job).out;
  ASSERT_EQ(kill(task, SIGKILL), 0);
  runner.join();
  EXPECT_NE(result.code, 0) << result.out;
  ExpectAllReleased(job);
}

// Whether process `pid` runs (a zombie holds no GPU memory).
bool Runs(pid_t pid) {
  std::string stat;
  std::getline(std::ifstream("/proc/" + std::to_string(pid) + "/stat"), stat);
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// A slurmstepd that dies (killed, out of memory) ends no step, and its task keeps running, holding
// its GPU memory (issue 29: gpufrac's files and the job's shards were freed while it ran). A
// later step's sweep keeps that job's share while the task runs; the job's epilog (here after
// scancel) ends the task, and only then frees the share. Before, the task outlived it all. (The
// epilog reads plugstack.conf's state_dir itself: slurmstepd's epilog calls no init, and an
// attacker's review found it looked in the default directory.)
TEST_F(SlurmTest, AKilledSlurmstepdsTaskIsGoneBeforeItsShareIsFreed) {
  if (!fs::exists(dir_ + "/cgroup.conf")) {
    GTEST_SKIP() << "no cgroup v1 devices controller on this host: the tasks are in no cgroup";
  }
  std::thread runner;
  Result result;
  const std::string job =
      StartHeldStep("srun --gpu-memory 10G $P hold " + std::to_string(5 * kGiB), &runner, &result);
  ASSERT_FALSE(job.empty()) << Logs();
  const std::string title = "slurmstepd: [" + job + ".0]";
  pid_t stepd = 0, task = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& entry : fs::directory_iterator("/proc")) {
          std::string cmdline, comm, cgroups;
          std::getline(std::ifstream(entry.path() / "cmdline"), cmdline, '\0');
          std::getline(std::ifstream(entry.path() / "comm"), comm);
          std::getline(std::ifstream(entry.path() / "cgroup"), cgroups, '\0');
          const pid_t pid = std::atoi(entry.path().filename().c_str());
          if (cmdline.rfind(title, 0) == 0) stepd = pid;
          // This job's task (other tests on the machine may run cuda_probe too).
          if (comm == "cuda_probe" && cgroups.find("/job_" + job + "/") != std::string::npos) {
            task = pid;
          }
        }
        return stepd > 0 && task > 0;
      },
      10s))
      << "no process titled " << title << " or task of job " << job;
  // From here on, the job's budgets must not be gone while its task runs.
  std::atomic<bool> watching{true}, freed_under_task{false};
  std::thread watcher([&] {
    while (watching) {
      if (BudgetsOf(job) == 0 && Runs(task)) freed_under_task = true;
      std::this_thread::sleep_for(10ms);
    }
  });
  ASSERT_EQ(kill(stepd, SIGKILL), 0);
  // Another job's step sweeps the dead slurmstepd's records, and keeps its job's share.
  Result other = AsUser("srun --gpu-memory 5G true");
  EXPECT_EQ(other.code, 0) << other.out;
  EXPECT_TRUE(Runs(task));
  EXPECT_GT(BudgetsOf(job), 0);
  EXPECT_EQ(AsRoot("scancel " + job).code, 0);
  runner.join();
  ExpectAllReleased(job);
  EXPECT_FALSE(Runs(task)) << "the task of job " << job << " outlived its job";
  watching = false;
  watcher.join();
  EXPECT_FALSE(freed_under_task) << "job " << job << "'s budget was freed while its task ran";
  if (Runs(task)) kill(task, SIGKILL);
}

// A job on neither shards nor gpufrac's options (a CPU job here, even one that kept the
// SLURM_SHARDS_ON_NODE of the shard job it was submitted from) runs as Slurm runs it.
TEST_F(SlurmTest, AJobWithoutGpufracOptionsOrSharesIsUnaffected) {
  Result r = AsUser(
      "SLURM_SHARDS_ON_NODE=2 srun bash -c 'echo preload=$LD_PRELOAD "
      "limitfile=$GPUFRAC_LIMIT_FILE'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(Value(r.out, "preload"), "") << r.out;
  EXPECT_EQ(Value(r.out, "limitfile"), "") << r.out;
  EXPECT_TRUE(JobsWithState().empty());
}

// A plain --gres=shard:2 job, without gpufrac's options, is held to the memory its shards stand
// for (2 of 5 GiB), in its srun steps and in its batch step (issue 29: it saw the whole GPU and
// allocated 11 GiB on one shard). More shards than one GPU has are refused at submission.
TEST_F(SlurmTest, APlainShardJobIsHeldToItsShards) {
  const std::string probe = "$P info; $P alloc mem " + std::to_string(11 * kGiB) +
                            "; $P alloc mem " + std::to_string(9 * kGiB);
  Result r = AsUser("srun --gres=shard:2 bash -c 'echo preload=$LD_PRELOAD; " + probe + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(Value(r.out, "preload"), dir_ + "/bin/libgpufrac.so") << r.out;
  EXPECT_EQ(Value(r.out, "total"), std::to_string(10 * kGiB)) << r.out;
  EXPECT_EQ(Value(r.out, "alloc", 0), std::to_string(kCudaErrorOutOfMemory)) << r.out;
  EXPECT_EQ(Value(r.out, "alloc", 1), "0") << r.out;
  Result batch = AsUser("sbatch --gres=shard:1 --wait -o plain.out --wrap '$P info; $P alloc mem " +
                        std::to_string(6 * kGiB) + "'; cat plain.out");
  EXPECT_EQ(Value(batch.out, "total"), std::to_string(5 * kGiB)) << batch.out;
  EXPECT_EQ(Value(batch.out, "alloc"), std::to_string(kCudaErrorOutOfMemory)) << batch.out;
  Result spread = AsUser("srun --gres=shard:9 true");
  EXPECT_NE(spread.code, 0);
  EXPECT_NE(spread.out.find("gpufrac: --gres=shard:9 is more than the 8 shards of a GPU here"),
            std::string::npos)
      << spread.out;
  ExpectAllReleased("");
}

// Without shard_memory= in plugstack.conf the plugin cannot say what a shard holds: a shard step
// is refused with the reason rather than run without a limit.
TEST_F(SlurmTest, AShardStepWithoutShardMemoryIsRefused) {
  const std::string plugstack = dir_ + "/plugstack.conf";
  std::string saved;
  std::getline(std::ifstream(plugstack), saved, '\0');
  std::ofstream(plugstack) << std::regex_replace(saved, std::regex(" shard_memory=\\S+"), "");
  Result r = AsUser("srun --gres=shard:1 $P info");
  std::ofstream(plugstack) << saved;
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("gpufrac: the step holds shards, but plugstack.conf gives "
                       "libgpufrac_spank.so no shard_memory="),
            std::string::npos)
      << r.out;
  EXPECT_EQ(Value(r.out, "total"), "") << r.out;
}

// A whole-GPU job is left as it asked: the job-submit rule adds no shards, and without
// gpufrac's options the plugin does nothing.
TEST_F(SlurmTest, AWholeGpuJobKeepsItsGpu) {
  Result r = AsUser("srun --gres=gpu:1 bash -c 'echo gpus=$SLURM_STEP_GPUS; $P info'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(Value(r.out, "gpus"), "") << r.out;
  EXPECT_EQ(Value(r.out, "total"), std::to_string(40 * kGiB)) << r.out;
}

// With ConstrainDevices=yes, a step opens only its own GPU's device node: the other GPU's is
// refused by the kernel (EPERM), its own gets as far as the (absent) driver (ENXIO on the
// test's device nodes); and its limit file names only its GPU.
TEST_F(SlurmTest, AStepReachesOnlyItsGpu) {
  if (!fs::exists(dir_ + "/cgroup.conf")) {
    GTEST_SKIP() << "no cgroup v1 devices controller on this host: ConstrainDevices is off";
  }
  Result r = AsUser(
      "srun --gpu-memory 10G bash -c 'echo gpus=$SLURM_STEP_GPUS; "
      "grep -c \"^gpu \" $GPUFRAC_LIMIT_FILE | sed s/^/limited=/; "
      "for i in 0 1; do (exec 3<" +
      dir_ + "/dev/nvidia$i) 2>&1 | sed \"s/^/dev$i: /\"; done'");
  const std::string mine = Value(r.out, "gpus");
  ASSERT_TRUE(mine == "0" || mine == "1") << r.out;
  const std::string other = mine == "0" ? "1" : "0";
  EXPECT_EQ(Value(r.out, "limited"), "1") << r.out;
  EXPECT_NE(r.out.find("dev" + mine + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No such device or address"), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.out, "Operation not permitted"), 1) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("dev" + other + ": [^\\n]*"))) << r.out;
  EXPECT_NE(m.str().find("Operation not permitted"), std::string::npos) << r.out;
}

// An ssh session that pam_slurm_adopt puts into a shard job (its extern step: the cluster runs
// with PrologFlags=contain; adopting is writing the session's PID into the step's cgroup.procs,
// as root, which is what pam_slurm_adopt does) opens no GPU's device node: nothing preloads the
// limiter there (issue 29: such a session used the GPU unlimited beside the job's shards). The
// job's own batch step still reaches its GPU (ENXIO: the test's node has no driver behind it).
TEST_F(SlurmTest, AnAdoptedSshSessionOpensNoGpu) {
  if (!fs::exists(dir_ + "/cgroup.conf")) {
    GTEST_SKIP() << "no cgroup v1 devices controller on this host: ConstrainDevices is off";
  }
  Result submitted = AsUser("sbatch --parsable --gres=shard:2 -o adopt.out --wrap '(exec 3<" +
                            dir_ + "/dev/nvidia$SLURM_JOB_GPUS) 2>&1 | sed s/^/batch:/; sleep 60'");
  ASSERT_EQ(submitted.code, 0) << submitted.out;
  const std::string job = submitted.out.substr(0, submitted.out.find_first_of(";\n"));
  std::string extern_dir;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string node = Value(AsRoot("scontrol show job -o " + job).out, "BatchHost");
        extern_dir =
            "/sys/fs/cgroup/devices/slurm_" + node + "/uid_65534/job_" + job + "/step_extern";
        return !node.empty() && fs::exists(extern_dir) &&
               Count(Shell("cat " + dir_ + "/out/adopt.out").out, "batch:") == 1;
      },
      30s))
      << extern_dir << Logs();
  EXPECT_NE(
      Shell("grep -c 'job " + job + ": no GPU in the extern step' " + dir_ + "/log/slurmd.log").out,
      "0\n")
      << Logs();
  Result adopted = Shell("sh -c 'echo $$ > " + extern_dir + "/cgroup.procs; exec runuser -u " +
                         "nobody -- bash -c \"for i in 0 1; do (exec 3<" + dir_ +
                         "/dev/nvidia\\$i) 2>&1 | sed s/^/ssh\\$i:/; done\"'");
  EXPECT_EQ(Count(adopted.out, "Operation not permitted"), 2) << adopted.out;
  EXPECT_NE(Shell("cat " + dir_ + "/out/adopt.out").out.find("batch:"), std::string::npos);
  EXPECT_NE(Shell("cat " + dir_ + "/out/adopt.out").out.find("No such device or address"),
            std::string::npos)
      << Shell("cat " + dir_ + "/out/adopt.out").out;
  EXPECT_EQ(AsRoot("scancel " + job).code, 0);
  ExpectAllReleased(job);
}

// The shards the job-submit rule set are the scheduler's guarantee: the job's user cannot
// shrink them while the job waits; a job without gpufrac's options can be changed as before.
TEST_F(SlurmTest, AUserCannotChangeAGpufracJobsShards) {
  Result r = AsUser(
      "j=$(sbatch --parsable --hold -o /dev/null --gpu-memory 10G --wrap true)\n"
      "scontrol update jobid=$j TresPerNode=gres:shard:1; echo gpufrac_update=$?\n"
      "scontrol show job $j | grep -o \"TresPerNode=[^ ]*\"\n"
      "k=$(sbatch --parsable --hold -o /dev/null --wrap true)\n"
      "scontrol update jobid=$k TresPerNode=gres:shard:1; echo plain_update=$?\n"
      "scancel $j $k");
  EXPECT_NE(Value(r.out, "gpufrac_update"), "0") << r.out;
  // Slurm 22.05 shows scontrol's user only the error code's text: not "Unspecified error".
  EXPECT_NE(r.out.find("Access/permission denied"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Unspecified error"), std::string::npos) << r.out;
  EXPECT_EQ(Value(r.out, "TresPerNode"), "gres:shard:2") << r.out;
  EXPECT_EQ(Value(r.out, "plain_update"), "0") << r.out;
}

// A step may not ask more memory than its job booked: one 5 GiB shard (salloc --gpu-memory 1G,
// or plain --gres=shard:1) cannot hold a step's 39 GiB. The step's tasks fail with the reason;
// the shard count is Slurm's for the step, not the one the user exported before sbatch.
TEST_F(SlurmTest, AStepCannotAskMoreMemoryThanItsJobBooked) {
  Result r = AsUser(
      "salloc --gpu-memory 1G srun --gpu-memory 39G $P info; "
      "SLURM_SHARDS_ON_NODE=8 sbatch --gres=shard:1 --wait -o over.out --wrap 'srun "
      "--gpu-memory 39G $P info; srun --gpu-memory 5G $P info'; cat over.out");
  EXPECT_EQ(Count(r.out, "gpufrac: the step's memory limit on GPU "), 2) << r.out;
  EXPECT_EQ(Count(r.out,
                  ", 39 GiB, is more than its 1 shard of 5 GiB hold (5 GiB): ask for at "
                  "most 5 GiB"),
            2)
      << r.out;
  EXPECT_EQ(r.out.find("total=" + std::to_string(39 * kGiB)), std::string::npos) << r.out;
  // What the job booked still runs: a 5 GiB step on its one shard.
  EXPECT_EQ(Value(r.out, "total"), std::to_string(5 * kGiB)) << r.out;
}

// A job's limit file is its own: another local user can neither read it nor list the job's
// directory, while the job's tasks read it and run limited.
TEST_F(SlurmTest, AnotherUserCannotReadAJobsLimitFile) {
  std::thread runner;
  Result result;
  const std::string job = StartHeldStep(
      "srun --gpu-memory 10G bash -c 'grep -c \"^gpu \" $GPUFRAC_LIMIT_FILE | sed s/^/readable=/; "
      "$P info; sleep 4'",
      &runner, &result);
  ASSERT_FALSE(job.empty()) << Logs();
  const std::string limits = dir_ + "/gpufrac/job-" + job + "/limits";
  Result other = Shell("runuser -u daemon -- cat " + limits);
  Result listed = Shell("runuser -u daemon -- ls " + dir_ + "/gpufrac/job-" + job);
  struct stat st {};
  ASSERT_EQ(stat(limits.c_str(), &st), 0);
  runner.join();
  EXPECT_NE(other.code, 0) << other.out;
  EXPECT_NE(other.out.find("Permission denied"), std::string::npos) << other.out;
  EXPECT_NE(listed.code, 0) << listed.out;
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0007, 0u) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_mode & 0222, 0u) << std::oct << st.st_mode;
  EXPECT_EQ(Value(result.out, "readable"), "1") << result.out;
  EXPECT_EQ(Value(result.out, "total"), std::to_string(10 * kGiB)) << result.out;
  ExpectAllReleased(job);
}

// A job's budget file is its user's (its processes map it), so the user can grow it; what it can
// take is bounded (a small tmpfs per job), and another job's step still starts.
TEST_F(SlurmTest, GrowingAJobsBudgetDoesNotStopAnotherJobsStep) {
  std::thread runner;
  Result result;
  const std::string job = StartHeldStep("srun --gpu-memory 10G sleep 8", &runner, &result);
  ASSERT_FALSE(job.empty()) << Logs();
  std::string budget;
  ASSERT_TRUE(WaitFor(
      [&] {
        Result found = Shell("find " + BudgetDir() + " -name 'gpufrac.slurm-" + job + ".*'");
        budget = found.out.substr(0, found.out.find('\n'));
        return !budget.empty();
      },
      5s));
  // 256 MiB appended to the budget, as its user: refused well before, the disk (tmpfs) full.
  Result grown = Shell("runuser -u nobody -- dd if=/dev/zero of=" + budget +
                       " bs=1M count=256 oflag=append conv=notrunc status=none");
  EXPECT_NE(grown.code, 0) << "the job's budget took 256 MiB more";
  EXPECT_NE(grown.out.find("No space left on device"), std::string::npos) << grown.out;
  Result other = AsUser("srun --gpu-memory 10G $P info");
  EXPECT_EQ(other.code, 0) << other.out;
  EXPECT_EQ(Value(other.out, "total"), std::to_string(10 * kGiB)) << other.out;
  runner.join();
  EXPECT_EQ(result.code, 0) << result.out;
  ExpectAllReleased(job);
}

// Issue 29's review (M5, L6). Slurm's mps GRES removes CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from
// the steps it does not book; on shards a user may export it. Into a CPU-only step it is not read
// (the step runs, not refused for "12.5"); on two GPUs it is refused, as shards are (it says
// nothing of how the share is split between them).
TEST_F(SlurmTest, AnExportedMpsPercentageRefusesNoCpuStepAndHoldsNoTwoGpus) {
  Result cpu = AsUser("export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12.5; srun echo ran");
  EXPECT_EQ(cpu.code, 0) << cpu.out;
  EXPECT_NE(cpu.out.find("ran"), std::string::npos) << cpu.out;
  Result two =
      AsUser("export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50; srun --gres=gpu:2 --gpu-memory 1G true");
  EXPECT_NE(two.code, 0) << two.out;
  EXPECT_NE(two.out.find("gpufrac: the step's MPS units are on 2 GPUs"), std::string::npos)
      << two.out;
  ExpectAllReleased("");
}

// The same cluster with its GPUs shared through Slurm's `mps` GRES (100 units each, as Slurm's
// documentation has it) instead of shards, and the job-submit rule booking MPS units
// (GPUFRAC_GRES = "mps"). No MPS control daemon runs: starting one is the site's part, not
// Slurm's. These check what a step's tasks are given and the memory their CUDA programs see.
class SlurmMpsTest : public SlurmTest {
 protected:
  static void SetUpTestSuite() { StartCluster("mps", 100); }
};

// The limits of the step's GPU in its limit file (printed in `text`), as "LIMIT COMPUTE
// COMPUTE-LIMIT": bytes, and thousandths of the GPU's time.
std::string LimitLine(const std::string& text) {
  std::smatch m;
  if (!std::regex_search(
          text, m,
          std::regex(R"(gpu GPU-\S+ limit (\d+) context \d+ compute (\d+) compute-limit (\d+))"))) {
    return "";
  }
  return m.str(1) + " " + m.str(2) + " " + m.str(3);
}

// With --gpu-compute, the step's thread percentage is its compute share where that is below what
// the MPS units Slurm booked give (0.25 of a job booked 50 units: 25), and never above it (a
// --gpu-compute-limit of 0.5 in a job booked 25 units stays at Slurm's 25: a request cannot raise
// what was booked). The limit file has the request's share, and the memory limit holds as on
// shards. A --gpu-compute above the memory's share (0.3 for 10 of 40 GiB) is refused at
// submission.
TEST_F(SlurmMpsTest, GpuComputeSetsTheThreadPercentage) {
  const std::string show =
      "echo pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; cat $GPUFRAC_LIMIT_FILE; "
      "$P info; $P alloc mem " +
      std::to_string(11 * kGiB);
  Result r = AsUser("srun --gres=mps:50 --gpu-memory 10G --gpu-compute 0.25 bash -c '" + show +
                    "' > c25.out 2>&1; srun --gres=mps:25 --gpu-memory 10G --gpu-compute-limit "
                    "0.5 bash -c '" +
                    show + "' > c50.out 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  std::string c25, c50;
  std::getline(std::ifstream(dir_ + "/out/c25.out"), c25, '\0');
  std::getline(std::ifstream(dir_ + "/out/c50.out"), c50, '\0');
  EXPECT_EQ(Value(c25, "pct"), "25") << c25;
  EXPECT_EQ(Value(c50, "pct"), "25") << "not above the 25 units booked: " << c50;
  EXPECT_EQ(LimitLine(c25), std::to_string(10 * kGiB) + " 250 1000") << c25;
  EXPECT_EQ(LimitLine(c50), std::to_string(10 * kGiB) + " 250 500") << c50;
  Result over = AsUser("srun --gres=mps:25 --gpu-memory 10G --gpu-compute 0.3 true");
  EXPECT_NE(over.code, 0);
  EXPECT_NE(over.out.find("gpufrac: --gpu-compute 0.3 is more than the share of the GPU that "
                          "--gpu-memory 10G books on an A100-40GB, 0.25"),
            std::string::npos)
      << over.out;
  for (const std::string& out : {c25, c50}) {
    EXPECT_EQ(Value(out, "total"), std::to_string(10 * kGiB)) << out;
    EXPECT_EQ(Value(out, "alloc"), std::to_string(kCudaErrorOutOfMemory)) << out;
  }
  ExpectAllReleased("");
}

// Without --gpu-compute, the percentage stays what Slurm set from the job's MPS units (50 of the
// GPU's 100), while the limiter keeps its default compute share (the memory's: 10 of 40 GiB) and
// the memory limit. The job-submit rule kept the user's 50 units: more than the 25 its memory
// needs.
TEST_F(SlurmMpsTest, WithoutGpuComputeSlurmsPercentageStays) {
  Result r = AsUser(
      "srun --gres=mps:50 --gpu-memory 10G bash -c 'echo pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
      "preload=$LD_PRELOAD; cat $GPUFRAC_LIMIT_FILE; scontrol show job $SLURM_JOB_ID | grep -o "
      "\"TresPerNode=[^ ]*\"; $P info'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(Value(r.out, "pct"), "50") << r.out;
  EXPECT_EQ(Value(r.out, "preload"), dir_ + "/bin/libgpufrac.so") << r.out;
  EXPECT_EQ(Value(r.out, "TresPerNode"), "gres:mps:50") << r.out;
  EXPECT_EQ(LimitLine(r.out), std::to_string(10 * kGiB) + " 250 1000") << r.out;
  EXPECT_EQ(Value(r.out, "total"), std::to_string(10 * kGiB)) << r.out;
}

// The job-submit rule books a request's share of the GPU's MPS units: 25 for 10 GiB of 40, with or
// without the user's own smaller --gres=mps.
TEST_F(SlurmMpsTest, TheRuleBooksTheMemorysShareOfMpsUnits) {
  Result r = AsUser(
      "for gres in \"\" --gres=mps:10; do\n"
      "  j=$(sbatch --parsable --hold -o /dev/null $gres --gpu-memory 10G --wrap true)\n"
      "  scontrol show job $j | grep -o \"TresPerNode=[^ ]*\"; scancel $j\n"
      "done");
  EXPECT_EQ(Value(r.out, "TresPerNode", 0), "gres:mps:25") << r.out;
  EXPECT_EQ(Value(r.out, "TresPerNode", 1), "gres:mps:25") << r.out;
}

// A plain --gres=mps:25 job, without gpufrac's options: Slurm books 25 of the GPU's 100 units and
// sets the thread percentage to 25, and the plugin holds it to that share of the memory (issue
// 29: alone, Slurm fenced none, and the program took more than a quarter of the GPU).
TEST_F(SlurmMpsTest, APlainMpsJobIsHeldToItsPercentage) {
  Result r = AsUser(
      "srun --gres=mps:25 bash -c 'echo pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
      "preload=$LD_PRELOAD; $P info; $P alloc mem " +
      std::to_string(11 * kGiB) + "; $P alloc mem " + std::to_string(9 * kGiB) + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(Value(r.out, "pct"), "25") << r.out;
  EXPECT_EQ(Value(r.out, "preload"), dir_ + "/bin/libgpufrac.so") << r.out;
  EXPECT_EQ(Value(r.out, "total"), std::to_string(10 * kGiB)) << r.out;
  EXPECT_EQ(Value(r.out, "alloc", 0), std::to_string(kCudaErrorOutOfMemory)) << r.out;
  EXPECT_EQ(Value(r.out, "alloc", 1), "0") << r.out;
  ExpectAllReleased("");
}

// Issue 29's review (M5): a user may export either variable, but cannot remove the one Slurm
// wrote. A shard count exported into an MPS step does not raise its booking (10 units of an
// A100-40GB: 4 GiB, not the whole GPU that 100000 shards would be).
TEST_F(SlurmMpsTest, AnExportedShardCountDoesNotRaiseAnMpsBooking) {
  Result raised =
      AsUser("export SLURM_SHARDS_ON_NODE=100000; srun --gres=mps:10 bash -c '$P info'");
  ASSERT_EQ(raised.code, 0) << raised.out;
  EXPECT_EQ(Value(raised.out, "total"), std::to_string(4 * kGiB)) << raised.out;
  ExpectAllReleased("");
}

}  // namespace
