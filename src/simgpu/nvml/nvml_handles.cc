// The other ways NVML hands out a device handle: the v1 count and index kept for old binaries,
// by PCI bus id, by board serial number, and by UUID given as text or bytes
// (nvmlDeviceGetHandleByUUIDV). Every simulated device is accessible, so the v1 forms, which
// skip devices NVML may not talk to, answer as the _v2 ones.
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "simgpu/core/uuid.h"
#include "simgpu/nvml/nvml_exports.h"
#include "simgpu/nvml/nvml_state.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::nvmlReturn_t;

// One field of a PCI bus id: 1 to 8 hex digits.
std::optional<unsigned long> Hex(std::string_view text) {
  if (text.empty() || text.size() > 8) return std::nullopt;
  unsigned long value = 0;
  for (char c : text) {
    int digit = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + static_cast<unsigned long>(digit);
  }
  return value;
}

struct PciAddress {
  unsigned long domain = 0, bus = 0, device = 0, function = 0;
};

// The formats nvml.h documents for nvmlDeviceGetHandleByPciBusId_v2, all in hex:
// "domain:bus:device.function", "domain:bus:device" and "bus:device.function".
std::optional<PciAddress> ParsePciBusId(std::string_view text) {
  std::string_view function_text;
  if (size_t dot = text.find('.'); dot != std::string_view::npos) {
    function_text = text.substr(dot + 1);
    text = text.substr(0, dot);
    if (function_text.empty()) return std::nullopt;
  }
  std::vector<std::string_view> fields;
  for (size_t colon; (colon = text.find(':')) != std::string_view::npos;) {
    fields.push_back(text.substr(0, colon));
    text.remove_prefix(colon + 1);
  }
  fields.push_back(text);
  const bool has_domain = fields.size() == 3;
  if (!has_domain && !(fields.size() == 2 && !function_text.empty())) return std::nullopt;
  std::vector<std::string_view> parts = fields;
  if (!has_domain) parts.insert(parts.begin(), "0");
  parts.push_back(function_text.empty() ? "0" : function_text);
  unsigned long values[4];
  for (int i = 0; i < 4; ++i) {
    std::optional<unsigned long> value = Hex(parts[i]);
    if (!value) return std::nullopt;
    values[i] = *value;
  }
  return PciAddress{values[0], values[1], values[2], values[3]};
}

// The handle of the GPU at `index` once found: the lost-GPU check every lookup makes.
nvmlReturn_t Found(unsigned int index, abi::nvmlDevice_t* device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckDevice(index); result != abi::NVML_SUCCESS) {
    return result;
  }
  *device = simgpu::NvmlHandle(simgpu::NvmlDeviceAt(index));
  return abi::NVML_SUCCESS;
}

nvmlReturn_t ByPciBusId(const char* text, abi::nvmlDevice_t* device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  std::optional<PciAddress> address;
  if (text == nullptr || device == nullptr || !(address = ParsePciBusId(text))) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  for (unsigned int i = 0; i < simgpu::NvmlDeviceCount(); ++i) {
    if (address->domain == 0 &&
        address->bus == static_cast<unsigned long>(simgpu::PciBusNumber(static_cast<int>(i))) &&
        address->device == 0 && address->function == 0) {
      return Found(i, device);
    }
  }
  return abi::NVML_ERROR_NOT_FOUND;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, abi::nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id, abi::nvmlDevice_t* device) {
  return ByPciBusId(pci_bus_id, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pci_bus_id, abi::nvmlDevice_t* device) {
  return ByPciBusId(pci_bus_id, device);
}

nvmlReturn_t nvmlDeviceGetSerial(abi::nvmlDevice_t handle, char* serial, unsigned int length) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  const simgpu::NvmlDevice* device = simgpu::NvmlDeviceFromHandle(handle);
  if (device == nullptr || serial == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (nvmlReturn_t result = simgpu::NvmlCheckDevice(device->index); result != abi::NVML_SUCCESS) {
    return result;
  }
  if (length < device->serial.size() + 1) return abi::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(serial, device->serial.c_str(), device->serial.size() + 1);
  return abi::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, abi::nvmlDevice_t* device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (serial == nullptr || device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned int i = 0; i < simgpu::NvmlDeviceCount(); ++i) {
    if (simgpu::NvmlDeviceAt(i)->serial == serial) return Found(i, device);
  }
  return abi::NVML_ERROR_NOT_FOUND;
}

// Text is looked up as nvmlDeviceGetHandleByUUID does; bytes as the GPU or MIG device whose UUID
// they are.
nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const abi::nvmlUUID_t* uuid, abi::nvmlDevice_t* device) {
  if (nvmlReturn_t result = simgpu::NvmlCheckInit(); result != abi::NVML_SUCCESS) return result;
  if (uuid == nullptr || device == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (uuid->version != abi::kNvmlUuidV1Version) return abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (uuid->type == abi::NVML_UUID_TYPE_ASCII) {
    const std::string text(uuid->value.str, strnlen(uuid->value.str, sizeof(uuid->value.str)));
    return nvmlDeviceGetHandleByUUID(text.c_str(), device);
  }
  if (uuid->type != abi::NVML_UUID_TYPE_BINARY) return abi::NVML_ERROR_INVALID_ARGUMENT;
  simgpu::Uuid bytes;
  std::memcpy(bytes.data(), uuid->value.bytes, bytes.size());
  nvmlReturn_t result = nvmlDeviceGetHandleByUUID(simgpu::FormatGpuUuid(bytes).c_str(), device);
  if (result != abi::NVML_ERROR_NOT_FOUND) return result;
  return nvmlDeviceGetHandleByUUID(simgpu::FormatMigUuid(bytes).c_str(), device);
}

}  // extern "C"
