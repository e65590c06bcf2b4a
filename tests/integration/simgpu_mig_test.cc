// Simulated MIG: MIG mode (and its refusal while the GPU is in use), the profile and placement
// tables of every MIG model, GPU and compute instance rules with NVML's error codes, MIG device
// handles and UUIDs, CUDA processes running in a MIG device (CUDA_VISIBLE_DEVICES=MIG-...) and
// NVML's listing of them (nvmlDeviceGetComputeRunningProcesses).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gpu/mig_catalogue.h"
#include "harness.h"
#include "simgpu/core/config.h"
#include "simgpu/core/mig_state.h"
#include "simgpu/core/uuid.h"
#include "simgpu/core/visible_devices.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using SimGpuMigTest = SimGpuTest;
using gpufrac::testing::ProbePath;
using gpufrac::testing::RunCommand;
using gpufrac::testing::RunResult;

#define ASSERT_NVML(expr) ASSERT_EQ(::gpufrac::abi::NVML_SUCCESS, (expr))
#define EXPECT_NVML(expr) EXPECT_EQ(::gpufrac::abi::NVML_SUCCESS, (expr))

abi::nvmlDevice_t Device(unsigned int index) {
  abi::nvmlDevice_t device = nullptr;
  EXPECT_NVML(nvmlDeviceGetHandleByIndex_v2(index, &device));
  return device;
}

const gpu::MigProfile& Profile(std::string_view model, std::string_view name) {
  const gpu::MigModel* mig = gpu::FindMigModel(model);
  const gpu::MigProfile* profile = mig != nullptr ? gpu::FindMigProfile(*mig, name) : nullptr;
  if (profile == nullptr) {
    ADD_FAILURE() << model << " has no " << name;
    static const gpu::MigProfile kNone;
    return kNone;
  }
  return *profile;
}

abi::nvmlReturn_t Create(abi::nvmlDevice_t device, const gpu::MigProfile& profile, int start,
                         abi::nvmlGpuInstance_t* instance) {
  const abi::nvmlGpuInstancePlacement_t placement{static_cast<unsigned int>(start),
                                                  static_cast<unsigned int>(profile.memory_slices)};
  return nvmlDeviceCreateGpuInstanceWithPlacement(device, profile.profile_id, &placement, instance);
}

abi::nvmlGpuInstanceInfo_t Info(abi::nvmlGpuInstance_t instance) {
  abi::nvmlGpuInstanceInfo_t info{};
  EXPECT_NVML(nvmlGpuInstanceGetInfo(instance, &info));
  return info;
}

// The compute instance covering the whole GPU instance.
abi::nvmlComputeInstance_t CreateFullCompute(abi::nvmlGpuInstance_t instance, int slices) {
  const unsigned int selector = slices == 7   ? abi::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE
                                : slices == 4 ? abi::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE
                                : slices == 3 ? abi::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE
                                : slices == 2 ? abi::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE
                                              : abi::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
  abi::nvmlComputeInstanceProfileInfo_v2_t info{};
  info.version = abi::kNvmlComputeInstanceProfileInfoV2Version;
  EXPECT_NVML(nvmlGpuInstanceGetComputeInstanceProfileInfoV(
      instance, selector, abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info));
  abi::nvmlComputeInstance_t compute = nullptr;
  EXPECT_NVML(nvmlGpuInstanceCreateComputeInstance(instance, info.id, &compute));
  return compute;
}

// The UUID of the device's MIG device `index`.
std::string MigUuidAt(abi::nvmlDevice_t device, unsigned int index) {
  abi::nvmlDevice_t mig = nullptr;
  EXPECT_NVML(nvmlDeviceGetMigDeviceHandleByIndex(device, index, &mig));
  char uuid[abi::kNvmlDeviceUuidV2BufferSize] = {};
  EXPECT_NVML(nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)));
  return uuid;
}

