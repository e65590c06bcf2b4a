// The one launch path every launcher shares: the workload's environment, its limit file (and the
// writer that never follows a link or leaves a half-written file), and its budgets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cgroup_probe.h"
#include "launch/budgets.h"
#include "launch/cgroup.h"
#include "launch/environment.h"
#include "launch/limit_file.h"
#include "limiter/budget.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

namespace fs = std::filesystem;

constexpr char kUuid0[] = "GPU-0b6e6d0e-1111-2222-3333-444455556666";
constexpr char kUuid1[] = "GPU-0b6e6d0e-1111-2222-3333-444455557777";
constexpr uint64_t kGiB = uint64_t{1} << 30;

std::vector<std::string> Named(const std::vector<std::string>& env, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& e : env) {
    if (e.rfind(name + "=", 0) == 0) out.push_back(e.substr(name.size() + 1));
  }
  return out;
}

TEST(WorkloadEnvironmentTest, TheLimiterComesFirstAndNoDuplicateShadowsAVariable) {
  std::vector<std::string> env = WithWorkloadEnvironment(
      {"PATH=/bin", "LD_PRELOAD=/home/u/mine.so", "CUDA_VISIBLE_DEVICES=0,1,2",
       "CUDA_VISIBLE_DEVICES=3", "GPUFRAC_LIMIT_FILE=/tmp/forged"},
      {.limiter_path = "/opt/gpufrac/lib/libgpufrac.so",
       .limit_file = "/run/job/limits",
       .visible_uuids = {kUuid0, kUuid1},
       .extra = {"SIMGPU_NAMESPACE=x", "CUDA_VISIBLE_DEVICES=" + std::string(kUuid1)}});
  EXPECT_EQ(Named(env, "LD_PRELOAD"),
            std::vector<std::string>{"/opt/gpufrac/lib/libgpufrac.so:/home/u/mine.so"});
  EXPECT_EQ(Named(env, "GPUFRAC_LIMIT_FILE"), std::vector<std::string>{"/run/job/limits"});
  // Extras are set last and win.
  EXPECT_EQ(Named(env, "CUDA_VISIBLE_DEVICES"), std::vector<std::string>{kUuid1});
  EXPECT_EQ(Named(env, "SIMGPU_NAMESPACE"), std::vector<std::string>{"x"});
  EXPECT_EQ(Named(env, "PATH"), std::vector<std::string>{"/bin"});

  std::vector<std::string> bare = WithWorkloadEnvironment(
      {}, {.limiter_path = "/l.so", .limit_file = "/f", .visible_uuids = {kUuid0}, .extra = {}});
  EXPECT_EQ(Named(bare, "LD_PRELOAD"), std::vector<std::string>{"/l.so"});
  EXPECT_EQ(Named(bare, "CUDA_VISIBLE_DEVICES"), std::vector<std::string>{kUuid0});
}

TEST(LimitFileTest, TheTextIsWhatTheLimiterReadsAndBadGpusAreRefused) {
  StatusOr<std::string> text =
      LimitFileText("job-1", {{kUuid0, 4 * kGiB, 783u << 20}, {kUuid1, 2 * kGiB, 783u << 20}},
                    {.budget_dir = "/dev/shm/gpufrac-AbC123", .quiet = true});
  ASSERT_TRUE(text.ok()) << text.status();
  limiter::LimitConfig parsed;
  char err[256];
  ASSERT_TRUE(limiter::ParseLimitConfig(text->data(), text->size(), &parsed, err, sizeof(err)))
      << err;
  EXPECT_EQ(parsed.gpu_count, 2);
  EXPECT_EQ(parsed.gpus[1].limit_bytes, 2 * kGiB);
  EXPECT_TRUE(parsed.quiet);
  EXPECT_STREQ(parsed.budget_dir, "/dev/shm/gpufrac-AbC123");

  auto refused = [](const std::string& workload, std::vector<LimitedGpu> gpus) {
    StatusOr<std::string> t = LimitFileText(workload, gpus);
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << workload;
    return t.status().message();
  };
  EXPECT_NE(refused("job 1", {{kUuid0, kGiB, 0}}).find("workload name"), std::string::npos);
  EXPECT_NE(refused("job-1", {{kUuid0, kGiB, 0}, {kUuid0, kGiB, 0}}).find("listed twice"),
            std::string::npos);
  EXPECT_NE(refused("job-1", {{"GPU-0/../x", kGiB, 0}}).find("not a GPU UUID"), std::string::npos);
  EXPECT_NE(refused("job-1", {{kUuid0, 0, 0}}).find("between 1 byte"), std::string::npos);
  EXPECT_NE(refused("job-1", {}).find("1 to"), std::string::npos);
}

class WriteNewFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpufrac-launch-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(WriteNewFileTest, WritesExactlyTheModeWhateverTheUmask) {
  mode_t old = umask(0777);
  Status written = WriteNewFile(dir_ / "limits", "text\n", 0444);
  umask(old);
  ASSERT_TRUE(written.ok()) << written;
  struct stat st;
  ASSERT_EQ(stat((dir_ / "limits").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  std::ifstream in(dir_ / "limits");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "text");
}

// An attacker who can put a name where the file goes gets neither their file rewritten nor the
// file a link points to.
TEST_F(WriteNewFileTest, NeverWritesThroughALinkOrIntoAFileThatExists) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "keep";
  fs::create_symlink(victim, dir_ / "link");
  EXPECT_FALSE(WriteNewFile(dir_ / "link", "evil", 0644).ok());
  EXPECT_FALSE(WriteNewFile(victim, "evil", 0644).ok());
  std::ifstream in(victim);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));  // Not removed either: it is not ours.
}

TEST_F(WriteNewFileTest, AFailedWriteLeavesNothingBehind) {
  const fs::path path = dir_ / "spec.json";
  pid_t child = fork();
  if (child == 0) {
    // Files of more than 4 bytes cannot be written: the write fails part-way.
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {4, 4};
    setrlimit(RLIMIT_FSIZE, &small);
    Status written = WriteNewFile(path, std::string(4096, 'x'), 0600);
    _exit(!written.ok() && written.message().find("cannot write") != std::string::npos ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(path));
}

bool BudgetExists(const BudgetDir& dir, const std::string& workload, const std::string& uuid) {
  char name[160];
  uint64_t used = 0;
  return limiter::BudgetName(workload.c_str(), uuid.c_str(), name, sizeof(name)) &&
         limiter::Budget::PeekUsedAt(dir.fd(), name + 1, &used);
}

// The limit a workload's limiter sees when it attaches to its budget in `dir`.
uint64_t LimitSeen(const BudgetDir& dir, const std::string& workload, const std::string& uuid) {
  char name[160], err[400];
  limiter::Budget budget;
  if (!limiter::BudgetName(workload.c_str(), uuid.c_str(), name, sizeof(name)) ||
      !budget.AttachIn(dir.path().c_str(), name + 1, err, sizeof(err))) {
    ADD_FAILURE() << err;
    return 0;
  }
  uint64_t limit = budget.limit();
  budget.Close();
  return limit;
}

// Runs `body` in a child process as uid/gid 65534 (nobody): another user of the machine.
bool AsAnotherUser(const std::function<bool()>& body) {
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class WorkloadBudgetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<BudgetDir> dir = BudgetDir::Make(0711);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_.emplace(std::move(*dir));
  }
  void TearDown() override {
    if (dir_) dir_->RemoveAll();
  }
  std::optional<BudgetDir> dir_;
  const std::string workload_ = "launch-test-" + std::to_string(getpid());
};

