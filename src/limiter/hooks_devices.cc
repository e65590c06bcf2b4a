// Which GPUs a workload can reach through the limiter: only those of its limit file. CUDA's
// devices come from CUDA_VISIBLE_DEVICES, which the driver reads in cuInit, so the limiter
// rewrites it to the workload's GPUs at load time and again just before the real cuInit
// (visible_devices.h): no CUdevice, whether by ordinal or by PCI bus id, can then name another
// GPU. NVML ignores that variable, so its device enumeration is filtered here: it lists the
// workload's GPUs (a MIG device's GPU in its place), numbered from 0 in limit-file order, and
// every lookup of another device answers NVML_ERROR_NOT_FOUND, as for a device the machine does
// not have. Init and enumeration only: nothing here is on a hot path. Also cuInit refuses to
// start CUDA when the limit file is unusable.
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "limiter/hooks.h"
#include "limiter/visible_devices.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace gpufrac::limiter {

void RestrictCudaVisibleDevices() {
  static std::atomic<bool> reported{false};
  constexpr const char* kName = "CUDA_VISIBLE_DEVICES";
  const char* requested = getenv(kName);
  VisibleDevices visible;
  RestrictVisibleDevices(requested, g_rt.config, &visible);
  // Set only when it changes: setenv may move the environment under another thread's getenv.
  if (requested == nullptr || strcmp(requested, visible.value) != 0) {
    setenv(kName, visible.value, 1);
  }
  if (visible.refused[0] != '\0' && !reported.exchange(true)) {
    const int count = g_rt.config.gpu_count;
    char has[64];
    if (count == 1) {
      snprintf(has, sizeof(has), "it has one: 0, or its UUID");
    } else {
      snprintf(has, sizeof(has), "it has %d: 0 to %d, or their UUIDs", count, count - 1);
    }
    PrintError(
        "gpufrac: CUDA_VISIBLE_DEVICES names %s, which is not one of this workload's GPUs (%s); "
        "CUDA sees %s\n",
        visible.refused, has, visible.count == 0 ? "no device" : "only the devices before it");
  }
}

}  // namespace gpufrac::limiter

extern "C" CUresult cuInit(unsigned int flags) {
  if (Active()) RestrictCudaVisibleDevices();
  return Bypass(Real_cuInit(), flags);
}

namespace {

// The NVML device that the limit file's entry `g` appears as: the GPU, or a MIG device's GPU.
nvmlReturn_t EntryGpu(int g, nvmlDevice_t* out) {
  const char* uuid = g_rt.config.gpus[g].uuid;
  nvmlDevice_t device = nullptr;
  nvmlReturn_t r = Real_nvmlDeviceGetHandleByUUID()(uuid, &device);
  if (r == NVML_SUCCESS && strncmp(uuid, "MIG-", 4) == 0) {
    r = Real_nvmlDeviceGetDeviceHandleFromMigDeviceHandle()(device, &device);
  }
  *out = device;
  return r;
}

// The devices NVML lists in the workload: each GPU of the limit file, a MIG device's GPU once,
// in limit-file order, leaving out those NVML does not know (another machine's, a MIG instance
// that is gone). Fills each one's handle and the answer of its lookup (a lost GPU is listed, and
// its lookup fails); returns how many.
struct Listed {
  unsigned count = 0;
  nvmlDevice_t device[kMaxLimitedGpus];
  nvmlReturn_t result[kMaxLimitedGpus];
};

void ListDevices(Listed* listed) {
  listed->count = 0;
  for (int g = 0; g < g_rt.config.gpu_count; ++g) {
    nvmlDevice_t device = nullptr;
    nvmlReturn_t r = EntryGpu(g, &device);
    if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT) continue;
    bool again = false;
    for (unsigned i = 0; i < listed->count; ++i) {
      again = again || (r == NVML_SUCCESS && listed->device[i] == device);
    }
    if (again) continue;
    listed->device[listed->count] = device;
    listed->result[listed->count] = r;
    ++listed->count;
  }
}