std::map<std::string, std::string> ProbeEnv(const std::string& visible) {
  return {{"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR}, {"CUDA_VISIBLE_DEVICES", visible}};
}

TEST(SimGpuMigConfigTest, ParsesTheMigOption) {
  MachineConfig config;
  std::string error;
  ASSERT_TRUE(ParseMachineConfig("2xA100-40GB:mig, 1xL4,h100-80gb:MIG", &config, &error)) << error;
  ASSERT_EQ(4, config.device_count);
  EXPECT_TRUE(config.mig[0] && config.mig[1] && config.mig[3]);
  EXPECT_FALSE(config.mig[2]);
  EXPECT_EQ("2xA100-40GB:mig,1xL4,1xH100-80GB:mig", FormatMachineConfig(config));
  EXPECT_FALSE(ParseMachineConfig("1xL4:mig", &config, &error));
  EXPECT_NE(std::string::npos, error.find("has no MIG")) << error;
  EXPECT_FALSE(ParseMachineConfig("1xA30-24GB:fast", &config, &error));
  EXPECT_NE(std::string::npos, error.find("unknown option")) << error;
}

TEST(SimGpuMigConfigTest, VisibleDevicesWithMig) {
  DeviceNames names;
  names.gpu_uuids = {"GPU-aaaa", "GPU-bbbb", "GPU-cccc"};
  names.mig_enabled = {false, true, true};
  names.migs = {{.physical = 1, .uuid = "MIG-1111"},
                {.physical = 1, .uuid = "MIG-1222"},
                {.physical = 2, .uuid = "MIG-3333"}};
  auto refs = ParseVisibleDevices(nullptr, names);  // whole GPUs and the first MIG device
  ASSERT_EQ(2u, refs.size());
  EXPECT_EQ(0, refs[0].physical);
  EXPECT_EQ(-1, refs[0].mig);
  EXPECT_EQ(0, refs[1].mig);
  refs = ParseVisibleDevices("MIG-12,0", names);
  ASSERT_EQ(2u, refs.size());
  EXPECT_EQ(1, refs[0].mig);
  EXPECT_EQ(0, refs[1].physical);
  EXPECT_TRUE(ParseVisibleDevices("MIG-1", names).empty());               // ambiguous prefix
  EXPECT_EQ(1u, ParseVisibleDevices("MIG-3333,MIG-1111", names).size());  // one MIG device
  EXPECT_EQ(1u, ParseVisibleDevices("0,1,MIG-3333", names).size());       // GPU 1 is in MIG mode
  EXPECT_TRUE(ParseVisibleDevices("GPU-cccc", names).empty());
}

TEST_F(SimGpuMigTest, ModeOnAndOffAndNotSupportedWithoutMig) {
  RunInChild("1xA100-40GB,1xL4", [] {
    ASSERT_NVML(nvmlInit_v2());
    unsigned int current = 9;
    unsigned int pending = 9;
    abi::nvmlReturn_t activation = abi::NVML_ERROR_UNKNOWN;
    EXPECT_EQ(abi::NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetMigMode(Device(1), &current, &pending));
    EXPECT_EQ(abi::NVML_ERROR_NOT_SUPPORTED, nvmlDeviceSetMigMode(Device(1), 1, &activation));

    abi::nvmlDevice_t a100 = Device(0);
    ASSERT_NVML(nvmlDeviceGetMigMode(a100, &current, &pending));
    EXPECT_EQ(abi::NVML_DEVICE_MIG_DISABLE, current);
    EXPECT_EQ(abi::NVML_DEVICE_MIG_DISABLE, pending);
    abi::nvmlGpuInstanceProfileInfo_t info{};
    EXPECT_EQ(
        abi::NVML_ERROR_NOT_SUPPORTED,
        nvmlDeviceGetGpuInstanceProfileInfo(a100, abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info));
    unsigned int count = 9;
    EXPECT_NVML(nvmlDeviceGetMaxMigDeviceCount(a100, &count));
    EXPECT_EQ(0u, count);
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceSetMigMode(a100, 2, &activation));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceSetMigMode(a100, 1, nullptr));

    ASSERT_NVML(nvmlDeviceSetMigMode(a100, abi::NVML_DEVICE_MIG_ENABLE, &activation));
    EXPECT_EQ(abi::NVML_SUCCESS, activation);
    ASSERT_NVML(nvmlDeviceGetMigMode(a100, &current, &pending));
    EXPECT_EQ(abi::NVML_DEVICE_MIG_ENABLE, current);
    EXPECT_EQ(abi::NVML_DEVICE_MIG_ENABLE, pending);
    EXPECT_NVML(nvmlDeviceGetMaxMigDeviceCount(a100, &count));
    EXPECT_EQ(7u, count);
    EXPECT_NVML(
        nvmlDeviceGetGpuInstanceProfileInfo(a100, abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info));
    EXPECT_EQ(19u, info.id);

    // Disabling waits for the GPU instances to go.
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(a100, Profile("A100-40GB", "3g.20gb"), 4, &instance));
    ASSERT_NVML(nvmlDeviceSetMigMode(a100, abi::NVML_DEVICE_MIG_DISABLE, &activation));
    EXPECT_EQ(abi::NVML_ERROR_IN_USE, activation);
    ASSERT_NVML(nvmlDeviceGetMigMode(a100, &current, &pending));
    EXPECT_EQ(abi::NVML_DEVICE_MIG_ENABLE, current);
    EXPECT_EQ(abi::NVML_DEVICE_MIG_DISABLE, pending);
    ASSERT_NVML(nvmlGpuInstanceDestroy(instance));
    ASSERT_NVML(nvmlDeviceSetMigMode(a100, abi::NVML_DEVICE_MIG_DISABLE, &activation));
    EXPECT_EQ(abi::NVML_SUCCESS, activation);
    ASSERT_NVML(nvmlDeviceGetMigMode(a100, &current, &pending));
    EXPECT_EQ(abi::NVML_DEVICE_MIG_DISABLE, current);
  });
}

