// Simulated NVML: initialisation, devices (all of them, whatever CUDA_VISIBLE_DEVICES says),
// names, UUIDs, versions, and memory information that matches the CUDA driver's.
#include <cstring>
#include <string>

#include "gpu/catalogue.h"
#include "simgpu/core/uuid.h"
#include "simgpu_test_util.h"

namespace gpufrac::simgpu::testing {
namespace {

using SimGpuNvmlTest = SimGpuTest;

TEST_F(SimGpuNvmlTest, CallsBeforeInitFail) {
  RunInChild("1xL4", [] {
    unsigned int count = 0;
    EXPECT_EQ(abi::NVML_ERROR_UNINITIALIZED, nvmlDeviceGetCount_v2(&count));
    EXPECT_EQ(abi::NVML_ERROR_UNINITIALIZED, nvmlShutdown());
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInitWithFlags(0));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlShutdown());
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetCount_v2(&count));  // one reference left
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlShutdown());
    EXPECT_EQ(abi::NVML_ERROR_UNINITIALIZED, nvmlDeviceGetCount_v2(&count));
    EXPECT_STREQ("Uninitialized", nvmlErrorString(abi::NVML_ERROR_UNINITIALIZED));
    EXPECT_STREQ("Success", nvmlErrorString(abi::NVML_SUCCESS));
  });
}

TEST_F(SimGpuNvmlTest, SeesEveryDeviceRegardlessOfCudaVisibleDevices) {
  const std::string ns = name_space();
  RunInChild("1xB200,1xT4", {{"CUDA_VISIBLE_DEVICES", "1"}}, [ns] {
    ASSERT_CU(cuInit(0));
    int cuda_count = 0;
    EXPECT_CU(cuDeviceGetCount(&cuda_count));
    EXPECT_EQ(1, cuda_count);

    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    unsigned int count = 0;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetCount_v2(&count));
    ASSERT_EQ(2u, count);
    abi::nvmlDevice_t t4 = nullptr;
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(1, &t4));
    char text[abi::kNvmlDeviceNameV2BufferSize];
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetName(t4, text, sizeof(text)));
    EXPECT_STREQ("Tesla T4", text);
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE, nvmlDeviceGetName(t4, text, 8));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetUUID(t4, text, sizeof(text)));
    EXPECT_EQ(FormatGpuUuid(DeviceUuid(ns, 1)), text);

    abi::nvmlDevice_t by_uuid = nullptr;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByUUID(text, &by_uuid));
    EXPECT_EQ(t4, by_uuid);
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByUUID("GPU-nope", &by_uuid));
    unsigned int index = 9;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetIndex(t4, &index));
    EXPECT_EQ(1u, index);
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByIndex_v2(2, &by_uuid));
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT,
              nvmlDeviceGetIndex(reinterpret_cast<abi::nvmlDevice_t>(&index), &index));

    // The CUDA device 0 is the T4.
    abi::CUuuid cuda_uuid{};
    EXPECT_CU(cuDeviceGetUuid_v2(&cuda_uuid, 0));
    EXPECT_EQ(0, std::memcmp(cuda_uuid.bytes, DeviceUuid(ns, 1).data(), 16));
  });
}

