// Device discovery through NVML loaded with dlopen (see devices.h). Each call opens its own NVML
// session; NVML's own reference count makes init/shutdown per call safe.
#include "gpu/devices.h"

#include <cctype>
#include <charconv>
#include <memory>

#include "abi/nvml_abi.h"
#include "common/log.h"
#include "common/text.h"
#include "gpu/nvml_library.h"

namespace gpufrac::gpu {
namespace {

// The NVML entry points ListDevices uses, resolved from one session.
struct NvmlApi {
  std::unique_ptr<NvmlSession> nvml;
  abi::nvmlDeviceGetCount_v2_t get_count = nullptr;
  abi::nvmlDeviceGetHandleByIndex_v2_t get_handle_by_index = nullptr;
  abi::nvmlDeviceGetUUID_t get_uuid = nullptr;
  abi::nvmlDeviceGetName_t get_name = nullptr;
  abi::nvmlDeviceGetMemoryInfo_t get_memory_info = nullptr;

  Status ResolveAll() {
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetCount_v2", &get_count));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetHandleByIndex_v2", &get_handle_by_index));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetUUID", &get_uuid));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetName", &get_name));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetMemoryInfo", &get_memory_info));
    return OkStatus();
  }
};

// A catalogue model is matched on the exact NVML product name.
StatusOr<DeviceInfo> QueryDevice(const NvmlApi& api, unsigned index) {
  const std::string gpu = "(GPU " + std::to_string(index) + ")";
  DeviceInfo info;
  info.index = index;
  abi::nvmlDevice_t device = nullptr;
  if (auto rc = api.get_handle_by_index(index, &device); rc != abi::NVML_SUCCESS) {
    return api.nvml->CallError(rc, "nvmlDeviceGetHandleByIndex_v2" + gpu);
  }
  char buffer[abi::kNvmlDeviceUuidV2BufferSize > abi::kNvmlDeviceNameV2BufferSize
                  ? abi::kNvmlDeviceUuidV2BufferSize
                  : abi::kNvmlDeviceNameV2BufferSize] = {};
  if (auto rc = api.get_uuid(device, buffer, sizeof(buffer)); rc != abi::NVML_SUCCESS) {
    return api.nvml->CallError(rc, "nvmlDeviceGetUUID" + gpu);
  }
  buffer[sizeof(buffer) - 1] = '\0';
  info.uuid = buffer;
  buffer[0] = '\0';
  if (auto rc = api.get_name(device, buffer, sizeof(buffer)); rc != abi::NVML_SUCCESS) {
    return api.nvml->CallError(rc, "nvmlDeviceGetName" + gpu);
  }
  buffer[sizeof(buffer) - 1] = '\0';
  info.name = buffer;
  abi::nvmlMemory_t memory{};
  if (auto rc = api.get_memory_info(device, &memory); rc != abi::NVML_SUCCESS) {
    return api.nvml->CallError(rc, "nvmlDeviceGetMemoryInfo" + gpu);
  }
  info.memory_total = memory.total;
  info.memory_free = memory.free;
  info.model = FindModelByNvmlName(info.name);
  if (info.model == nullptr) {
    LogDebug("GPU %u (%s) is not in gpufrac's GPU catalogue", index, info.name.c_str());
  }
  return info;
}

// "there are 0 (GPU-aaa), 1 (GPU-bbb)" or "this machine has none", for error messages.
std::string DescribeDevices(const std::vector<DeviceInfo>& devices) {
  if (devices.empty()) return "this machine has none";
  std::string out = "there are ";
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(devices[i].index) + " (" + devices[i].uuid + ")";
  }
  return out;
}

}  // namespace

StatusOr<std::vector<DeviceInfo>> ListDevices() { return ListDevices(kNvmlLibraryName); }

StatusOr<std::vector<DeviceInfo>> ListDevices(const std::string& library) {
  NvmlApi api;
  GPUFRAC_ASSIGN_OR_RETURN(api.nvml, NvmlSession::Open(library, "gpufrac"));
  GPUFRAC_RETURN_IF_ERROR(api.ResolveAll());

  unsigned count = 0;
  if (auto rc = api.get_count(&count); rc != abi::NVML_SUCCESS) {
    return api.nvml->CallError(rc, "nvmlDeviceGetCount_v2");
  }
  std::vector<DeviceInfo> devices;
  devices.reserve(count);
  for (unsigned i = 0; i < count; ++i) {
    GPUFRAC_ASSIGN_OR_RETURN(DeviceInfo info, QueryDevice(api, i));
    devices.push_back(std::move(info));
  }
  return devices;
}

StatusOr<DeviceInfo> FindDevice(const std::vector<DeviceInfo>& devices,
                                std::string_view index_or_uuid) {
  std::string_view wanted = index_or_uuid;
  while (!wanted.empty() && std::isspace(static_cast<unsigned char>(wanted.front()))) {
    wanted.remove_prefix(1);
  }
  while (!wanted.empty() && std::isspace(static_cast<unsigned char>(wanted.back()))) {
    wanted.remove_suffix(1);
  }
  if (wanted.empty()) {
    return InvalidArgumentError("no GPU given (name one by index, e.g. 0, or by UUID)");
  }
  const std::string quoted = "\"" + std::string(wanted) + "\"";

  if (wanted.find_first_not_of("0123456789") == std::string_view::npos) {
    unsigned index = 0;
    const auto [end, ec] = std::from_chars(wanted.data(), wanted.data() + wanted.size(), index);
    if (ec == std::errc() && end == wanted.data() + wanted.size()) {
      for (const DeviceInfo& device : devices) {
        if (device.index == index) return device;
      }
    }
    return NotFoundError("no GPU with index " + std::string(wanted) + " (" +
                         DescribeDevices(devices) + ")");
  }

  for (const DeviceInfo& device : devices) {
    if (EqualsIgnoreCase(device.uuid, wanted)) return device;
  }
  constexpr std::string_view kUuidPrefix = "GPU-";
  if (wanted.size() > kUuidPrefix.size() &&
      EqualsIgnoreCase(wanted.substr(0, kUuidPrefix.size()), kUuidPrefix)) {
    const DeviceInfo* match = nullptr;
    int matches = 0;
    for (const DeviceInfo& device : devices) {
      if (device.uuid.size() >= wanted.size() &&
          EqualsIgnoreCase(std::string_view(device.uuid).substr(0, wanted.size()), wanted)) {
        match = &device;
        ++matches;
      }
    }
    if (matches == 1) return *match;
    if (matches > 1) {
      return InvalidArgumentError("GPU UUID prefix " + quoted + " matches " +
                                  std::to_string(matches) + " GPUs; give more of the UUID");
    }
    return NotFoundError("no GPU with UUID " + quoted + " (" + DescribeDevices(devices) + ")");
  }
  return InvalidArgumentError(quoted + " is neither a GPU index nor a GPU UUID (e.g. 0 or " +
                              "GPU-...; " + DescribeDevices(devices) + ")");
}

}  // namespace gpufrac::gpu
