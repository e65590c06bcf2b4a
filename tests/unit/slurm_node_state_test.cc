// The jobs' files on a Slurm node: one limit file and budget set per job shared by its steps,
// removed with the last step, at the epilog, or by a later step when a slurmstepd died
// (slurm/node_state.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "slurm/job_processes.h"
#include "slurm/node_state.h"

namespace gpufrac::slurm {
namespace {

namespace fs = std::filesystem;
constexpr char kUuid[] = "GPU-12345678-1234-1234-1234-123456789abc";
// The node the tests' state is for: its jobs' cgroups are Slurm's slurm_<node> (JobCgroup).
const std::string kNode = "gpufractest" + std::to_string(getpid());

class NodeStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Under a directory only root (or the user running the tests) can write: not /tmp, which
    // the state directory's path may not cross.
    const std::string base =
        geteuid() == 0 ? "/run" : std::string(getenv("HOME") ?: "/nonexistent");
    std::string tmpl = base + "/gpufrac-slurm-state-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    root_ = tmpl;
    chmod(root_.c_str(), 0711);
    dir_ = root_ + "/state";
  }
  void TearDown() override {
    state_.reset();
    std::error_code ec;
    // The budget directory the state directory records, whichever test opened it.
    if (budget_path_.empty()) std::getline(std::ifstream(dir_ + "/budget-dir"), budget_path_);
    if (budget_path_.rfind("/dev/shm/gpufrac-", 0) == 0) {
      // The jobs' budget tmpfs a test left mounted (as root).
      for (const auto& entry : fs::directory_iterator(budget_path_, ec)) {
        if (entry.path().filename().string().rfind("job-", 0) == 0) {
          umount2(entry.path().c_str(), MNT_DETACH);
        }
      }
      umount2(budget_path_.c_str(), MNT_DETACH);  // Its own tmpfs, mounted as root.
      fs::remove_all(budget_path_, ec);
    }
    fs::remove_all(root_, ec);
  }

  NodeState& Open() {
    StatusOr<NodeState> opened = NodeState::Open(dir_, kNode);
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    state_.emplace(std::move(*opened));
    budget_path_ = state_->budgets().path();
    return *state_;
  }
  std::string Limits(uint32_t job, uint64_t limit) {
    auto text = launch::LimitFileText(
        NodeState::WorkloadName(job), Gpus(limit),
        {.budget_dir = state_->JobBudgetDir(job), .arbiter_dir = state_->budgets().path()});
    EXPECT_TRUE(text.ok()) << text.status().message();
    return *text;
  }
  static std::vector<launch::LimitedGpu> Gpus(uint64_t limit) {
    return {{.uuid = kUuid, .limit_bytes = limit, .context_bytes = 1 << 20}};
  }
  bool BudgetExists(uint32_t job) const {
    return fs::exists(budget_path_ + "/job-" + std::to_string(job) + "/gpufrac." +
                      NodeState::WorkloadName(job) + "." + kUuid);
  }
  // A process that has ended: what a SIGKILLed slurmstepd leaves in its marker.
  static proc::ProcessId DeadProcess() {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    proc::ProcessId id;
    proc::ReadProcessId(pid, &id);
    if (id.pid == 0) id = {pid, 1};
    waitpid(pid, nullptr, 0);
    return id;
  }

  // Step `step` of `job` begins, run by this process, with 1 GiB of the test GPU.
  void BeginStep(uint32_t job, uint32_t step = 0) {
    Status begun = state_
                       ->BeginStep(job, step, proc::CurrentProcess(), Limits(job, 1ull << 30),
                                   Gpus(1ull << 30), std::nullopt)
                       .status();
    ASSERT_TRUE(begun.ok()) << begun.message();
  }
  // Step 0 of `job`, whose task its user moved into the cgroup `below` the step's (and froze
  // there, with `frozen`), ends: the task is killed, then the share freed.
  void ExpectTheStepsEndKillsItsTask(uint32_t job, const std::string& below, bool frozen);

  std::string root_, dir_, budget_path_;
  std::optional<NodeState> state_;
};