// Every other way to a device handle: the v1 count and index (the same as _v2 here: every
// simulated device is accessible), by PCI bus id in each documented format, by board serial,
// and by UUID as text or bytes.
TEST_F(SimGpuNvmlTest, FindsDevicesByPciBusIdSerialAndUuidStruct) {
  const std::string ns = name_space();
  RunInChild("2xH100-80GB", [ns] {
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    unsigned int count = 0;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetCount(&count));
    EXPECT_EQ(2u, count);
    abi::nvmlDevice_t second = nullptr;
    abi::nvmlDevice_t found = nullptr;
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(1, &second));
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex(1, &found));
    EXPECT_EQ(second, found);
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByIndex(2, &found));

    // GPU 1 sits on bus 0x1e, as cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) says.
    ASSERT_CU(cuInit(0));
    int bus = 0;
    ASSERT_CU(cuDeviceGetAttribute(&bus, abi::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
    EXPECT_EQ(0x1e, bus);
    for (const char* id : {"00000000:1E:00.0", "0000:1e:00.0", "0:1e:0", "1e:00.0"}) {
      found = nullptr;
      EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByPciBusId_v2(id, &found)) << id;
      EXPECT_EQ(second, found) << id;
      found = nullptr;
      EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByPciBusId(id, &found)) << id;
      EXPECT_EQ(second, found) << id;
    }
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByPciBusId_v2("0000:1e:00.1", &found));
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByPciBusId_v2("0000:2e:00.0", &found));
    for (const char* bad : {"", "1e", "1e:00", "0000:1e:00.", "0000:1g:00.0", "1:2:3:4"}) {
      EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByPciBusId_v2(bad, &found))
          << bad;
    }

    char serial[abi::kNvmlDeviceSerialBufferSize];
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetSerial(second, serial, sizeof(serial)));
    EXPECT_EQ(13u, std::strlen(serial)) << serial;
    EXPECT_EQ(BoardSerial(DeviceUuid(ns, 1)), serial);
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE, nvmlDeviceGetSerial(second, serial, 13));
    found = nullptr;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleBySerial(serial, &found));
    EXPECT_EQ(second, found);
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleBySerial("0000000000000", &found));

    abi::nvmlUUID_t uuid{};
    uuid.version = abi::kNvmlUuidV1Version;
    EXPECT_EQ(0x1000034u, uuid.version);
    uuid.type = abi::NVML_UUID_TYPE_ASCII;
    const std::string text = FormatGpuUuid(DeviceUuid(ns, 1));
    std::memcpy(uuid.value.str, text.c_str(), text.size() + 1);
    found = nullptr;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
    EXPECT_EQ(second, found);
    uuid.type = abi::NVML_UUID_TYPE_BINARY;
    std::memcpy(uuid.value.bytes, DeviceUuid(ns, 1).data(), 16);
    found = nullptr;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
    EXPECT_EQ(second, found);
    uuid.value.bytes[0] ^= 0xff;
    EXPECT_EQ(abi::NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
    uuid.type = 0;
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
    uuid.version = 1;
    EXPECT_EQ(abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
  });
}

TEST_F(SimGpuNvmlTest, MemoryInfoMatchesTheDriver) {
  RunInChild("1xA30-24GB", [] {
    InitAndUsePrimary();
    abi::CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc_v2(&pointer, 3 * kGiB));
    size_t free = 0;
    size_t total = 0;
    ASSERT_CU(cuMemGetInfo_v2(&free, &total));

    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    abi::nvmlDevice_t device = nullptr;
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &device));
    abi::nvmlMemory_t v1{};
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo(device, &v1));
    EXPECT_EQ(total, v1.total);
    EXPECT_EQ(free, v1.free);
    EXPECT_EQ(total - free, v1.used);
    EXPECT_EQ(gpu::FindModel("A30-24GB")->memory_bytes, v1.total);

    abi::nvmlMemory_v2_t v2{};
    EXPECT_EQ(abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetMemoryInfo_v2(device, &v2));
    v2.version = abi::kNvmlMemoryV2Version;
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo_v2(device, &v2));
    EXPECT_EQ(total, v2.total);
    EXPECT_EQ(free, v2.free);
    EXPECT_EQ(total - free, v2.used);
    EXPECT_EQ(0u, v2.reserved);
    EXPECT_EQ(abi::NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetMemoryInfo(device, nullptr));

    EXPECT_CU(cuMemFree_v2(pointer));
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlDeviceGetMemoryInfo(device, &v1));
    EXPECT_EQ(free + 3 * kGiB, v1.free);
  });
}

TEST_F(SimGpuNvmlTest, ReportsDriverVersions) {
  RunInChild("1xH100-80GB", {{"SIMGPU_DRIVER_VERSION", "13000"}}, [] {
    ASSERT_EQ(abi::NVML_SUCCESS, nvmlInit_v2());
    int cuda_version = 0;
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlSystemGetCudaDriverVersion(&cuda_version));
    EXPECT_EQ(13000, cuda_version);
    char version[abi::kNvmlSystemDriverVersionBufferSize];
    EXPECT_EQ(abi::NVML_SUCCESS, nvmlSystemGetDriverVersion(version, sizeof(version)));
    EXPECT_EQ(0, std::strncmp(version, "580.", 4)) << version;
    EXPECT_EQ(abi::NVML_ERROR_INSUFFICIENT_SIZE, nvmlSystemGetDriverVersion(version, 3));
  });
}

}  // namespace
}  // namespace gpufrac::simgpu::testing