TEST_F(SimGpuMigTest, ModeChangeStaysPendingWhileAProcessUsesTheGpu) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_NVML(nvmlInit_v2());
    Helper user([](Helper& self) {
      InitAndUsePrimary();
      self.Send('R');
      self.Receive();  // until told to exit
    });
    ASSERT_EQ('R', user.Receive());
    abi::nvmlReturn_t activation = abi::NVML_SUCCESS;
    ASSERT_NVML(nvmlDeviceSetMigMode(Device(0), abi::NVML_DEVICE_MIG_ENABLE, &activation));
    EXPECT_EQ(abi::NVML_ERROR_IN_USE, activation);
    unsigned int current = 9;
    unsigned int pending = 9;
    ASSERT_NVML(nvmlDeviceGetMigMode(Device(0), &current, &pending));
    EXPECT_EQ(abi::NVML_DEVICE_MIG_DISABLE, current);
    EXPECT_EQ(abi::NVML_DEVICE_MIG_ENABLE, pending);

    user.Send('X');
    EXPECT_EQ(0, user.Wait());
    ASSERT_NVML(nvmlDeviceSetMigMode(Device(0), abi::NVML_DEVICE_MIG_ENABLE, &activation));
    EXPECT_EQ(abi::NVML_SUCCESS, activation);
    ASSERT_NVML(nvmlDeviceGetMigMode(Device(0), &current, &pending));
    EXPECT_EQ(abi::NVML_DEVICE_MIG_ENABLE, current);
  });
}

// Every profile of every MIG model, alone on an empty GPU, at each legal start, and refused at
// every other start; its info, placements, compute instance and MIG device.
TEST_F(SimGpuMigTest, EveryProfileAtEveryLegalStartOnEveryModel) {
  for (const gpu::MigModel& model : gpu::AllMigModels()) {
    SCOPED_TRACE(std::string(model.model->short_name));
    RunInChild("1x" + std::string(model.model->short_name) + ":mig", [&model] {
      ASSERT_NVML(nvmlInit_v2());
      abi::nvmlDevice_t device = Device(0);
      for (int p = 0; p < model.profile_count; ++p) {
        const gpu::MigProfile& profile = model.profiles[p];
        const std::string name = gpu::MigProfileName(model, profile);
        SCOPED_TRACE(name);
        abi::nvmlGpuInstanceProfileInfo_v2_t info{};
        info.version = abi::kNvmlGpuInstanceProfileInfoV2Version;
        ASSERT_NVML(nvmlDeviceGetGpuInstanceProfileInfoV(device, profile.nvml_id, &info));
        EXPECT_EQ(profile.profile_id, info.id);
        EXPECT_EQ(static_cast<unsigned int>(profile.compute_slices), info.sliceCount);
        EXPECT_EQ(static_cast<unsigned int>(profile.max_count), info.instanceCount);
        EXPECT_EQ(profile.memory_bytes >> 20, info.memorySizeMB);
        EXPECT_EQ("MIG " + name, std::string(info.name));

        unsigned int count = 0;
        ASSERT_NVML(
            nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, info.id, nullptr, &count));
        ASSERT_EQ(static_cast<unsigned int>(profile.start_count), count);
        std::vector<abi::nvmlGpuInstancePlacement_t> placements(count);
        ASSERT_NVML(nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, info.id,
                                                                  placements.data(), &count));
        for (int s = 0; s < model.memory_slices; ++s) {
          const bool legal = std::any_of(placements.begin(), placements.end(), [s](const auto& pl) {
            return pl.start == static_cast<unsigned>(s);
          });
          abi::nvmlGpuInstance_t instance = nullptr;
          if (!legal) {
            EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, Create(device, profile, s, &instance))
                << "start " << s;
            continue;
          }
          ASSERT_NVML(Create(device, profile, s, &instance)) << "start " << s;
          const abi::nvmlGpuInstanceInfo_t gi = Info(instance);
          EXPECT_EQ(info.id, gi.profileId);
          EXPECT_EQ(static_cast<unsigned>(s), gi.placement.start);
          EXPECT_EQ(static_cast<unsigned>(profile.memory_slices), gi.placement.size);
          EXPECT_EQ(device, gi.device);
          abi::nvmlComputeInstance_t compute = CreateFullCompute(instance, profile.compute_slices);
          abi::nvmlDevice_t mig = nullptr;
          ASSERT_NVML(nvmlDeviceGetMigDeviceHandleByIndex(device, 0, &mig));
          abi::nvmlMemory_t memory{};
          EXPECT_NVML(nvmlDeviceGetMemoryInfo(mig, &memory));
          EXPECT_EQ(profile.memory_bytes, memory.total);
          char text[abi::kNvmlDeviceNameV2BufferSize];
          EXPECT_NVML(nvmlDeviceGetName(mig, text, sizeof(text)));
          EXPECT_EQ(std::string(model.model->nvml_name) + " MIG " + name, text);
          EXPECT_NVML(nvmlComputeInstanceDestroy(compute));
          EXPECT_NVML(nvmlGpuInstanceDestroy(instance));
        }
      }
    });
    RemoveSharedMachine(name_space());  // the next model gets a machine of its own
  }
}