TEST_F(NodeStateTest, StepsOfAJobShareOneLimitFileAndBudget) {
  NodeState& state = Open();
  const std::string text = Limits(7, 10ull << 30);
  auto first = state.BeginStep(7, 0, proc::CurrentProcess(), text, Gpus(10ull << 30), std::nullopt);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->limit_file, dir_ + "/job-7/limits");
  // Root's job: root's alone (where ACLs let its users have theirs; /tmp here is tmpfs or ext4).
  ASSERT_TRUE(state.private_limits());
  struct stat st {};
  ASSERT_EQ(stat(first->limit_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0400u);
  ASSERT_EQ(stat((dir_ + "/job-7").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(BudgetExists(7));

  auto second =
      state.BeginStep(7, 1, proc::CurrentProcess(), text, Gpus(10ull << 30), std::nullopt);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second->limit_file, first->limit_file);
  // Another limit for the same job's budget is refused, with the reason.
  auto other = state.BeginStep(7, 2, proc::CurrentProcess(), Limits(7, 5ull << 30),
                               Gpus(5ull << 30), std::nullopt);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("same"), std::string::npos);

  EXPECT_TRUE(state.EndStep(7, 0, proc::CurrentProcess()).ok());
  EXPECT_TRUE(fs::exists(first->limit_file));
  EXPECT_TRUE(BudgetExists(7));
  EXPECT_TRUE(state.EndStep(7, 1, proc::CurrentProcess()).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/job-7"));
  EXPECT_FALSE(BudgetExists(7));
}

// A step held only to what it booked (no gpufrac options) joins the limits the job's running
// steps made, on the GPUs they cover; one with other options of its own is refused.
TEST_F(NodeStateTest, AStepWithoutOptionsJoinsTheJobsLimits) {
  NodeState& state = Open();
  const std::string job_limits = Limits(11, 10ull << 30);
  ASSERT_TRUE(
      state.BeginStep(11, 0, proc::CurrentProcess(), job_limits, Gpus(10ull << 30), std::nullopt)
          .ok());
  auto joined = state.BeginStep(11, 1, proc::CurrentProcess(), Limits(11, 5ull << 30),
                                Gpus(5ull << 30), std::nullopt, /*join_running=*/true);
  ASSERT_TRUE(joined.ok()) << joined.status().message();
  std::string text;
  std::getline(std::ifstream(joined->limit_file), text, '\0');
  EXPECT_EQ(text, job_limits);
  auto own = state.BeginStep(11, 2, proc::CurrentProcess(), Limits(11, 5ull << 30),
                             Gpus(5ull << 30), std::nullopt);
  EXPECT_FALSE(own.ok());
  std::vector<launch::LimitedGpu> elsewhere = Gpus(5ull << 30);
  elsewhere[0].uuid = "GPU-87654321-1234-1234-1234-123456789abc";
  EXPECT_FALSE(state
                   .BeginStep(11, 3, proc::CurrentProcess(), Limits(11, 5ull << 30), elsewhere,
                              std::nullopt, /*join_running=*/true)
                   .ok());
  EXPECT_TRUE(state.EndJob(11).ok());
}

// The components of a heterogeneous step (srun A : B) share the job and step id, each with its
// own slurmstepd: the first to end leaves the job's files to the other.
TEST_F(NodeStateTest, EachComponentOfAHetStepHasItsOwnMarker) {
  NodeState& state = Open();
  const proc::ProcessId a = proc::CurrentProcess();
  proc::ProcessId b;
  ASSERT_TRUE(proc::ReadProcessId(getppid(), &b));
  const std::string text = Limits(15, 1ull << 30);
  ASSERT_TRUE(state.BeginStep(15, 2, a, text, Gpus(1ull << 30), std::nullopt).ok());
  ASSERT_TRUE(state.BeginStep(15, 2, b, text, Gpus(1ull << 30), std::nullopt).ok());
  EXPECT_TRUE(state.EndStep(15, 2, a).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/job-15/limits"));
  EXPECT_TRUE(BudgetExists(15));
  EXPECT_TRUE(state.EndStep(15, 2, b).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/job-15"));
  EXPECT_FALSE(BudgetExists(15));
}

TEST_F(NodeStateTest, EpilogRemovesTheJobWhateverItsSteps) {
  NodeState& state = Open();
  ASSERT_TRUE(state
                  .BeginStep(8, 0, proc::CurrentProcess(), Limits(8, 1ull << 30), Gpus(1ull << 30),
                             std::nullopt)
                  .ok());
  EXPECT_TRUE(state.EndJob(8).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/job-8"));
  EXPECT_FALSE(BudgetExists(8));
}

TEST_F(NodeStateTest, ANextStepRemovesWhatADeadStepdLeft) {
  NodeState& state = Open();
  ASSERT_TRUE(
      state.BeginStep(9, 0, DeadProcess(), Limits(9, 1ull << 30), Gpus(1ull << 30), std::nullopt)
          .ok());
  ASSERT_TRUE(state
                  .BeginStep(10, 0, proc::CurrentProcess(), Limits(10, 1ull << 30),
                             Gpus(1ull << 30), std::nullopt)
                  .ok());
  EXPECT_FALSE(fs::exists(dir_ + "/job-9"));
  EXPECT_FALSE(BudgetExists(9));
  EXPECT_TRUE(BudgetExists(10));
  EXPECT_TRUE(state.EndStep(10, 0, proc::CurrentProcess()).ok());
  EXPECT_FALSE(BudgetExists(10));
}

// A job's cgroup as Slurm 22.05's proctrack/cgroup makes it under cgroup v1
// (freezer/slurm_<node>/uid_<uid>/job_<id>/step_<step>), with a process of the job in it, which
// sleeps until killed. `below`: the cgroup under the step's its user made and moved it into.
class JobCgroup {
 public:
  static constexpr char kMount[] = "/sys/fs/cgroup/freezer";
  JobCgroup(uint32_t job, uint32_t step, const std::string& node = kNode,
            const std::string& below = "")
      : root_(std::string(kMount) + "/slurm_" + node),
        dir_(root_ + "/uid_0/job_" + std::to_string(job)),
        task_dir_(dir_ + "/" + StepCgroupName(step) + (below.empty() ? "" : "/" + below)) {
    fs::create_directories(task_dir_);
    // Slurm hands the step's cgroup to the job's user (nobody, here).
    EXPECT_EQ(chown((dir_ + "/" + StepCgroupName(step)).c_str(), 65534, 65534), 0);
    task_ = fork();
    if (task_ == 0) {
      std::ofstream(task_dir_ + "/cgroup.procs") << getpid() << std::endl;
      for (;;) pause();
    }
  }
  ~JobCgroup() {
    if (task_ > 0 && waitpid(task_, nullptr, WNOHANG) == 0) {
      kill(task_, SIGKILL);
      Freeze(false, /*own=*/true);
      Freeze(false);
      waitpid(task_, nullptr, 0);
    }
    // Leaves first: cgroups are removed with rmdir, deepest first.
    std::vector<fs::path> dirs;
    std::error_code ec;
    for (const auto& entry : fs::recursive_directory_iterator(root_, ec)) {
      if (entry.is_directory()) dirs.push_back(entry.path());
    }
    std::sort(dirs.rbegin(), dirs.rend());
    for (const fs::path& dir : dirs) rmdir(dir.c_str());
    rmdir(root_.c_str());
  }
  // Whether the task is in its cgroup (it put itself there) and still runs.
  bool TaskRuns() const {
    return task_ > 0 && kill(task_, 0) == 0 && waitpid(task_, nullptr, WNOHANG) == 0;
  }
  bool TaskJoined() const {
    for (int i = 0; i < 100; ++i) {
      std::ifstream procs(task_dir_ + "/cgroup.procs");
      for (long pid = 0; procs >> pid;) {
        if (pid == task_) return true;
      }
      usleep(10000);
    }
    return false;
  }
  // Whether the task has been ended by SIGKILL (reaps it); false if it still runs after 2 s.
  bool Killed() {
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(task_, &status, WNOHANG) == task_) {
        task_ = 0;
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      }
      usleep(10000);
    }
    return false;
  }
  // The job's cgroup frozen (a suspended job), or with `own`, the task's own (its user froze it).
  void Freeze(bool frozen, bool own = false) const {
    std::ofstream((own ? task_dir_ : dir_) + "/freezer.state")
        << (frozen ? "FROZEN" : "THAWED") << std::endl;
  }

 private:
  std::string root_, dir_, task_dir_;
  pid_t task_ = 0;
};

bool CanMakeCgroups() { return geteuid() == 0 && fs::exists(JobCgroup::kMount); }

void NodeStateTest::ExpectTheStepsEndKillsItsTask(uint32_t job, const std::string& below,
                                                  bool frozen) {
  JobCgroup cgroup(job, 0, kNode, below);
  ASSERT_TRUE(cgroup.TaskJoined());
  if (frozen) cgroup.Freeze(true, /*own=*/true);
  Open();
  BeginStep(job);
  Status ended = state_->EndStep(job, 0, proc::CurrentProcess());
  EXPECT_TRUE(ended.ok()) << ended.message();
  EXPECT_TRUE(cgroup.Killed());
  EXPECT_FALSE(BudgetExists(job));
}

// A task that outlived its SIGKILLed slurmstepd still holds the job's GPU memory: a later step's
// sweep keeps the job's share booked while the job's cgroup holds a process, and the epilog ends
// that process before it frees the share (issue 29: the files and shards were freed while the
// task still ran).
TEST_F(NodeStateTest, AJobsShareIsFreedOnlyOnceItsProcessesAreGone) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  constexpr uint32_t kJob = 910001;
  JobCgroup cgroup(kJob, 0);
  ASSERT_TRUE(cgroup.TaskJoined());
  NodeState& state = Open();
  ASSERT_TRUE(state
                  .BeginStep(kJob, 0, DeadProcess(), Limits(kJob, 1ull << 30), Gpus(1ull << 30),
                             std::nullopt)
                  .ok());
  // The next step's sweep: the dead slurmstepd's task still runs, so its job's files stay.
  ASSERT_TRUE(state
                  .BeginStep(kJob + 1, 0, proc::CurrentProcess(), Limits(kJob + 1, 1ull << 30),
                             Gpus(1ull << 30), std::nullopt)
                  .ok());
  EXPECT_TRUE(BudgetExists(kJob));
  EXPECT_TRUE(fs::exists(dir_ + "/job-" + std::to_string(kJob) + "/limits"));
  EXPECT_TRUE(cgroup.TaskRuns());
  // The epilog ends the task, even frozen (a suspended job), then frees the share.
  cgroup.Freeze(true);
  ASSERT_TRUE(state.EndJob(kJob).ok());
  EXPECT_TRUE(cgroup.Killed());
  EXPECT_FALSE(BudgetExists(kJob));
  EXPECT_FALSE(fs::exists(dir_ + "/job-" + std::to_string(kJob)));
  EXPECT_TRUE(state.EndStep(kJob + 1, 0, proc::CurrentProcess()).ok());
}

// A step's end frees the job's share only after the step's processes left in its cgroup (a
// task's background child) are ended; the slurmstepd ending it is not one of them.
TEST_F(NodeStateTest, AStepsEndEndsItsLeftoverProcessesFirst) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  ExpectTheStepsEndKillsItsTask(910003, "", /*frozen=*/false);
}