TEST_F(WorkloadBudgetsTest, CreatedAllOrNothingAndRemovedUnlessKept) {
  {
    StatusOr<WorkloadBudgets> budgets = WorkloadBudgets::Create(
        *dir_, workload_, {{kUuid0, kGiB, 0}, {kUuid1, kGiB, 0}}, std::nullopt, &*dir_);
    ASSERT_TRUE(budgets.ok()) << budgets.status();
    EXPECT_TRUE(BudgetExists(*dir_, workload_, kUuid0));
    EXPECT_TRUE(BudgetExists(*dir_, workload_, kUuid1));
    EXPECT_EQ(WorkloadBudgets::MemoryInUse(*dir_, workload_, kUuid0), 0u);
    EXPECT_EQ(LimitSeen(*dir_, workload_, kUuid1), kGiB);
  }
  EXPECT_FALSE(BudgetExists(*dir_, workload_, kUuid0));  // Gone with the object.
  EXPECT_FALSE(BudgetExists(*dir_, workload_, kUuid1));

  // The second GPU's limit is refused: the first GPU's budget does not stay.
  StatusOr<WorkloadBudgets> half = WorkloadBudgets::Create(
      *dir_, workload_, {{kUuid0, kGiB, 0}, {kUuid1, 0, 0}}, std::nullopt, &*dir_);
  EXPECT_FALSE(half.ok());
  EXPECT_FALSE(BudgetExists(*dir_, workload_, kUuid0));

  // Kept budgets outlive the object until Remove.
  {
    StatusOr<WorkloadBudgets> kept =
        WorkloadBudgets::Create(*dir_, workload_, {{kUuid0, kGiB, 0}}, std::nullopt, &*dir_);
    ASSERT_TRUE(kept.ok()) << kept.status();
    kept->Keep();
  }
  EXPECT_TRUE(BudgetExists(*dir_, workload_, kUuid0));
  WorkloadBudgets::Remove(*dir_, workload_, {kUuid0, kUuid1});
  EXPECT_FALSE(BudgetExists(*dir_, workload_, kUuid0));
  EXPECT_EQ(WorkloadBudgets::MemoryInUse(*dir_, workload_, kUuid0), 0u);
}

TEST_F(WorkloadBudgetsTest, AnotherUserCanNeitherPlantNorBlockABudget) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  // The attacks on the old names in /dev/shm (issue 16): a 70 GiB budget of the attacker's under
  // the name the job's budget would get, and a directory under the next one.
  char planted[160], blocked[160];
  ASSERT_TRUE(limiter::BudgetName(workload_.c_str(), kUuid0, planted, sizeof(planted)));
  ASSERT_TRUE(limiter::BudgetName(workload_.c_str(), kUuid1, blocked, sizeof(blocked)));
  ASSERT_TRUE(AsAnotherUser([&] {
    limiter::Budget big;
    char err[400];
    bool ok = big.Open(planted, 70 * kGiB, 0, err, sizeof(err)) &&
              mkdir((std::string("/dev/shm") + blocked).c_str(), 0777) == 0;
    big.Close();
    return ok;
  }));
  // ... and in the launcher's directory the other user cannot create a name at all.
  const std::string path = dir_->path() + "/" + (planted + 1);
  EXPECT_TRUE(AsAnotherUser([&] {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0666);
    return fd < 0 && errno == EACCES;
  }));

  StatusOr<WorkloadBudgets> budgets =
      WorkloadBudgets::Create(*dir_, workload_, {{kUuid0, kGiB, 0}, {kUuid1, 2 * kGiB, 0}},
                              WorkloadBudgets::Owner{1234, 5678}, &*dir_);
  ASSERT_TRUE(budgets.ok()) << budgets.status();
  EXPECT_EQ(LimitSeen(*dir_, workload_, kUuid0), kGiB);
  EXPECT_EQ(LimitSeen(*dir_, workload_, kUuid1), 2 * kGiB);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);  // Handed to the workload's user, and to it only.
  EXPECT_EQ(st.st_gid, 5678u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  limiter::Budget::Unlink(planted);
  rmdir((std::string("/dev/shm") + blocked).c_str());
}

