// Simulated driver: initialisation, the configured devices and their attributes, deterministic
// UUIDs, CUDA_VISIBLE_DEVICES filtering, driver version and error strings.
#include <cstring>
#include <string>

#include "simgpu/core/uuid.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

constexpr char kThreeGpus[] = "2xH100-80GB,1xA30-24GB";

std::string DeviceName(abi::CUdevice device) {
  char name[128] = {};
  EXPECT_CU(cuDeviceGetName(name, sizeof(name), device));
  return name;
}

Uuid DriverUuid(abi::CUdevice device) {
  abi::CUuuid uuid{};
  EXPECT_CU(cuDeviceGetUuid_v2(&uuid, device));
  Uuid bytes;
  std::memcpy(bytes.data(), uuid.bytes, bytes.size());
  return bytes;
}

int Attribute(abi::CUdevice_attribute attribute, abi::CUdevice device) {
  int value = -1;
  EXPECT_CU(cuDeviceGetAttribute(&value, attribute, device));
  return value;
}

int VisibleCount() {
  int count = -1;
  EXPECT_CU(cuDeviceGetCount(&count));
  return count;
}

using SimGpuDeviceTest = SimGpuTest;

TEST_F(SimGpuDeviceTest, CallsBeforeInitFail) {
  RunInChild(kThreeGpus, [] {
    int count = 0;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&count));
    abi::CUdeviceptr pointer = 0;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuMemAlloc_v2(&pointer, 1024));
    abi::CUcontext context = nullptr;
    EXPECT_EQ(abi::CUDA_ERROR_NOT_INITIALIZED, cuCtxGetCurrent(&context));
    // These need no cuInit.
    int version = 0;
    EXPECT_CU(cuDriverGetVersion(&version));
    EXPECT_EQ(12080, version);
    const char* text = nullptr;
    EXPECT_CU(cuGetErrorName(abi::CUDA_ERROR_OUT_OF_MEMORY, &text));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuInit(1));
    EXPECT_CU(cuInit(0));
    EXPECT_CU(cuInit(0));
  });
}

TEST_F(SimGpuDeviceTest, ReportsConfiguredDevices) {
  RunInChild(kThreeGpus, [] {
    ASSERT_CU(cuInit(0));
    ASSERT_EQ(3, VisibleCount());
    EXPECT_EQ("NVIDIA H100 80GB HBM3", DeviceName(0));
    EXPECT_EQ("NVIDIA H100 80GB HBM3", DeviceName(1));
    EXPECT_EQ("NVIDIA A30", DeviceName(2));
    size_t total = 0;
    EXPECT_CU(cuDeviceTotalMem_v2(&total, 0));
    EXPECT_EQ(81559 * kMiB, total);
    EXPECT_CU(cuDeviceTotalMem_v2(&total, 2));
    EXPECT_EQ(24576 * kMiB, total);

    EXPECT_EQ(132, Attribute(abi::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    EXPECT_EQ(56, Attribute(abi::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 2));
    EXPECT_EQ(9, Attribute(abi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    EXPECT_EQ(0, Attribute(abi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
    EXPECT_EQ(8, Attribute(abi::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 2));
    EXPECT_EQ(32, Attribute(abi::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 0));
    EXPECT_EQ(32, Attribute(abi::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
    EXPECT_EQ(1024, Attribute(abi::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0));
    EXPECT_EQ(1, Attribute(abi::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
    EXPECT_NE(Attribute(abi::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0),
              Attribute(abi::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));

    int value = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuDeviceGetAttribute(&value, static_cast<abi::CUdevice_attribute>(9999), 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuDeviceGetAttribute(nullptr, abi::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
    abi::CUdevice device = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&device, 3));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&device, -1));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuDeviceGet(nullptr, 0));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuDeviceGetCount(nullptr));
    char small[6];
    EXPECT_CU(cuDeviceGetName(small, sizeof(small), 2));
    EXPECT_STREQ("NVIDI", small);
  });
}

TEST_F(SimGpuDeviceTest, DefaultsToOneH100) {
  RunInChild("", {{"SIMGPU_CONFIG", std::nullopt}}, [] {
    ASSERT_CU(cuInit(0));
    EXPECT_EQ(1, VisibleCount());
    EXPECT_EQ("NVIDIA H100 80GB HBM3", DeviceName(0));
  });
}

TEST_F(SimGpuDeviceTest, UnknownModelFailsInit) {
  RunInChild("2xV100", [] { EXPECT_EQ(abi::CUDA_ERROR_UNKNOWN, cuInit(0)); });
}

TEST_F(SimGpuDeviceTest, UuidsAreDeterministic) {
  const std::string ns = name_space();
  RunInChild(kThreeGpus, [ns] {
    ASSERT_CU(cuInit(0));
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(DeviceUuid(ns, i), DriverUuid(i)) << "device " << i;
      abi::CUuuid legacy{};
      EXPECT_CU(cuDeviceGetUuid(&legacy, i));
      EXPECT_EQ(0, std::memcmp(legacy.bytes, DeviceUuid(ns, i).data(), 16));
    }
    EXPECT_NE(DriverUuid(0), DriverUuid(1));
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuDeviceGetUuid_v2(nullptr, 0));
  });
  const std::string text = FormatGpuUuid(DeviceUuid(ns, 0));
  EXPECT_EQ(40u, text.size());
  EXPECT_EQ(0u, text.find("GPU-"));
  for (std::size_t dash : {12u, 17u, 22u, 27u}) EXPECT_EQ('-', text[dash]) << text;
  EXPECT_NE(DeviceUuid(ns, 0), DeviceUuid(ns + "x", 0));
}

TEST_F(SimGpuDeviceTest, VisibleDevicesSelectAndOrderByIndex) {
  const std::string ns = name_space();
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", "2,0"}}, [ns] {
    ASSERT_CU(cuInit(0));
    ASSERT_EQ(2, VisibleCount());
    EXPECT_EQ("NVIDIA A30", DeviceName(0));
    EXPECT_EQ(DeviceUuid(ns, 2), DriverUuid(0));
    EXPECT_EQ(DeviceUuid(ns, 0), DriverUuid(1));
  });
}

TEST_F(SimGpuDeviceTest, VisibleDevicesStopAtFirstInvalidEntry) {
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", "1,7,0"}}, [] {
    ASSERT_CU(cuInit(0));
    EXPECT_EQ(1, VisibleCount());
  });
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", "2,1,2,0"}}, [] {
    ASSERT_CU(cuInit(0));
    EXPECT_EQ(2, VisibleCount());  // a repeated index ends the list too
  });
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", "x,0"}}, [] {
    EXPECT_EQ(abi::CUDA_ERROR_NO_DEVICE, cuInit(0));
    EXPECT_EQ(0, VisibleCount());
  });
}