// Issue 29's review (H2a): a process its user moved into a cgroup below step 0's, left when step 0
// ended while step 1 still ran, is ended by step 1's end (the last, which frees the share).
TEST_F(NodeStateTest, TheLastStepsEndEndsWhatEarlierStepsLeft) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  constexpr uint32_t kJob = 910007;
  JobCgroup cgroup(kJob, 0, kNode, "x");
  ASSERT_TRUE(cgroup.TaskJoined());
  NodeState& state = Open();
  BeginStep(kJob, 0);
  BeginStep(kJob, 1);
  ASSERT_TRUE(state.EndStep(kJob, 0, proc::CurrentProcess()).ok());
  EXPECT_TRUE(cgroup.TaskRuns());  // The share is still booked: step 1 runs.
  EXPECT_TRUE(BudgetExists(kJob));
  ASSERT_TRUE(state.EndStep(kJob, 1, proc::CurrentProcess()).ok());
  EXPECT_TRUE(cgroup.Killed());
  EXPECT_FALSE(BudgetExists(kJob));
}

// H2b: however deep below the step its user moved a process, the step's end finds and ends it.
TEST_F(NodeStateTest, AStepsEndEndsAProcessDeepBelowItsCgroup) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  ExpectTheStepsEndKillsItsTask(910009, "a/b/c/d/e/f/g/h/i/j", /*frozen=*/false);
}

