// Tests of GPU discovery: the missing-driver error (the normal case on machines without a GPU),
// every path of ListDevices against a fake NVML with injected failures, and FindDevice.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/devices.h"

namespace gpufrac::gpu {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

TEST(ListDevicesTest, DefaultLibraryMissingOrWorking) {
  void* nvml = dlopen(kNvmlLibraryName, RTLD_NOW | RTLD_LOCAL);
  StatusOr<std::vector<DeviceInfo>> devices = ListDevices();
  if (nvml == nullptr) {
    // No driver here (the usual development machine): the error says so and what to do.
    ASSERT_FALSE(devices.ok());
    EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(devices.status().message(),
              "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded); install the "
              "NVIDIA driver (nvidia-smi should then list the GPUs), or add the directory "
              "holding libnvidia-ml.so.1 to LD_LIBRARY_PATH");
    return;
  }
  // A real (or simulated) driver: whatever it reports must be coherent.
  dlclose(nvml);
  ASSERT_TRUE(devices.ok()) << devices.status();
  for (size_t i = 0; i < devices->size(); ++i) {
    const DeviceInfo& d = (*devices)[i];
    EXPECT_EQ(d.index, i);
    EXPECT_TRUE(StartsWith(d.uuid, "GPU-")) << d.uuid;
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.memory_total, 0u);
    EXPECT_LE(d.memory_free, d.memory_total);
    if (d.model != nullptr) {
      EXPECT_EQ(std::string_view(d.model->nvml_name), d.name);
    }
  }
}

TEST(ListDevicesTest, LibraryNotFound) {
  StatusOr<std::vector<DeviceInfo>> devices = ListDevices("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(devices.status().message(),
            "no NVIDIA driver found (/nonexistent/libnvidia-ml.so.1 could not be loaded); "
            "install the NVIDIA driver (nvidia-smi should then list the GPUs), or add the "
            "directory holding /nonexistent/libnvidia-ml.so.1 to LD_LIBRARY_PATH");
}

TEST(ListDevicesTest, LibraryWithoutNvml) {
  StatusOr<std::vector<DeviceInfo>> devices = ListDevices("libm.so.6");
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(devices.status().message(),
            "libm.so.6 has no nvmlInit_v2; the NVIDIA driver is too old for gpufrac (update it)");
}

// Runs ListDevices against the fake NVML built for this test, and checks that every
// successful nvmlInit_v2 was matched by an nvmlShutdown.
class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Holding the library open keeps its state between ListDevices calls.
    fake_ = dlopen(GPUFRAC_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(fake_, nullptr) << dlerror();
    init_depth_ = reinterpret_cast<int (*)()>(dlsym(fake_, "FakeNvmlInitDepth"));
    ASSERT_NE(init_depth_, nullptr);
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_FAIL");
    unsetenv("FAKE_NVML_FAIL_CODE");
    if (fake_ != nullptr) dlclose(fake_);
  }

  StatusOr<std::vector<DeviceInfo>> ListWithFailure(const char* entry, int code) {
    setenv("FAKE_NVML_FAIL", entry, 1);
    setenv("FAKE_NVML_FAIL_CODE", std::to_string(code).c_str(), 1);
    return List();
  }
  StatusOr<std::vector<DeviceInfo>> List() {
    StatusOr<std::vector<DeviceInfo>> devices = ListDevices(GPUFRAC_FAKE_NVML);
    EXPECT_EQ(init_depth_(), 0) << "nvmlInit_v2 without nvmlShutdown";
    return devices;
  }

  void* fake_ = nullptr;
  int (*init_depth_)() = nullptr;
};