TEST_F(WorkloadBudgetsTest, TheWorkloadsUserCannotTruncateABudgetWhileTheLauncherWritesIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  // The user of the budget truncates it as soon as it can open it, again and again. Were it
  // handed over before it is written, the launcher's writes through its mapping would die of
  // SIGBUS.
  char name[160];
  ASSERT_TRUE(limiter::BudgetName(workload_.c_str(), kUuid0, name, sizeof(name)));
  const std::string path = dir_->path() + name;
  pid_t truncator = fork();
  if (truncator == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // Gone with the test, however it ends.
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    for (;;) {
      int fd = open(path.c_str(), O_RDWR);
      if (fd >= 0) {
        (void)!ftruncate(fd, 0);
        close(fd);
      }
    }
  }
  for (int i = 0; i < 300; ++i) {
    StatusOr<WorkloadBudgets> budgets = WorkloadBudgets::Create(
        *dir_, workload_, {{kUuid0, kGiB, 0}}, WorkloadBudgets::Owner{65534, 65534}, &*dir_);
    ASSERT_TRUE(budgets.ok()) << budgets.status();
  }
  kill(truncator, SIGKILL);
  waitpid(truncator, nullptr, 0);
}

TEST_F(WorkloadBudgetsTest, ABudgetIsNeverMadeOverAnExistingName) {
  char name[160], err[400];
  ASSERT_TRUE(limiter::BudgetName(workload_.c_str(), kUuid0, name, sizeof(name)));
  int fd = openat(dir_->fd(), name + 1, O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_FALSE(limiter::Budget::CreateAt(dir_->fd(), name + 1, kGiB, 0, -1, -1, err, sizeof(err)));
  EXPECT_NE(std::string(err).find("File exists"), std::string::npos) << err;
  ASSERT_EQ(symlinkat("/etc/passwd", dir_->fd(), "link"), 0);
  EXPECT_FALSE(limiter::Budget::CreateAt(dir_->fd(), "link", kGiB, 0, -1, -1, err, sizeof(err)));
}

TEST_F(WorkloadBudgetsTest, ReadingUsageNeverBlocksOnWhatTheWorkloadPutThere) {
  // A workload replaced its budget with a FIFO, or truncated it: the reader (the service, as
  // root, for `gpufrac status` and /metrics) gets 0 at once instead of hanging.
  char name[160];
  ASSERT_TRUE(limiter::BudgetName(workload_.c_str(), kUuid0, name, sizeof(name)));
  ASSERT_EQ(mkfifoat(dir_->fd(), name + 1, 0666), 0);
  alarm(10);  // A blocking open would end the test here.
  EXPECT_EQ(WorkloadBudgets::MemoryInUse(*dir_, workload_, kUuid0), 0u);
  char err[400];
  limiter::Budget budget;
  EXPECT_FALSE(budget.AttachIn(dir_->path().c_str(), name + 1, err, sizeof(err)));
  alarm(0);
  unlinkat(dir_->fd(), name + 1, 0);
  int fd = openat(dir_->fd(), name + 1, O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);  // Big enough to hold the words, but not a budget's size.
  close(fd);
  EXPECT_EQ(WorkloadBudgets::MemoryInUse(*dir_, workload_, kUuid0), 0u);
}

void ExpectDeviceNodesDenied(WorkloadCgroup::Kind kind) {
  const std::string name = "launch-test-" + std::to_string(getpid());
  StatusOr<WorkloadCgroup> cgroup = WorkloadCgroup::Create(kind, name, {{kNvidiaMajor, 7}});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  // Nodes made here: no driver is behind them, so outside the cgroup opening one says ENXIO.
  const std::string dir = fs::temp_directory_path() / ("nodes-" + std::to_string(getpid()));
  fs::create_directories(dir);
  ASSERT_EQ(mknod((dir + "/nvidia7").c_str(), S_IFCHR | 0666, makedev(kNvidiaMajor, 7)), 0);
  ASSERT_EQ(mknod((dir + "/nvidia8").c_str(), S_IFCHR | 0666, makedev(kNvidiaMajor, 8)), 0);
  int fd = open((dir + "/nvidia7").c_str(), O_RDONLY | O_NONBLOCK);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, ENXIO);
  // Inside: the other job's GPU is refused, its own is not.
  std::vector<int> inside = OpenErrorsInside(*cgroup, {dir + "/nvidia7", dir + "/nvidia8"});
  ASSERT_EQ(inside.size(), 2u);
  EXPECT_EQ(inside[0], EPERM);
  EXPECT_EQ(inside[1], ENXIO);
  EXPECT_TRUE(cgroup->KillAll(std::chrono::seconds(5)));
  EXPECT_TRUE(cgroup->Remove());
  fs::remove_all(dir);
}

