// The extern step's fence (slurm/extern_step.h) on real cgroup v1 hierarchies made as Slurm 22.05
// makes them (devices/slurm_<node>/uid_<uid>/job_<id>/step_extern), with /dev/null's major (1)
// standing for NVIDIA's: no driver is loaded here, and what the fence does is the same for any
// character major.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launch/cgroup.h"
#include "slurm/extern_step.h"
#include "slurm/job_processes.h"

namespace gpufrac::slurm {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr char kDevices[] = "/sys/fs/cgroup/devices";
constexpr char kFreezer[] = "/sys/fs/cgroup/freezer";
constexpr unsigned kMemMajor = 1;  // /dev/null, /dev/zero

class ExternStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !fs::exists(std::string(kDevices) + "/devices.deny")) {
      GTEST_SKIP() << "needs root and cgroup v1's devices controller";
    }
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (const std::string& mount : {std::string(kDevices), std::string(kFreezer)}) {
      const std::string root = mount + "/slurm_" + node_;
      std::vector<fs::path> dirs;
      std::error_code ec;
      for (const auto& entry : fs::recursive_directory_iterator(root, ec)) {
        if (entry.is_directory()) dirs.push_back(entry.path());
      }
      std::sort(dirs.rbegin(), dirs.rend());
      for (const fs::path& dir : dirs) rmdir(dir.c_str());
      rmdir(root.c_str());
    }
  }

  // Job `job`'s extern step cgroup under `mount`, made as Slurm makes it.
  std::string ExternCgroup(const std::string& mount, uint32_t job) const {
    const std::string dir =
        mount + "/slurm_" + node_ + "/uid_0/job_" + std::to_string(job) + "/step_extern";
    fs::create_directories(dir);
    return dir;
  }

  // A process in cgroup `dir` that holds /dev/null open (`holds`) or not, and sleeps until killed.
  pid_t Adopted(const std::string& dir, bool holds) {
    int ready[2];
    EXPECT_EQ(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      std::ofstream(dir + "/cgroup.procs") << getpid() << std::endl;
      // Nothing inherited (the test's stdin may be /dev/null): only what it opens itself.
      for (int fd = 0; fd < 1024; ++fd) {
        if (fd != ready[1]) close(fd);
      }
      if (holds && open("/dev/null", O_RDONLY) < 0) _exit(3);
      (void)!write(ready[1], "x", 1);
      for (;;) pause();
    }
    close(ready[1]);
    char byte = 0;
    EXPECT_EQ(read(ready[0], &byte, 1), 1) << "the adopted process did not start";
    close(ready[0]);
    children_.push_back(pid);
    return pid;
  }

  // Whether a process newly put into cgroup `dir` can open /dev/null: 0, or the errno.
  static int OpenErrorIn(const std::string& dir) {
    pid_t pid = fork();
    if (pid == 0) {
      std::ofstream(dir + "/cgroup.procs") << getpid() << std::endl;
      _exit(open("/dev/null", O_RDONLY) < 0 ? errno : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Whether `pid` was ended by SIGKILL (reaped), waiting up to 2 s.
  bool Killed(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        children_.erase(std::remove(children_.begin(), children_.end(), pid), children_.end());
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      }
      usleep(10000);
    }
    return false;
  }

  bool Runs(pid_t pid) const { return kill(pid, 0) == 0 && waitpid(pid, nullptr, WNOHANG) == 0; }

  const std::string node_ = "gfx" + std::to_string(getpid());
  std::vector<pid_t> children_;
};