TEST_F(SimGpuMigTest, OverlapsAndExhaustedCountsAreRefused) {
  RunInChild("1xA100-40GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    const gpu::MigProfile& three = Profile("A100-40GB", "3g.20gb");
    const gpu::MigProfile& four = Profile("A100-40GB", "4g.20gb");
    const gpu::MigProfile& two = Profile("A100-40GB", "2g.10gb");
    const gpu::MigProfile& media = Profile("A100-40GB", "1g.5gb+me");
    abi::nvmlGpuInstance_t a = nullptr;
    abi::nvmlGpuInstance_t b = nullptr;
    abi::nvmlGpuInstance_t c = nullptr;
    ASSERT_NVML(Create(device, three, 0, &a));
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_RESOURCES, Create(device, four, 0, &b));
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_RESOURCES, Create(device, two, 2, &b));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, Create(device, three, 2, &b));  // not a start
    abi::nvmlGpuInstancePlacement_t wrong_size{4, 2};
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceCreateGpuInstanceWithPlacement(device, three.profile_id, &wrong_size, &b));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceCreateGpuInstanceWithPlacement(device, 12345, &wrong_size, &b));
    ASSERT_NVML(Create(device, three, 4, &b));
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_RESOURCES,
              nvmlDeviceCreateGpuInstance(device, three.profile_id, &c));
    unsigned int remaining = 9;
    EXPECT_NVML(nvmlDeviceGetGpuInstanceRemainingCapacity(device, three.profile_id, &remaining));
    EXPECT_EQ(0u, remaining);
    ASSERT_NVML(nvmlGpuInstanceDestroy(a));
    ASSERT_NVML(nvmlGpuInstanceDestroy(b));

    // Only one instance may hold the media engines, wherever it goes.
    ASSERT_NVML(Create(device, media, 0, &a));
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_RESOURCES, Create(device, media, 3, &b));
    ASSERT_NVML(nvmlGpuInstanceDestroy(a));

    // Seven 1g instances fill the GPU; an eighth does not fit.
    std::vector<abi::nvmlGpuInstance_t> small(7);
    for (auto& instance : small) {
      ASSERT_NVML(nvmlDeviceCreateGpuInstance(device, Profile("A100-40GB", "1g.5gb").profile_id,
                                              &instance));
    }
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_RESOURCES,
              nvmlDeviceCreateGpuInstance(device, Profile("A100-40GB", "1g.5gb").profile_id, &c));
    unsigned int count = 0;
    std::vector<abi::nvmlGpuInstance_t> listed(7);
    ASSERT_NVML(nvmlDeviceGetGpuInstances(device, Profile("A100-40GB", "1g.5gb").profile_id,
                                          listed.data(), &count));
    EXPECT_EQ(7u, count);
    for (auto instance : small) EXPECT_NVML(nvmlGpuInstanceDestroy(instance));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlGpuInstanceDestroy(small[0]));  // gone
  });
}

// Without a placement the lowest free legal start is taken; ids follow the placement as on
// NVIDIA drivers (7g 0, 4-slice halves 1-2, 2-slice quarters 3-6, 1-slice eighths 7-14).
TEST_F(SimGpuMigTest, DefaultPlacementIsTheLowestFreeStart) {
  RunInChild("1xH100-80GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    const gpu::MigProfile& one = Profile("H100-80GB", "1g.10gb");
    const gpu::MigProfile& two = Profile("H100-80GB", "2g.20gb");
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(device, two, 2, &instance));
    EXPECT_EQ(4u, Info(instance).id);
    std::vector<unsigned int> starts;
    std::vector<unsigned int> ids;
    for (int i = 0; i < 5; ++i) {
      ASSERT_NVML(nvmlDeviceCreateGpuInstance(device, one.profile_id, &instance));
      starts.push_back(Info(instance).placement.start);
      ids.push_back(Info(instance).id);
    }
    EXPECT_EQ((std::vector<unsigned int>{0, 1, 4, 5, 6}), starts);
    EXPECT_EQ((std::vector<unsigned int>{7, 8, 11, 12, 13}), ids);
    abi::nvmlGpuInstance_t by_id = nullptr;
    EXPECT_NVML(nvmlDeviceGetGpuInstanceById(device, 11, &by_id));
    EXPECT_EQ(4u, Info(by_id).placement.start);
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetGpuInstanceById(device, 9, &by_id));
  });
}

