// Device discovery through NVML loaded with dlopen (see devices.h). The entry points are looked
// up by name once per call; NVML's own reference count makes init/shutdown per call safe.
#include "gpu/devices.h"

#include <dlfcn.h>

#include <cctype>
#include <charconv>
#include <memory>

#include "abi/nvml_abi.h"
#include "common/log.h"
#include "gpu/nvml_library.h"
#include "common/text.h"

namespace gpufrac::gpu {
namespace {

// The NVML entry points ListDevices uses, resolved from one dlopen handle.
struct NvmlApi {
  abi::nvmlInit_v2_t init = nullptr;
  abi::nvmlShutdown_t shutdown = nullptr;
  abi::nvmlErrorString_t error_string = nullptr;
  abi::nvmlDeviceGetCount_v2_t get_count = nullptr;
  abi::nvmlDeviceGetHandleByIndex_v2_t get_handle_by_index = nullptr;
  abi::nvmlDeviceGetUUID_t get_uuid = nullptr;
  abi::nvmlDeviceGetName_t get_name = nullptr;
  abi::nvmlDeviceGetMemoryInfo_t get_memory_info = nullptr;
};

struct DlCloser {
  void operator()(void* handle) const { dlclose(handle); }
};
using LibraryHandle = std::unique_ptr<void, DlCloser>;

template <typename Fn>
Status Resolve(void* library, const std::string& library_name, const char* symbol, Fn* out) {
  return ResolveNvmlSymbol(library, library_name, symbol, "gpufrac", out);
}

Status ResolveAll(void* library, const std::string& name, NvmlApi* api) {
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlInit_v2", &api->init));
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlShutdown", &api->shutdown));
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlErrorString", &api->error_string));
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlDeviceGetCount_v2", &api->get_count));
  GPUFRAC_RETURN_IF_ERROR(
      Resolve(library, name, "nvmlDeviceGetHandleByIndex_v2", &api->get_handle_by_index));
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlDeviceGetUUID", &api->get_uuid));
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlDeviceGetName", &api->get_name));
  GPUFRAC_RETURN_IF_ERROR(Resolve(library, name, "nvmlDeviceGetMemoryInfo", &api->get_memory_info));
  return OkStatus();
}

Status NvmlError(const NvmlApi& api, abi::nvmlReturn_t rc, const std::string& call) {
  return NvmlCallError(api.error_string, rc, call);
}

// A catalogue model is matched on the exact NVML product name.
StatusOr<DeviceInfo> QueryDevice(const NvmlApi& api, unsigned index) {
  const std::string gpu = "(GPU " + std::to_string(index) + ")";
  DeviceInfo info;
  info.index = index;
  abi::nvmlDevice_t device = nullptr;
  if (auto rc = api.get_handle_by_index(index, &device); rc != abi::NVML_SUCCESS) {
    return NvmlError(api, rc, "nvmlDeviceGetHandleByIndex_v2" + gpu);
  }
  char buffer[abi::kNvmlDeviceUuidV2BufferSize > abi::kNvmlDeviceNameV2BufferSize
                  ? abi::kNvmlDeviceUuidV2BufferSize
                  : abi::kNvmlDeviceNameV2BufferSize] = {};
  if (auto rc = api.get_uuid(device, buffer, sizeof(buffer)); rc != abi::NVML_SUCCESS) {
    return NvmlError(api, rc, "nvmlDeviceGetUUID" + gpu);
  }
  buffer[sizeof(buffer) - 1] = '\0';
  info.uuid = buffer;
  buffer[0] = '\0';
  if (auto rc = api.get_name(device, buffer, sizeof(buffer)); rc != abi::NVML_SUCCESS) {
    return NvmlError(api, rc, "nvmlDeviceGetName" + gpu);
  }
  buffer[sizeof(buffer) - 1] = '\0';
  info.name = buffer;
  abi::nvmlMemory_t memory{};
  if (auto rc = api.get_memory_info(device, &memory); rc != abi::NVML_SUCCESS) {
    return NvmlError(api, rc, "nvmlDeviceGetMemoryInfo" + gpu);
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
  GPUFRAC_ASSIGN_OR_RETURN(void* opened, OpenNvmlLibrary(library));
  LibraryHandle handle(opened);
  NvmlApi api;
  GPUFRAC_RETURN_IF_ERROR(ResolveAll(handle.get(), library, &api));

  if (auto rc = api.init(); rc != abi::NVML_SUCCESS) return NvmlError(api, rc, "nvmlInit_v2");
  // Every successful nvmlInit_v2 is paired with one nvmlShutdown, whatever happens below.
  struct ShutdownGuard {
    const NvmlApi& api;
    ~ShutdownGuard() {
      if (auto rc = api.shutdown(); rc != abi::NVML_SUCCESS) {
        LogDebug("nvmlShutdown failed: %s", NvmlErrorText(api.error_string, rc).c_str());
      }
    }
  } guard{api};

  unsigned count = 0;
  if (auto rc = api.get_count(&count); rc != abi::NVML_SUCCESS) {
    return NvmlError(api, rc, "nvmlDeviceGetCount_v2");
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
