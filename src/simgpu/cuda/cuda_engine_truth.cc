// simgpuCtxGetEngineTime (engine_truth.h): the engine time one of this process's contexts has
// received, the driver-side half of the simulator's ground truth.
#include <mutex>

#include "simgpu/core/engine.h"
#include "simgpu/core/engine_truth.h"
#include "simgpu/cuda/driver.h"

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;

extern "C" {

abi::CUresult simgpuCtxGetEngineTime(abi::CUcontext handle, unsigned long long* ns) {
  simgpu::Driver* driver;
  if (abi::CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (ns == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  simgpu::Context* context = simgpu::ContextFromHandle(handle);
  std::lock_guard lock(driver->mu);
  if (driver->contexts.count(context) == 0 || !context->active.load(std::memory_order_relaxed)) {
    return abi::CUDA_ERROR_INVALID_CONTEXT;
  }
  *ns = simgpu::ClientEngineNs(*driver->machine, context->engine);
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