TEST_F(SimGpuMigTest, ComputeInstancesShareTheirGpuInstance) {
  RunInChild("1xA100-80GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    abi::nvmlGpuInstance_t whole = nullptr;
    ASSERT_NVML(Create(device, Profile("A100-80GB", "7g.80gb"), 0, &whole));
    abi::nvmlComputeInstanceProfileInfo_t info{};
    ASSERT_NVML(nvmlGpuInstanceGetComputeInstanceProfileInfo(
        whole, abi::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0, &info));
    EXPECT_EQ(7u, info.instanceCount);
    std::vector<abi::nvmlComputeInstance_t> computes(7);
    for (auto& compute : computes) {
      ASSERT_NVML(nvmlGpuInstanceCreateComputeInstance(whole, info.id, &compute));
    }
    abi::nvmlComputeInstance_t extra = nullptr;
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_RESOURCES,
              nvmlGpuInstanceCreateComputeInstance(whole, info.id, &extra));
    abi::nvmlComputeInstanceInfo_t ci{};
    ASSERT_NVML(nvmlComputeInstanceGetInfo_v2(computes[6], &ci));
    EXPECT_EQ(6u, ci.id);
    EXPECT_EQ(6u, ci.placement.start);
    EXPECT_EQ(whole, ci.gpuInstance);
    unsigned int count = 0;
    EXPECT_NVML(nvmlDeviceGetMaxMigDeviceCount(device, &count));
    EXPECT_EQ(7u, count);
    abi::nvmlDevice_t mig = nullptr;
    ASSERT_NVML(nvmlDeviceGetMigDeviceHandleByIndex(device, 6, &mig));
    char name[abi::kNvmlDeviceNameV2BufferSize];
    ASSERT_NVML(nvmlDeviceGetName(mig, name, sizeof(name)));
    EXPECT_STREQ("NVIDIA A100-SXM4-80GB MIG 1c.7g.80gb", name);
    EXPECT_EQ(abi::NVML_ERROR_IN_USE, nvmlGpuInstanceDestroy(whole));  // it has compute instances
    for (auto compute : computes) EXPECT_NVML(nvmlComputeInstanceDestroy(compute));
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetMigDeviceHandleByIndex(device, 0, &mig));
    EXPECT_NVML(nvmlGpuInstanceDestroy(whole));

    abi::nvmlGpuInstance_t four = nullptr;
    ASSERT_NVML(Create(device, Profile("A100-80GB", "4g.40gb"), 0, &four));
    EXPECT_EQ(abi::NVML_ERROR_NOT_SUPPORTED,
              nvmlGpuInstanceGetComputeInstanceProfileInfo(
                  four, abi::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0, &info));
    EXPECT_EQ(abi::NVML_ERROR_NOT_SUPPORTED,
              nvmlGpuInstanceGetComputeInstanceProfileInfo(
                  four, abi::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, 0, &info));
  });
}

// A process running in a MIG device pins it: neither its compute instance nor its GPU instance
// can be destroyed, and MIG mode cannot be turned off, until the process is gone.
TEST_F(SimGpuMigTest, DestroyIsRefusedWhileAProcessRunsInTheInstance) {
  RunInChild("1xA100-40GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(device, Profile("A100-40GB", "2g.10gb"), 2, &instance));
    abi::nvmlComputeInstance_t compute = CreateFullCompute(instance, 2);
    const std::string uuid = MigUuidAt(device, 0);

    std::string seen;
    const pid_t probe = gpufrac::testing::Start({ProbePath(), "hold", "1073741824"}, ProbeEnv(uuid),
                                                "hold=", &seen);
    ASSERT_GT(probe, 0);
    ASSERT_NE(std::string::npos, seen.find("hold=0")) << seen;
    EXPECT_EQ(abi::NVML_ERROR_IN_USE, nvmlComputeInstanceDestroy(compute));
    EXPECT_EQ(abi::NVML_ERROR_IN_USE, nvmlGpuInstanceDestroy(instance));
    abi::nvmlDevice_t mig = nullptr;
    ASSERT_NVML(nvmlDeviceGetMigDeviceHandleByIndex(device, 0, &mig));
    abi::nvmlMemory_t memory{};
    ASSERT_NVML(nvmlDeviceGetMemoryInfo(mig, &memory));
    EXPECT_GE(memory.used, kGiB);
    abi::nvmlMemory_t whole{};
    ASSERT_NVML(nvmlDeviceGetMemoryInfo(device, &whole));
    EXPECT_EQ(memory.used, whole.used);

    ::kill(probe, SIGKILL);
    ::waitpid(probe, nullptr, 0);
    EXPECT_NVML(nvmlComputeInstanceDestroy(compute));
    EXPECT_NVML(nvmlGpuInstanceDestroy(instance));
  });
}

// The pids nvmlDeviceGetComputeRunningProcesses_v3 lists on `device`, sized by the documented
// protocol (a count query first).
std::vector<abi::nvmlProcessInfo_t> RunningProcesses(abi::nvmlDevice_t device) {
  unsigned int count = 0;
  const abi::nvmlReturn_t sized = nvmlDeviceGetComputeRunningProcesses_v3(device, &count, nullptr);
  if (sized == abi::NVML_SUCCESS) {
    EXPECT_EQ(0u, count);
    return {};
  }
  EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE, sized);
  std::vector<abi::nvmlProcessInfo_t> infos(count);
  EXPECT_NVML(nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos.data()));
  infos.resize(count);
  return infos;
}