// The position of `device` among the listed devices, or -1.
int ListedIndex(nvmlDevice_t device) {
  Listed listed;
  ListDevices(&listed);
  for (unsigned i = 0; i < listed.count; ++i) {
    if (listed.result[i] == NVML_SUCCESS && listed.device[i] == device) return static_cast<int>(i);
  }
  return -1;
}

// Whether the workload may have this handle: a GPU or MIG device of its limit file, a MIG device
// of one of its GPUs, or the GPU of one of its MIG devices.
bool Allowed(nvmlDevice_t device) {
  if (GpuForNvmlDevice(device) >= 0) return true;
  unsigned int is_mig = 0;
  if (Real_nvmlDeviceIsMigDeviceHandle()(device, &is_mig) == NVML_SUCCESS && is_mig != 0) {
    nvmlDevice_t gpu = nullptr;
    return Real_nvmlDeviceGetDeviceHandleFromMigDeviceHandle()(device, &gpu) == NVML_SUCCESS &&
           GpuForNvmlDevice(gpu) >= 0;
  }
  return ListedIndex(device) >= 0;
}

// A lookup's answer, unless it found a device outside the workload.
nvmlReturn_t OnlyTheWorkloads(nvmlReturn_t r, nvmlDevice_t* device) {
  if (r != NVML_SUCCESS || !Active() || device == nullptr || Allowed(*device)) return r;
  *device = nullptr;
  return NVML_ERROR_NOT_FOUND;
}

template <typename Real>
nvmlReturn_t Count(Real real, unsigned int* count) {
  nvmlReturn_t r = real(count);
  if (r != NVML_SUCCESS || !Active()) return r;
  Listed listed;
  ListDevices(&listed);
  *count = listed.count;
  return r;
}

template <typename Real>
nvmlReturn_t ByIndex(Real real, unsigned int index, nvmlDevice_t* device) {
  if (!Active()) return real(index, device);
  unsigned int all = 0;
  if (nvmlReturn_t r = Real_nvmlDeviceGetCount_v2()(&all); r != NVML_SUCCESS) return r;
  Listed listed;
  ListDevices(&listed);
  if (device == nullptr || index >= listed.count) return NVML_ERROR_INVALID_ARGUMENT;
  if (listed.result[index] == NVML_SUCCESS) *device = listed.device[index];
  return listed.result[index];
}

}  // namespace

extern "C" nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return Count(Real_nvmlDeviceGetCount_v2(), count);
}
extern "C" nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return Count(Real_nvmlDeviceGetCount(), count);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return ByIndex(Real_nvmlDeviceGetHandleByIndex_v2(), index, device);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return ByIndex(Real_nvmlDeviceGetHandleByIndex(), index, device);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  return OnlyTheWorkloads(Real_nvmlDeviceGetHandleByUUID()(uuid, device), device);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t* uuid, nvmlDevice_t* device) {
  return OnlyTheWorkloads(Real_nvmlDeviceGetHandleByUUIDV()(uuid, device), device);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* id, nvmlDevice_t* device) {
  return OnlyTheWorkloads(Real_nvmlDeviceGetHandleByPciBusId_v2()(id, device), device);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* id, nvmlDevice_t* device) {
  return OnlyTheWorkloads(Real_nvmlDeviceGetHandleByPciBusId()(id, device), device);
}
extern "C" nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device) {
  return OnlyTheWorkloads(Real_nvmlDeviceGetHandleBySerial()(serial, device), device);
}
// A MIG device the workload was not given is absent, as NVML answers for an empty index.
extern "C" nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                            nvmlDevice_t* mig) {
  return OnlyTheWorkloads(Real_nvmlDeviceGetMigDeviceHandleByIndex()(device, index, mig), mig);
}

// The workload's numbering: its GPUs from 0, as they are listed.
extern "C" nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  nvmlReturn_t r = Real_nvmlDeviceGetIndex()(device, index);
  if (r != NVML_SUCCESS || !Active()) return r;
  if (int listed = ListedIndex(device); listed >= 0) *index = static_cast<unsigned int>(listed);
  return r;
}