// M2: a cgroup its user froze below the step's stays frozen when the step's is thawed, and a
// frozen task gets no SIGKILL: the step's end thaws it too, so the epilog does not fail (and
// Slurm does not drain the node) at the user's will.
TEST_F(NodeStateTest, AStepsEndEndsAProcessInACgroupThatFrozeItself) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  ExpectTheStepsEndKillsItsTask(910011, "f", /*frozen=*/true);
}

// M3: a step that left many processes is ended in one scan of /proc per pass (each kill was one
// more read of cgroup.procs); the time it took is printed, not bounded (the machine may be busy).
TEST_F(NodeStateTest, AStepsEndEndsManyLeftoverProcesses) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  constexpr uint32_t kJob = 910015;
  constexpr int kMore = 500;
  JobCgroup cgroup(kJob, 0);
  ASSERT_TRUE(cgroup.TaskJoined());
  const std::string step_dir = std::string(JobCgroup::kMount) + "/slurm_" + kNode + "/uid_0/job_" +
                               std::to_string(kJob) + "/" + StepCgroupName(0);
  std::vector<pid_t> more;
  for (int i = 0; i < kMore; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      std::ofstream(step_dir + "/cgroup.procs") << getpid() << std::endl;
      for (;;) pause();
    }
    more.push_back(pid);
  }
  // All joined before the step ends.
  for (int i = 0; i < 500; ++i) {
    std::ifstream procs(step_dir + "/cgroup.procs");
    int n = 0;
    for (long pid = 0; procs >> pid;) ++n;
    if (n == kMore + 1) break;
    usleep(10000);
  }
  NodeState& state = Open();
  BeginStep(kJob);
  const auto start = std::chrono::steady_clock::now();
  Status ended = state.EndStep(kJob, 0, proc::CurrentProcess());
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::printf("ended %d processes in %lld ms\n", kMore + 1, static_cast<long long>(took.count()));
  EXPECT_TRUE(ended.ok()) << ended.message();
  EXPECT_TRUE(cgroup.Killed());
  int killed = 0;
  for (pid_t pid : more) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != pid) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++killed;
    }
  }
  EXPECT_EQ(killed, kMore);
  EXPECT_FALSE(BudgetExists(kJob));
}