std::vector<unsigned int> Pids(const std::vector<abi::nvmlProcessInfo_t>& infos) {
  std::vector<unsigned int> pids;
  for (const abi::nvmlProcessInfo_t& info : infos) pids.push_back(info.pid);
  std::sort(pids.begin(), pids.end());
  return pids;
}

// NVML lists the processes with a CUDA context: on a GPU handle all of them, those in its MIG
// devices with their instance ids (NVML's aggregate view for the parent GPU); on a MIG device
// handle only the ones in it. A GPU without MIG gives 0xFFFFFFFF as instance ids.
TEST_F(SimGpuMigTest, RunningProcessesOnGpuAndMigDeviceHandles) {
  const std::string ns = name_space();
  RunInChild("1xA100-40GB:mig,1xL4", [ns] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t a100 = Device(0);
    abi::nvmlGpuInstance_t small = nullptr;
    ASSERT_NVML(Create(a100, Profile("A100-40GB", "1g.5gb"), 6, &small));
    CreateFullCompute(small, 1);
    abi::nvmlGpuInstance_t medium = nullptr;
    ASSERT_NVML(Create(a100, Profile("A100-40GB", "2g.10gb"), 0, &medium));
    CreateFullCompute(medium, 2);
    // MIG devices are ordered by GPU instance id: 2g.10gb at 0 is id 3, 1g.5gb at 6 is id 13.
    const unsigned int small_id = Info(small).id;
    const unsigned int medium_id = Info(medium).id;
    ASSERT_LT(medium_id, small_id);
    const std::string medium_uuid = MigUuidAt(a100, 0);
    const std::string small_uuid = MigUuidAt(a100, 1);
    abi::nvmlDevice_t small_device = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByUUID(small_uuid.c_str(), &small_device));
    abi::nvmlDevice_t medium_device = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByUUID(medium_uuid.c_str(), &medium_device));
    EXPECT_TRUE(RunningProcesses(a100).empty());
    EXPECT_TRUE(RunningProcesses(small_device).empty());

    std::vector<pid_t> probes;
    for (const std::string& visible : {small_uuid, small_uuid, FormatGpuUuid(DeviceUuid(ns, 1))}) {
      std::string seen;
      probes.push_back(gpufrac::testing::Start({ProbePath(), "hold", "1073741824"},
                                               ProbeEnv(visible), "hold=", &seen));
      ASSERT_GT(probes.back(), 0);
      ASSERT_NE(std::string::npos, seen.find("hold=0")) << seen;
    }
    const std::vector<unsigned int> in_small = {static_cast<unsigned int>(probes[0]),
                                                static_cast<unsigned int>(probes[1])};
    const std::vector<unsigned int> sorted_small =
        in_small[0] < in_small[1] ? in_small : std::vector<unsigned int>{in_small[1], in_small[0]};

    const std::vector<abi::nvmlProcessInfo_t> on_gpu = RunningProcesses(a100);
    EXPECT_EQ(sorted_small, Pids(on_gpu));
    for (const abi::nvmlProcessInfo_t& info : on_gpu) {
      EXPECT_EQ(small_id, info.gpuInstanceId);
      EXPECT_EQ(0u, info.computeInstanceId);
      EXPECT_GE(info.usedGpuMemory, kGiB);  // its allocation and its context
    }
    const std::vector<abi::nvmlProcessInfo_t> on_mig = RunningProcesses(small_device);
    EXPECT_EQ(sorted_small, Pids(on_mig));
    for (const abi::nvmlProcessInfo_t& info : on_mig) EXPECT_EQ(small_id, info.gpuInstanceId);
    EXPECT_TRUE(RunningProcesses(medium_device).empty());
    const std::vector<abi::nvmlProcessInfo_t> on_l4 = RunningProcesses(Device(1));
    ASSERT_EQ(1u, on_l4.size());
    EXPECT_EQ(static_cast<unsigned int>(probes[2]), on_l4[0].pid);
    EXPECT_EQ(abi::kNvmlProcessNoInstanceId, on_l4[0].gpuInstanceId);
    EXPECT_EQ(abi::kNvmlProcessNoInstanceId, on_l4[0].computeInstanceId);

    // _v2 has the same layout; the unversioned (v1) one fills the legacy 16-byte entries.
    abi::nvmlProcessInfo_v2_t v2[4] = {};
    unsigned int count = 4;
    ASSERT_NVML(nvmlDeviceGetComputeRunningProcesses_v2(small_device, &count, v2));
    EXPECT_EQ(2u, count);
    EXPECT_EQ(small_id, v2[1].gpuInstanceId);
    abi::nvmlProcessInfo_v1_t v1[4] = {};
    count = 4;
    ASSERT_NVML(nvmlDeviceGetComputeRunningProcesses(small_device, &count, v1));
    ASSERT_EQ(2u, count);
    EXPECT_EQ(sorted_small, (std::vector<unsigned int>{std::min(v1[0].pid, v1[1].pid),
                                                       std::max(v1[0].pid, v1[1].pid)}));
    EXPECT_GE(v1[0].usedGpuMemory, kGiB);

    for (pid_t probe : probes) {
      ::kill(probe, SIGKILL);
      ::waitpid(probe, nullptr, 0);
    }
  });
}