// An ssh session adopted into the extern step before the fence and holding a device open is
// ended; one holding none is left alone; and no process of the step opens one afterwards.
TEST_F(ExternStepTest, TheExternStepOpensNoDeviceAndItsHoldersAreEnded) {
  const std::string dir = ExternCgroup(kDevices, 41);
  ASSERT_EQ(OpenErrorIn(dir), 0) << "the devices were not open to the step before the fence";
  const pid_t holder = Adopted(dir, /*holds=*/true);
  const pid_t shell = Adopted(dir, /*holds=*/false);

  StatusOr<ExternFence> fence =
      FenceExternStep(41, node_, {kDevices}, {kMemMajor}, milliseconds(5000));
  ASSERT_TRUE(fence.ok()) << fence.status().message();
  EXPECT_EQ(fence->hierarchies, 1);
  EXPECT_EQ(fence->ended, 1);
  EXPECT_TRUE(Killed(holder));
  EXPECT_TRUE(Runs(shell));
  EXPECT_EQ(OpenErrorIn(dir), EPERM);
  // Below the step too (a cgroup its user made there), as the kernel carries the denial down.
  fs::create_directories(dir + "/mine");
  EXPECT_EQ(OpenErrorIn(dir + "/mine"), EPERM);
}

// Another job's extern step and another node's job of the same id are not touched.
TEST_F(ExternStepTest, OnlyThatJobsExternStepOnThisNodeIsFenced) {
  const std::string fenced = ExternCgroup(kDevices, 42);
  const std::string other_job = ExternCgroup(kDevices, 43);
  const std::string other_node =
      std::string(kDevices) + "/slurm_" + node_ + "y/uid_0/job_42/step_extern";
  fs::create_directories(other_node);
  StatusOr<ExternFence> fence =
      FenceExternStep(42, node_, {kDevices}, {kMemMajor}, milliseconds(5000));
  ASSERT_TRUE(fence.ok()) << fence.status().message();
  EXPECT_EQ(OpenErrorIn(fenced), EPERM);
  EXPECT_EQ(OpenErrorIn(other_job), 0);
  EXPECT_EQ(OpenErrorIn(other_node), 0);
  for (const std::string& dir :
       {other_node, std::string(kDevices) + "/slurm_" + node_ + "y/uid_0/job_42",
        std::string(kDevices) + "/slurm_" + node_ + "y/uid_0",
        std::string(kDevices) + "/slurm_" + node_ + "y"}) {
    rmdir(dir.c_str());
  }
}

// Where the step has no cgroup in a devices hierarchy, the fence says it denied nothing (the
// plugin reports it to the administrator); holders it can find are still ended.
TEST_F(ExternStepTest, WithoutADevicesHierarchyTheFenceSaysItDeniedNothing) {
  if (!fs::exists(kFreezer)) GTEST_SKIP() << "needs cgroup v1's freezer";
  const std::string dir = ExternCgroup(kFreezer, 44);
  const pid_t holder = Adopted(dir, /*holds=*/true);
  StatusOr<ExternFence> fence =
      FenceExternStep(44, node_, {kFreezer}, {kMemMajor}, milliseconds(5000));
  ASSERT_TRUE(fence.ok()) << fence.status().message();
  EXPECT_EQ(fence->hierarchies, 0);
  EXPECT_TRUE(Killed(holder));
  StatusOr<ExternFence> none =
      FenceExternStep(45, node_, {kDevices}, {kMemMajor}, milliseconds(100));
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->hierarchies, 0);
  EXPECT_EQ(none->ended, 0);
}

// The numbered majors come from /proc/devices' character section (nvidia-uvm's is set when the
// driver loads); a block device of the name is not one.
TEST(NvidiaDeviceMajors, AreTheDriversAndThoseNamedNvidiaInProcDevices) {
  const std::string path = ::testing::TempDir() + "/proc-devices-" + std::to_string(getpid());
  std::ofstream(path) << "Character devices:\n  1 mem\n 10 misc\n195 nvidia-frontend\n"
                         "234 nvidia-uvm\n237 nvidia-caps\n\nBlock devices:\n259 nvidia-fake\n";
  EXPECT_EQ(NvidiaDeviceMajors(path), (std::vector<unsigned>{launch::kNvidiaMajor, 234, 237}));
  fs::remove(path);
  EXPECT_EQ(NvidiaDeviceMajors(path), std::vector<unsigned>{launch::kNvidiaMajor});
}

}  // namespace
}  // namespace gpufrac::slurm
