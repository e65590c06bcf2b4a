// The device nodes a job's cgroup closes to it: other GPUs, and on a MIG GPU every capability
// node but its own instance's, read from the driver's tables the way the service reads them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cgroup_probe.h"
#include "machine/nvidia_caps.h"
#include "node/device_fence.h"

namespace gpufrac::node {
namespace {

namespace fs = std::filesystem;

// A major no driver here registers (checked against /proc/devices by the tests that open nodes).
constexpr unsigned kCapsMajor = 240;

class DeviceFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("fence-" + std::to_string(getpid()));
    fs::create_directories(root_ + "/driver/nvidia-caps");
    std::ofstream(root_ + "/devices") << "Character devices:\n  1 mem\n195 nvidia\n"
                                      << kCapsMajor << " nvidia-caps\n\nBlock devices:\n"
                                      << "241 nvidia-caps-imposter\n";
    // As the driver lists them: config, monitor, then per GPU minor, GPU instance and compute
    // instance. GPU instance 1 and 11 on GPU 0 test that "gi1/" does not open "gi11/".
    std::ofstream(root_ + "/driver/nvidia-caps/mig-minors")
        << "config 1\nmonitor 2\n"
        << "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi1/ci1/access 14\n"
        << "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"
        << "gpu0/gi11/access 111\ngpu0/gi11/ci0/access 112\n"
        << "gpu1/gi1/access 131\ngpu1/gi1/ci0/access 132\n"
        << "not a line\n";
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string root_;
};

std::vector<unsigned> Minors(const std::vector<launch::DeviceNode>& nodes, unsigned major) {
  std::vector<unsigned> minors;
  for (const launch::DeviceNode& n : nodes) {
    if (n.major == major) minors.push_back(n.minor);
  }
  std::sort(minors.begin(), minors.end());
  return minors;
}

TEST_F(DeviceFenceTest, ReadsTheDriversCapabilityTables) {
  machine::NvidiaCaps caps = machine::ReadNvidiaCaps(root_);
  EXPECT_EQ(caps.major, static_cast<int>(kCapsMajor));
  EXPECT_EQ(caps.minors.size(), 11u);  // the malformed line is skipped
  EXPECT_EQ(caps.minors.at("config"), 1u);
  EXPECT_EQ(caps.minors.at("gpu0/gi1/ci1/access"), 14u);
  // No driver: nothing to fence, and no error.
  machine::NvidiaCaps none = machine::ReadNvidiaCaps(root_ + "/absent");
  EXPECT_EQ(none.major, -1);
  EXPECT_TRUE(none.minors.empty());
}

TEST_F(DeviceFenceTest, AMigJobKeepsOnlyItsOwnInstancesCapabilities) {
  machine::NvidiaCaps caps = machine::ReadNvidiaCaps(root_);
  auto denied = DeniedDevices({{.minor = 0, .gpu_instance = 1}}, caps);
  ASSERT_TRUE(denied.has_value());
  // Its GPU's node is open, every other GPU node closed.
  std::vector<unsigned> gpus = Minors(*denied, launch::kNvidiaMajor);
  EXPECT_EQ(gpus.size(), launch::kNvidiaFirstControlMinor - 1);
  EXPECT_EQ(std::count(gpus.begin(), gpus.end(), 0u), 0);
  // Config, monitor and its GPU's other instances closed; its instance and that instance's
  // compute instances open; GPU 1's capabilities need /dev/nvidia1, closed already.
  EXPECT_EQ(Minors(*denied, kCapsMajor), (std::vector<unsigned>{1, 2, 21, 22, 111, 112}));
}

TEST_F(DeviceFenceTest, AWholeGpuJobGetsNoMigCapability) {
  machine::NvidiaCaps caps = machine::ReadNvidiaCaps(root_);
  auto denied = DeniedDevices({{.minor = 1, .gpu_instance = std::nullopt}}, caps);
  ASSERT_TRUE(denied.has_value());
  EXPECT_EQ(Minors(*denied, kCapsMajor), (std::vector<unsigned>{1, 2, 131, 132}));
  // Without capability nodes only GPU nodes are fenced; with a GPU of unknown minor, nothing.
  EXPECT_TRUE(
      Minors(*DeniedDevices({{.minor = 1, .gpu_instance = std::nullopt}}, {}), kCapsMajor).empty());
  EXPECT_FALSE(DeniedDevices({{.minor = 1, .gpu_instance = std::nullopt},
                              {.minor = -1, .gpu_instance = std::nullopt}},
                             caps)
                   .has_value());
}

// The attack: a MIG job opening another instance's capability node, or the config node that
// would let it destroy its neighbours' instances.
TEST_F(DeviceFenceTest, AMigJobCannotOpenAnotherInstancesCapabilityNode) {
  std::optional<launch::WorkloadCgroup::Kind> kind = launch::WorkloadCgroup::Available();
  if (!kind) GTEST_SKIP() << "needs root and a cgroup hierarchy";
  const std::string nodes = root_ + "/dev";
  fs::create_directories(nodes);
  for (unsigned minor : {1u, 12u, 13u, 21u}) {
    ASSERT_EQ(mknod((nodes + "/nvidia-cap" + std::to_string(minor)).c_str(), S_IFCHR | 0666,
                    makedev(kCapsMajor, minor)),
              0);
  }
  int fd = open((nodes + "/nvidia-cap21").c_str(), O_RDONLY | O_NONBLOCK);
  if (fd >= 0 || errno != ENXIO) {
    if (fd >= 0) close(fd);
    GTEST_SKIP() << "a driver here owns major " << kCapsMajor;
  }
  auto denied = DeniedDevices({{.minor = 0, .gpu_instance = 1}}, machine::ReadNvidiaCaps(root_));
  ASSERT_TRUE(denied.has_value());
  auto cgroup =
      launch::WorkloadCgroup::Create(*kind, "fence-test-" + std::to_string(getpid()), *denied);
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  std::vector<int> errors =
      launch::OpenErrorsInside(*cgroup, {nodes + "/nvidia-cap1", nodes + "/nvidia-cap12",
                                         nodes + "/nvidia-cap13", nodes + "/nvidia-cap21"});
  // EPERM: the cgroup refused; ENXIO: allowed through to the (absent) driver.
  EXPECT_EQ(errors, (std::vector<int>{EPERM, ENXIO, ENXIO, EPERM}));
  EXPECT_TRUE(cgroup->KillAll(std::chrono::seconds(5)));
  EXPECT_TRUE(cgroup->Remove());
}

}  // namespace
}  // namespace gpufrac::node
