// Driver entry points: cuInit and cuDriverGetVersion.
#include "simgpu/core/config.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

using gpufrac::abi::CUresult;
namespace simgpu = gpufrac::simgpu;

extern "C" {

CUresult cuInit(unsigned int flags) { return simgpu::InitializeDriver(flags); }

// Needs no cuInit, like the real one.
CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return gpufrac::abi::CUDA_ERROR_INVALID_VALUE;
  static const int kVersion = simgpu::DriverVersionFromEnv();
  *version = kVersion;
  return gpufrac::abi::CUDA_SUCCESS;
}

}  // extern "C"