// M3, H2c: the search for a job's processes fails closed. When its time bound passes (here at
// once) it says processes may remain rather than none, and ending them reports an error, naming
// the bound, instead of success.
TEST_F(NodeStateTest, TheSearchForAJobsProcessesFailsClosed) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  constexpr uint32_t kJob = 910017;
  JobCgroup cgroup(kJob, 0);
  ASSERT_TRUE(cgroup.TaskJoined());
  const std::vector<std::string> dirs = JobCgroups(kJob, std::nullopt, kNode, CgroupMounts());
  ASSERT_EQ(dirs.size(), 1u);
  StatusOr<std::vector<pid_t>> found = ProcessesIn(dirs, getpid(), std::chrono::milliseconds(0));
  EXPECT_FALSE(found.ok());
  Status ended = EndProcessesIn(dirs, getpid(), std::chrono::milliseconds(0));
  EXPECT_FALSE(ended.ok());
  EXPECT_NE(ended.message().find("may remain"), std::string::npos) << ended.message();
  // With time, the same search finds the task.
  found = ProcessesIn(dirs, getpid(), std::chrono::milliseconds(10000));
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(found->size(), 1u);
}

// H2a: the epilog ends a job's leftovers even when gpufrac holds no files of it (its last step's
// end freed the share).
TEST_F(NodeStateTest, TheEpilogEndsLeftoversOfAJobWithoutFiles) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  constexpr uint32_t kJob = 910013;
  JobCgroup cgroup(kJob, 0);
  ASSERT_TRUE(cgroup.TaskJoined());
  NodeState& state = Open();
  EXPECT_TRUE(state.EndJob(kJob).ok());
  EXPECT_TRUE(cgroup.Killed());
}

TEST_F(NodeStateTest, RefusesAStateDirOthersCanWrite) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0777), 0);
  chmod(dir_.c_str(), 0777);
  StatusOr<NodeState> opened = NodeState::Open(dir_, kNode);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("writable"), std::string::npos);
  EXPECT_FALSE(NodeState::Open("relative/dir", kNode).ok());
}

