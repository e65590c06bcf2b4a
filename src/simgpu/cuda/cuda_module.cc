// Driver entry points for modules: loading PTX text, unloading, and looking kernels up by name.
// Binary images (cubin, fatbin) cannot be read by the simulator and are refused.
#include <cstring>
#include <string_view>

#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Module;

bool IsBinaryImage(const void* image) {
  const auto* bytes = static_cast<const unsigned char*>(image);
  const bool elf = bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
  const bool fatbin = bytes[0] == 0x50 && bytes[1] == 0xed && bytes[2] == 0x55 && bytes[3] == 0xba;
  return elf || fatbin;
}

}  // namespace

extern "C" {

CUresult cuModuleLoadData(abi::CUmodule* handle, const void* image) {
  simgpu::Driver* driver;
  simgpu::Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (handle == nullptr || image == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  if (IsBinaryImage(image)) return abi::CUDA_ERROR_NOT_SUPPORTED;
  std::vector<std::string> entries;
  if (!simgpu::ParsePtxEntries(static_cast<const char*>(image), &entries)) {
    return abi::CUDA_ERROR_INVALID_PTX;
  }
  auto* module = new Module;
  module->context = context;
  for (std::string& name : entries) {
    auto function = std::make_unique<simgpu::Function>();
    function->module = module;
    function->name = std::move(name);
    module->functions.push_back(std::move(function));
  }
  std::lock_guard lock(driver->mu);
  driver->modules.insert(module);
  *handle = simgpu::ToHandle(module);
  return abi::CUDA_SUCCESS;
}

// The module object is kept (marked unloaded) so stale function handles fail cleanly.
CUresult cuModuleUnload(abi::CUmodule handle) {
  simgpu::Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  auto* module = reinterpret_cast<Module*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->modules.count(module) == 0) return abi::CUDA_ERROR_INVALID_HANDLE;
  module->magic = 0;
  for (auto& function : module->functions) function->magic = 0;
  driver->modules.erase(module);
  driver->unloaded_modules.push_back(module);
  return abi::CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(abi::CUfunction* handle, abi::CUmodule module_handle,
                             const char* name) {
  simgpu::Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || name == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  auto* module = reinterpret_cast<Module*>(module_handle);
  std::lock_guard lock(driver->mu);
  if (driver->modules.count(module) == 0) return abi::CUDA_ERROR_INVALID_HANDLE;
  for (auto& function : module->functions) {
    if (function->name == name) {
      *handle = simgpu::ToHandle(function.get());
      return abi::CUDA_SUCCESS;
    }
  }
  return abi::CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