TEST_F(FakeNvmlTest, ListsEveryGpu) {
  StatusOr<std::vector<DeviceInfo>> devices = List();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 2u);

  const DeviceInfo& h100 = (*devices)[0];
  EXPECT_EQ(h100.index, 0u);
  EXPECT_EQ(h100.uuid, "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(h100.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.memory_total, 80 * kGiB);
  EXPECT_EQ(h100.memory_free, 79 * kGiB);
  ASSERT_NE(h100.model, nullptr) << "the catalogue should know the H100 80GB HBM3";
  EXPECT_EQ(std::string_view(h100.model->nvml_name), "NVIDIA H100 80GB HBM3");

  const DeviceInfo& other = (*devices)[1];
  EXPECT_EQ(other.index, 1u);
  EXPECT_EQ(other.uuid, "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(other.name, "NVIDIA Imaginary GPU");
  EXPECT_EQ(other.memory_total, 24 * kGiB);
  EXPECT_EQ(other.memory_free, 24 * kGiB);
  EXPECT_EQ(other.model, nullptr);
}

TEST_F(FakeNvmlTest, InitFailsWithoutKernelDriver) {
  StatusOr<std::vector<DeviceInfo>> devices = ListWithFailure("nvmlInit_v2", 9);
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(devices.status().message(),
            "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9); the NVIDIA kernel driver is "
            "not loaded (does nvidia-smi work?)");
}

TEST_F(FakeNvmlTest, CountWithoutPermission) {
  StatusOr<std::vector<DeviceInfo>> devices = ListWithFailure("nvmlDeviceGetCount_v2", 4);
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(devices.status().message(),
            "nvmlDeviceGetCount_v2 failed: Insufficient Permissions (NVML error 4)");
}

TEST_F(FakeNvmlTest, LostGpu) {
  StatusOr<std::vector<DeviceInfo>> devices = ListWithFailure("nvmlDeviceGetHandleByIndex_v2", 15);
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(devices.status().message(),
            "nvmlDeviceGetHandleByIndex_v2(GPU 0) failed: GPU is lost (NVML error 15); the GPU "
            "has fallen off the bus and needs a reset or reboot");
}

TEST_F(FakeNvmlTest, EveryPerDeviceCallIsChecked) {
  for (const char* entry : {"nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo"}) {
    StatusOr<std::vector<DeviceInfo>> devices = ListWithFailure(entry, 999);
    ASSERT_FALSE(devices.ok()) << entry;
    EXPECT_EQ(devices.status().code(), StatusCode::kInternal) << entry;
    EXPECT_EQ(devices.status().message(),
              std::string(entry) + "(GPU 0) failed: Unknown Error (NVML error 999)");
  }
}

std::vector<DeviceInfo> TwoDevices() {
  std::vector<DeviceInfo> devices(2);
  devices[0].index = 0;
  devices[0].uuid = "GPU-8f6a1b2c-0000-1111-2222-333333333333";
  devices[1].index = 1;
  devices[1].uuid = "GPU-8f6a9999-4444-5555-6666-777777777777";
  return devices;
}

TEST(FindDeviceTest, ByIndex) {
  const std::vector<DeviceInfo> devices = TwoDevices();
  EXPECT_EQ(FindDevice(devices, "0")->uuid, devices[0].uuid);
  EXPECT_EQ(FindDevice(devices, " 1 ")->uuid, devices[1].uuid);
  EXPECT_EQ(FindDevice(devices, "01")->uuid, devices[1].uuid);
}

TEST(FindDeviceTest, IndexIsNvmlsNotThePosition) {
  std::vector<DeviceInfo> devices = TwoDevices();
  devices[0].index = 3;
  EXPECT_EQ(FindDevice(devices, "3")->uuid, devices[0].uuid);
  StatusOr<DeviceInfo> missing = FindDevice(devices, "0");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(FindDeviceTest, ByUuid) {
  const std::vector<DeviceInfo> devices = TwoDevices();
  EXPECT_EQ(FindDevice(devices, devices[1].uuid)->index, 1u);
  EXPECT_EQ(FindDevice(devices, "gpu-8F6A1B2C-0000-1111-2222-333333333333")->index, 0u);
  EXPECT_EQ(FindDevice(devices, "GPU-8f6a1")->index, 0u);  // A unique prefix.
  EXPECT_EQ(FindDevice(devices, "GPU-8f6a9")->index, 1u);
}

TEST(FindDeviceTest, Errors) {
  const std::vector<DeviceInfo> devices = TwoDevices();
  const std::string listed =
      "there are 0 (GPU-8f6a1b2c-0000-1111-2222-333333333333), "
      "1 (GPU-8f6a9999-4444-5555-6666-777777777777)";

  StatusOr<DeviceInfo> r = FindDevice(devices, "  ");
  EXPECT_EQ(r.status(),
            InvalidArgumentError("no GPU given (name one by index, e.g. 0, or by UUID)"));

  r = FindDevice(devices, "2");
  EXPECT_EQ(r.status(), NotFoundError("no GPU with index 2 (" + listed + ")"));

  r = FindDevice(devices, "99999999999999999999");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);

  r = FindDevice(devices, "GPU-0000");
  EXPECT_EQ(r.status(), NotFoundError("no GPU with UUID \"GPU-0000\" (" + listed + ")"));

  r = FindDevice(devices, "GPU-8f6a");
  EXPECT_EQ(r.status(), InvalidArgumentError(
                            "GPU UUID prefix \"GPU-8f6a\" matches 2 GPUs; give more of the UUID"));

  r = FindDevice(devices, "GPU-");
  EXPECT_EQ(r.status(), InvalidArgumentError("\"GPU-\" is neither a GPU index nor a GPU UUID "
                                             "(e.g. 0 or GPU-...; " +
                                             listed + ")"));

  r = FindDevice(devices, "-1");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  r = FindDevice({}, "0");
  EXPECT_EQ(r.status(), NotFoundError("no GPU with index 0 (this machine has none)"));
}

}  // namespace
}  // namespace gpufrac::gpu