// Every directory on the state directory's path is checked, not only the last: one under a
// directory others can write could be renamed away and replaced by theirs between steps.
TEST_F(NodeStateTest, RefusesAStateDirUnderADirectoryOthersCanWrite) {
  const std::string shared = root_ + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0777), 0);
  chmod(shared.c_str(), 0777);
  dir_ = shared + "/state";
  StatusOr<NodeState> opened = NodeState::Open(dir_, kNode);
  ASSERT_FALSE(opened.ok());
  const std::string message = opened.status().message();
  EXPECT_NE(message.find(shared + " is writable by its group or others (mode 0777)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // Nor sticky, as /tmp is: a user could make the missing state directory there first (an
  // attacker's review: every gpufrac step on the node was then refused), so none is trusted.
  chmod(shared.c_str(), 01777);
  opened = NodeState::Open(dir_, kNode);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(
      opened.status().message().find(shared + " is writable by its group or others (mode 1777)"),
      std::string::npos)
      << opened.status().message();
}

// Whoever can open the state directory can hold its lock and stop every step on the node: it is
// made exactly 0711 whatever mode it had (an operator's tmpfiles.d may make it 0755), so no one
// else can open it.
TEST_F(NodeStateTest, NoOneElseCanOpenTheStateDirectoryToHoldItsLock) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
  chmod(dir_.c_str(), 0755);
  StatusOr<NodeState> opened = NodeState::Open(dir_, kNode);
  ASSERT_TRUE(opened.ok()) << opened.status();
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  budget_path_ = opened->budgets().path();
}

// The node's budget directory, where the GPUs' arbiters are (which every job may write), is a
// tmpfs of its own as root: a user who fills /dev/shm leaves it room, and growing an arbiter takes
// at most its size.
TEST_F(NodeStateTest, TheNodesBudgetDirectoryIsATmpfsOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "only root mounts";
  StatusOr<NodeState> opened = NodeState::Open(dir_, kNode);
  ASSERT_TRUE(opened.ok()) << opened.status();
  budget_path_ = opened->budgets().path();
  struct stat st {
  }, up{};
  ASSERT_EQ(stat(budget_path_.c_str(), &st), 0);
  ASSERT_EQ(stat("/dev/shm", &up), 0);
  EXPECT_NE(st.st_dev, up.st_dev) << budget_path_ << " is on /dev/shm's filesystem";
  // Grown past its size, a file there stops at it.
  const std::string grown = budget_path_ + "/compute.grown";
  const int fd = open(grown.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  ASSERT_GE(fd, 0);
  static char block[1 << 16];
  uint64_t written = 0;
  for (ssize_t n; (n = write(fd, block, sizeof(block))) > 0;) written += n;
  close(fd);
  EXPECT_LE(written, uint64_t{8} << 20);
  // Opened again (the next step), it is the same tmpfs, not a second one stacked on it.
  StatusOr<NodeState> again = NodeState::Open(dir_, kNode);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->budgets().path(), budget_path_);
  EXPECT_TRUE(std::filesystem::exists(grown));
}

TEST_F(NodeStateTest, RefusesAStateDirThroughALinkOrAnotherUsersDirectory) {
  ASSERT_EQ(mkdir((root_ + "/real").c_str(), 0755), 0);
  ASSERT_EQ(symlink((root_ + "/real").c_str(), (root_ + "/link").c_str()), 0);
  dir_ = root_ + "/link/state";
  StatusOr<NodeState> opened = NodeState::Open(dir_, kNode);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find(root_ + "/link is a symbolic link"), std::string::npos)
      << opened.status().message();
  if (geteuid() != 0) return;  // Only root can give a directory away.
  ASSERT_EQ(chown((root_ + "/real").c_str(), 65534, 65534), 0);
  dir_ = root_ + "/real/state";
  opened = NodeState::Open(dir_, kNode);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find(root_ + "/real belongs to uid 65534"), std::string::npos)
      << opened.status().message();
}