// The documented size protocol: *infoCount = 0 (infos may be null) asks for the count; a count
// too small gets NVML_ERROR_INSUFFICIENT_SIZE and the count needed; a big enough one is set to
// the number filled.
TEST_F(SimGpuMigTest, RunningProcessesFollowTheSizeProtocol) {
  RunInChild("1xH100-80GB", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    unsigned int count = 0;
    ASSERT_NVML(nvmlDeviceGetComputeRunningProcesses_v3(device, &count, nullptr));
    EXPECT_EQ(0u, count);

    std::vector<pid_t> probes;
    for (int i = 0; i < 3; ++i) {
      std::string seen;
      probes.push_back(
          gpufrac::testing::Start({ProbePath(), "hold", "1048576"}, ProbeEnv("0"), "hold=", &seen));
      ASSERT_NE(std::string::npos, seen.find("hold=0")) << seen;
    }
    count = 0;
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE,
              nvmlDeviceGetComputeRunningProcesses_v3(device, &count, nullptr));
    EXPECT_EQ(3u, count);
    abi::nvmlProcessInfo_t infos[8] = {};
    count = 2;
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE,
              nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos));
    EXPECT_EQ(3u, count);
    count = 8;
    ASSERT_NVML(nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos));
    EXPECT_EQ(3u, count);
    std::vector<unsigned int> listed = {infos[0].pid, infos[1].pid, infos[2].pid};
    std::vector<unsigned int> started(probes.begin(), probes.end());
    std::sort(listed.begin(), listed.end());
    std::sort(started.begin(), started.end());
    EXPECT_EQ(started, listed);

    // Null arguments, and a call before nvmlInit.
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceGetComputeRunningProcesses_v3(device, nullptr, infos));
    count = 8;
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceGetComputeRunningProcesses_v3(device, &count, nullptr));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceGetComputeRunningProcesses_v3(nullptr, &count, infos));
    ASSERT_NVML(nvmlShutdown());
    EXPECT_EQ(abi::NVML_ERROR_UNINITIALIZED,
              nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos));
    for (pid_t probe : probes) {
      ::kill(probe, SIGKILL);
      ::waitpid(probe, nullptr, 0);
    }
  });
}

// A process that dies without exiting cleanly is gone from the listing at once (its slot is
// reclaimed, as the driver frees a dead process's context), and its instance is free again.
TEST_F(SimGpuMigTest, ADeadProcessIsNotListed) {
  RunInChild("1xH100-80GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(device, Profile("H100-80GB", "1g.10gb"), 3, &instance));
    abi::nvmlComputeInstance_t compute = CreateFullCompute(instance, 1);
    const std::string uuid = MigUuidAt(device, 0);
    abi::nvmlDevice_t mig = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByUUID(uuid.c_str(), &mig));
    std::string seen;
    const pid_t probe = gpufrac::testing::Start({ProbePath(), "hold", "1073741824"}, ProbeEnv(uuid),
                                                "hold=", &seen);
    ASSERT_NE(std::string::npos, seen.find("hold=0")) << seen;
    ASSERT_EQ(1u, RunningProcesses(mig).size());
    ASSERT_EQ(1u, RunningProcesses(device).size());
    ::kill(probe, SIGKILL);
    ::waitpid(probe, nullptr, 0);
    EXPECT_TRUE(RunningProcesses(mig).empty());
    EXPECT_TRUE(RunningProcesses(device).empty());
    EXPECT_NVML(nvmlComputeInstanceDestroy(compute));
    EXPECT_NVML(nvmlGpuInstanceDestroy(instance));
    // The MIG device handle outlives its instance, and now names nothing.
    unsigned int count = 0;
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceGetComputeRunningProcesses_v3(mig, &count, nullptr));
  });
}