TEST_F(SimGpuDeviceTest, VisibleDevicesByUuidAndUniquePrefix) {
  const std::string ns = name_space();
  const std::string second = FormatGpuUuid(DeviceUuid(ns, 1));
  const std::string third = FormatGpuUuid(DeviceUuid(ns, 2));
  // The shortest prefix of the third UUID that no other device shares.
  std::string prefix = "GPU-";
  for (std::size_t length = 5; length <= third.size(); ++length) {
    prefix = third.substr(0, length);
    bool unique = true;
    for (int i = 0; i < 2; ++i) {
      if (FormatGpuUuid(DeviceUuid(ns, i)).rfind(prefix, 0) == 0) unique = false;
    }
    if (unique) break;
  }
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", prefix + "," + second}}, [ns] {
    ASSERT_CU(cuInit(0));
    ASSERT_EQ(2, VisibleCount());
    EXPECT_EQ(DeviceUuid(ns, 2), DriverUuid(0));
    EXPECT_EQ(DeviceUuid(ns, 1), DriverUuid(1));
  });
  // "GPU-" matches every device: ambiguous, so nothing is visible.
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", "GPU-"}}, [] {
    EXPECT_EQ(abi::CUDA_ERROR_NO_DEVICE, cuInit(0));
    EXPECT_EQ(0, VisibleCount());
  });
}

TEST_F(SimGpuDeviceTest, EmptyVisibleDevicesHidesEverything) {
  RunInChild(kThreeGpus, {{"CUDA_VISIBLE_DEVICES", ""}}, [] {
    EXPECT_EQ(abi::CUDA_ERROR_NO_DEVICE, cuInit(0));
    EXPECT_EQ(abi::CUDA_ERROR_NO_DEVICE, cuInit(0));  // the outcome sticks
    EXPECT_EQ(0, VisibleCount());
    abi::CUdevice device = 0;
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&device, 0));
  });
}

TEST_F(SimGpuDeviceTest, DriverVersionFromEnvironment) {
  RunInChild("1xL4", {{"SIMGPU_DRIVER_VERSION", "13000"}}, [] {
    int version = 0;
    EXPECT_CU(cuDriverGetVersion(&version));
    EXPECT_EQ(13000, version);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(nullptr));
  });
}

TEST_F(SimGpuDeviceTest, ErrorNamesAndStrings) {
  RunInChild("1xT4", [] {
    const char* text = nullptr;
    EXPECT_CU(cuGetErrorName(abi::CUDA_ERROR_INVALID_CONTEXT, &text));
    EXPECT_STREQ("CUDA_ERROR_INVALID_CONTEXT", text);
    EXPECT_CU(cuGetErrorString(abi::CUDA_ERROR_OUT_OF_MEMORY, &text));
    EXPECT_STREQ("out of memory", text);
    EXPECT_CU(cuGetErrorString(abi::CUDA_SUCCESS, &text));
    EXPECT_STREQ("no error", text);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE,
              cuGetErrorName(static_cast<abi::CUresult>(123456), &text));
    EXPECT_EQ(nullptr, text);
    EXPECT_EQ(abi::CUDA_ERROR_INVALID_VALUE, cuGetErrorString(abi::CUDA_SUCCESS, nullptr));
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