// Whether user `uid` can open `path` for reading (in a child that takes on that user).
bool CanRead(uid_t uid, const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
    int fd = open(path.c_str(), O_RDONLY);
    _exit(fd >= 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

constexpr uid_t kJobUser = 65534;  // nobody
constexpr uid_t kOtherUser = 1;    // daemon

// A job's limit file is read by its own user's tasks and by no other user; its user can neither
// write it nor make names beside it.
TEST_F(NodeStateTest, AJobsLimitFileIsReadableByItsUserOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the job runs as another user";
  NodeState& state = Open();
  auto begun =
      state.BeginStep(12, 0, proc::CurrentProcess(), Limits(12, 1ull << 30), Gpus(1ull << 30),
                      launch::WorkloadBudgets::Owner{kJobUser, kJobUser});
  ASSERT_TRUE(begun.ok()) << begun.status().message();
  const std::string limits = dir_ + "/job-12/limits";
  EXPECT_TRUE(CanRead(kJobUser, limits));
  EXPECT_FALSE(CanRead(kOtherUser, limits));
  EXPECT_FALSE(CanRead(kOtherUser, dir_ + "/job-12"));
  struct stat st {};
  ASSERT_EQ(stat(limits.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0222, 0u);
  ASSERT_EQ(stat((dir_ + "/job-12").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0022, 0u);
  EXPECT_EQ(st.st_mode & 0007, 0u);
  // Its budgets still reach it: they are its user's.
  EXPECT_TRUE(BudgetExists(12));
}

// The budget files are their user's, who can grow them: what one job takes is bounded, and
// another job's step still starts.
TEST_F(NodeStateTest, GrowingABudgetIsBoundedAndLeavesOtherJobsAlone) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: a tmpfs per job";
  NodeState& state = Open();
  ASSERT_TRUE(state
                  .BeginStep(13, 0, proc::CurrentProcess(), Limits(13, 1ull << 30),
                             Gpus(1ull << 30), launch::WorkloadBudgets::Owner{kJobUser, kJobUser})
                  .ok());
  std::string budget;
  for (const auto& entry : fs::recursive_directory_iterator(budget_path_)) {
    if (entry.path().filename() == "gpufrac.slurm-13." + std::string(kUuid)) budget = entry.path();
  }
  ASSERT_FALSE(budget.empty());
  int fd = open(budget.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  // Up to 64 MiB appended, until the filesystem refuses.
  std::vector<char> chunk(1 << 20, 'x');
  uint64_t written = 0;
  int err = 0;
  while (written < (64u << 20)) {
    ssize_t n = write(fd, chunk.data(), chunk.size());
    if (n < 0) {
      err = errno;
      break;
    }
    written += static_cast<uint64_t>(n);
  }
  close(fd);
  EXPECT_LT(written, 4u << 20) << "the job's budget grew by " << written << " bytes";
  EXPECT_EQ(err, ENOSPC);
  EXPECT_TRUE(state
                  .BeginStep(14, 0, proc::CurrentProcess(), Limits(14, 1ull << 30),
                             Gpus(1ull << 30), std::nullopt)
                  .ok());
  EXPECT_TRUE(BudgetExists(14));
}

TEST_F(NodeStateTest, MakesTheStateDirAndItsParent) {
  dir_ = root_ + "/gpufrac/slurm";
  Open();
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_EQ(st.st_uid, geteuid());
}

// Another slurmd on the host (a test cluster) has its own cgroup root, slurm_<its node>, and jobs
// of the same ids: this node's epilog leaves them alone.
TEST_F(NodeStateTest, AnotherNodesJobOfTheSameIdIsLeftAlone) {
  if (!CanMakeCgroups()) GTEST_SKIP() << "needs root and cgroup v1's freezer";
  constexpr uint32_t kJob = 910005;
  JobCgroup other(kJob, 0, kNode + "other");
  ASSERT_TRUE(other.TaskJoined());
  NodeState& state = Open();
  ASSERT_TRUE(state
                  .BeginStep(kJob, 0, proc::CurrentProcess(), Limits(kJob, 1ull << 30),
                             Gpus(1ull << 30), std::nullopt)
                  .ok());
  EXPECT_TRUE(state.EndJob(kJob).ok());
  EXPECT_FALSE(BudgetExists(kJob));
  EXPECT_TRUE(other.TaskRuns());
}

}  // namespace
}  // namespace gpufrac::slurm