TEST_F(SimGpuMigTest, ProcessesInAMigDeviceSeeItsMemory) {
  RunInChild("1xH100-80GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(0);
    const gpu::MigProfile& three = Profile("H100-80GB", "3g.40gb");
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(device, three, 4, &instance));
    CreateFullCompute(instance, 3);
    const std::string uuid = MigUuidAt(device, 0);

    const RunResult info = RunCommand({ProbePath(), "info"}, ProbeEnv(uuid));
    ASSERT_EQ(0, info.status) << info.err;
    EXPECT_EQ(static_cast<long long>(three.memory_bytes), info.GetInt("total"));
    EXPECT_EQ(static_cast<long long>(three.memory_bytes), info.GetInt("device_total"));
    // cuDeviceGetUuid_v2 gives the MIG device's own UUID (the probe prints it as GPU-...).
    const RunResult printed = RunCommand({ProbePath(), "uuid"}, ProbeEnv(uuid));
    EXPECT_EQ(uuid.substr(4), printed.Get("uuid").substr(4));

    // Memory is the instance's: it runs out at the instance's size.
    Helper user([uuid, &three](Helper& self) {
      ::setenv("CUDA_VISIBLE_DEVICES", uuid.c_str(), 1);
      InitAndUsePrimary();
      size_t free = 0;
      size_t total = 0;
      ASSERT_CU(cuMemGetInfo_v2(&free, &total));
      EXPECT_EQ(three.memory_bytes, total);
      abi::CUdeviceptr pointer = 0;
      EXPECT_EQ(abi::CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc_v2(&pointer, free + 1));
      EXPECT_CU(cuMemAlloc_v2(&pointer, free));
      char name[128];
      EXPECT_CU(cuDeviceGetName(name, sizeof(name), 0));
      EXPECT_STREQ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", name);
      self.Send('F');
      self.Receive();
    });
    ASSERT_EQ('F', user.Receive());
    abi::nvmlDevice_t mig = nullptr;
    ASSERT_NVML(nvmlDeviceGetMigDeviceHandleByIndex(device, 0, &mig));
    abi::nvmlMemory_t memory{};
    ASSERT_NVML(nvmlDeviceGetMemoryInfo(mig, &memory));
    EXPECT_EQ(0u, memory.free);
    user.Send('X');
    EXPECT_EQ(0, user.Wait());
    ASSERT_NVML(nvmlDeviceGetMemoryInfo(mig, &memory));
    EXPECT_EQ(memory.total, memory.free);
  });
}

TEST_F(SimGpuMigTest, TheParentGpuIsNoCudaDeviceInMigMode) {
  const std::string ns = name_space();
  RunInChild("1xA100-40GB:mig,1xL4", [ns] {
    const std::string gpu = FormatGpuUuid(DeviceUuid(ns, 0));
    EXPECT_EQ("100", RunCommand({ProbePath(), "info"}, ProbeEnv(gpu)).Get("init"));
    EXPECT_EQ("100", RunCommand({ProbePath(), "info"}, ProbeEnv("0")).Get("init"));
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(Device(0), Profile("A100-40GB", "1g.5gb"), 3, &instance));
    CreateFullCompute(instance, 1);
    // Unset: the L4 and the one MIG device, at the MIG GPU's position.
    std::map<std::string, std::string> env = ProbeEnv("");
    env.erase("CUDA_VISIBLE_DEVICES");
    const RunResult info = RunCommand({ProbePath(), "info"}, env);
    EXPECT_EQ("0", info.Get("init")) << info.err;
    EXPECT_EQ(static_cast<long long>(Profile("A100-40GB", "1g.5gb").memory_bytes),
              info.GetInt("total"));
  });
}

TEST_F(SimGpuMigTest, MigUuidsAreStableAcrossProcessesAndRecreation) {
  RunInChild("2xA30-24GB:mig", [] {
    ASSERT_NVML(nvmlInit_v2());
    abi::nvmlDevice_t device = Device(1);
    abi::nvmlGpuInstance_t instance = nullptr;
    ASSERT_NVML(Create(device, Profile("A30-24GB", "2g.12gb"), 2, &instance));
    abi::nvmlComputeInstance_t compute = CreateFullCompute(instance, 2);
    const std::string uuid = MigUuidAt(device, 0);
    EXPECT_EQ(40u, uuid.size());
    EXPECT_EQ(0u, uuid.find("MIG-"));
    abi::nvmlDevice_t found = nullptr;
    ASSERT_NVML(nvmlDeviceGetHandleByUUID(uuid.c_str(), &found));
    unsigned int is_mig = 0;
    ASSERT_NVML(nvmlDeviceIsMigDeviceHandle(found, &is_mig));
    EXPECT_EQ(1u, is_mig);
    abi::nvmlDevice_t parent = nullptr;
    ASSERT_NVML(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(found, &parent));
    EXPECT_EQ(device, parent);
    unsigned int id = 0;
    ASSERT_NVML(nvmlDeviceGetGpuInstanceId(found, &id));
    EXPECT_EQ(Info(instance).id, id);
    ASSERT_NVML(nvmlDeviceGetComputeInstanceId(found, &id));
    EXPECT_EQ(0u, id);

    Helper other([uuid](Helper& self) {
      // Another process (its own NVML state) sees the same MIG device under the same UUID.
      EXPECT_EQ(uuid, MigUuidAt(Device(1), 0));
      self.Send('D');
    });
    EXPECT_EQ('D', other.Receive());
    EXPECT_EQ(0, other.Wait());
    const RunResult printed = RunCommand({ProbePath(), "uuid"}, ProbeEnv(uuid));
    EXPECT_EQ(uuid.substr(4), printed.Get("uuid").substr(4));

    ASSERT_NVML(nvmlComputeInstanceDestroy(compute));
    ASSERT_NVML(nvmlGpuInstanceDestroy(instance));
    ASSERT_NVML(Create(device, Profile("A30-24GB", "2g.12gb"), 2, &instance));
    CreateFullCompute(instance, 2);
    EXPECT_EQ(uuid, MigUuidAt(device, 0));
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