TEST(WorkloadCgroupTest, AJobCannotOpenTheGpusItWasNotGivenV1) {
  if (geteuid() != 0 || WorkloadCgroup::Available() != WorkloadCgroup::Kind::kDevicesV1) {
    GTEST_SKIP() << "needs root and the cgroup v1 devices controller";
  }
  ExpectDeviceNodesDenied(WorkloadCgroup::Kind::kDevicesV1);
}

TEST(WorkloadCgroupTest, AJobCannotOpenTheGpusItWasNotGivenV2) {
  if (geteuid() != 0 || (!fs::exists("/sys/fs/cgroup/unified/cgroup.procs") &&
                          !fs::exists("/sys/fs/cgroup/cgroup.controllers"))) {
    GTEST_SKIP() << "needs root and a cgroup v2 hierarchy";
  }
  ExpectDeviceNodesDenied(WorkloadCgroup::Kind::kUnifiedV2);
}

TEST(WorkloadCgroupTest, KillsEveryProcessOfTheWorkloadEvenOnesThatLeftItsSession) {
  std::optional<WorkloadCgroup::Kind> kind = WorkloadCgroup::Available();
  if (!kind) GTEST_SKIP() << "needs root and a cgroup hierarchy";
  StatusOr<WorkloadCgroup> cgroup =
      WorkloadCgroup::Create(*kind, "launch-kill-" + std::to_string(getpid()), {});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    if (!cgroup->Join(getpid()).ok()) _exit(3);
    pid_t grandchild = fork();
    if (grandchild == 0) {
      setsid();  // Its own session and process group: what killing a group would miss.
      for (;;) pause();
    }
    (void)!write(out[1], &grandchild, sizeof(grandchild));
    _exit(0);
  }
  close(out[1]);
  pid_t grandchild = 0;
  ASSERT_EQ(read(out[0], &grandchild, sizeof(grandchild)),
            static_cast<ssize_t>(sizeof(grandchild)));
  close(out[0]);
  waitpid(child, nullptr, 0);
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(cgroup->Members(), std::vector<pid_t>{grandchild});
  EXPECT_TRUE(cgroup->KillAll(std::chrono::seconds(5)));
  EXPECT_TRUE(cgroup->Members().empty());
  EXPECT_TRUE(cgroup->Remove());
  EXPECT_FALSE(WorkloadCgroup::Find("launch-kill-" + std::to_string(getpid())).has_value());
}

// What the node service holds a workload over its compute share with: a frozen workload stops
// (no signal it sends itself resumes it), resumes when thawed, and can still be killed frozen.
void ExpectFreezeStopsTheWorkload(WorkloadCgroup::Kind kind) {
  const std::string name = "launch-freeze-" + std::to_string(getpid());
  StatusOr<WorkloadCgroup> cgroup = WorkloadCgroup::Create(kind, name, {});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  auto* counter = static_cast<std::atomic<uint64_t>*>(
      mmap(nullptr, sizeof(std::atomic<uint64_t>), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(counter, MAP_FAILED);
  counter->store(0);
  pid_t child = fork();
  if (child == 0) {
    if (!cgroup->Join(getpid()).ok()) _exit(3);
    for (;;) {
      counter->fetch_add(1);
      kill(getpid(), SIGCONT);  // what a workload would try
    }
  }
  auto advances = [&] {
    const uint64_t before = counter->load();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return counter->load() - before;
  };
  while (counter->load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(cgroup->Freeze(true).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // v1 freezes asynchronously
  EXPECT_EQ(advances(), 0u);
  kill(child, SIGCONT);
  EXPECT_EQ(advances(), 0u);
  ASSERT_TRUE(cgroup->Freeze(false).ok());
  EXPECT_GT(advances(), 0u);
  ASSERT_TRUE(cgroup->Freeze(true).ok());
  EXPECT_TRUE(cgroup->KillAll(std::chrono::seconds(5)));
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(cgroup->Remove());
  EXPECT_FALSE(WorkloadCgroup::Find(name).has_value());
  EXPECT_FALSE(fs::exists("/sys/fs/cgroup/freezer/gpufrac/" + name));
  munmap(counter, sizeof(std::atomic<uint64_t>));
}

TEST(WorkloadCgroupTest, AFrozenWorkloadStopsUntilThawedV1) {
  if (geteuid() != 0 || WorkloadCgroup::Available() != WorkloadCgroup::Kind::kDevicesV1 ||
      !fs::exists("/sys/fs/cgroup/freezer")) {
    GTEST_SKIP() << "needs root and the cgroup v1 devices and freezer controllers";
  }
  ExpectFreezeStopsTheWorkload(WorkloadCgroup::Kind::kDevicesV1);
}

TEST(WorkloadCgroupTest, AFrozenWorkloadStopsUntilThawedV2) {
  if (geteuid() != 0 || (!fs::exists("/sys/fs/cgroup/unified/cgroup.procs") &&
                          !fs::exists("/sys/fs/cgroup/cgroup.controllers"))) {
    GTEST_SKIP() << "needs root and a cgroup v2 hierarchy";
  }
  ExpectFreezeStopsTheWorkload(WorkloadCgroup::Kind::kUnifiedV2);
}

TEST(BudgetDirTest, OnlyADirectoryOfTheLaunchersOwnIsUsed) {
  StatusOr<BudgetDir> made = BudgetDir::Make(0711);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st;
  ASSERT_EQ(stat(made->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  EXPECT_EQ(made->path().rfind("/dev/shm/gpufrac-", 0), 0u);
  EXPECT_TRUE(BudgetDir::Open(made->path()).ok());

  // Writable by others, a link to it, a file: refused.
  ASSERT_EQ(chmod(made->path().c_str(), 0777), 0);
  EXPECT_NE(
      BudgetDir::Open(made->path()).status().message().find("is writable by its group or others"),
      std::string::npos);
  ASSERT_EQ(chmod(made->path().c_str(), 0711), 0);
  const std::string link = made->path() + "-link";
  ASSERT_EQ(symlink(made->path().c_str(), link.c_str()), 0);
  EXPECT_EQ(BudgetDir::Open(link).status().code(), StatusCode::kFailedPrecondition);
  unlink(link.c_str());
  if (geteuid() == 0) {
    // Another user's directory.
    ASSERT_EQ(chown(made->path().c_str(), 65534, 65534), 0);
    EXPECT_NE(BudgetDir::Open(made->path()).status().message().find("belongs to uid 65534"),
              std::string::npos);
    ASSERT_EQ(chown(made->path().c_str(), 0, 0), 0);
  }
  const std::string path = made->path();
  made->RemoveAll();
  EXPECT_FALSE(fs::exists(path));
}

TEST(BudgetDirTest, TheServiceKeepsItsDirectoryAcrossRestartsButNeverAdoptsAnother) {
  const std::string state =
      fs::temp_directory_path() / ("budget-dir-test-" + std::to_string(getpid()));
  fs::create_directories(state);
  const std::string record = state + "/budget-dir";
  StatusOr<BudgetDir> first = BudgetDir::ForService(record);
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<BudgetDir> again = BudgetDir::ForService(record);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->path(), first->path());

  // The recorded directory was replaced by one others can write (or gone, after a reboot): a
  // new one is made and recorded.
  ASSERT_EQ(chmod(first->path().c_str(), 0777), 0);
  StatusOr<BudgetDir> fresh = BudgetDir::ForService(record);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(fresh->path(), first->path());
  std::ifstream in(record);
  std::string recorded;
  std::getline(in, recorded);
  EXPECT_EQ(recorded, fresh->path());
  first->RemoveAll();
  fresh->RemoveAll();
  fs::remove_all(state);
}

}  // namespace
}  // namespace gpufrac::launch
