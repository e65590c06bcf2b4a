// Driver entry points for kernel launches: cuLaunchKernel, cuLaunchKernelEx (with its launch
// attributes) and cuLaunchCooperativeKernel. A launch validates its arguments, adds the kernel's
// modelled duration to the stream (sim_time.h) and returns; on a stream being captured it adds a
// kernel node to the capture's graph instead.
#include <mutex>

#include "simgpu/core/sim_time.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"
#include "simgpu/cuda/kernel.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;
using simgpu::KernelShape;

// Attribute ids a launch accepts; those other than COOPERATIVE change nothing simulated.
bool KnownAttribute(abi::CUlaunchAttributeID id) {
  return (id >= abi::CU_LAUNCH_ATTRIBUTE_IGNORE &&
          id <= abi::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) ||
         id == abi::CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING;
}

CUresult Launch(abi::CUfunction function, const KernelShape& shape, abi::CUstream stream,
                void** params, void** extra, bool per_thread_default, bool cooperative) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (CUresult result = simgpu::CheckKernel(function, shape, params, extra);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (cooperative && !simgpu::FitsCooperatively(*context->model, context->sm_count, shape)) {
    return abi::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, stream, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (queue.capturing) {
    std::lock_guard lock(driver->mu);
    simgpu::Stream* capturing = queue.stream;
    if (capturing->capture == nullptr) return abi::CUDA_ERROR_INVALID_HANDLE;  // ended meanwhile
    std::vector<int> after;
    if (capturing->capture_last >= 0) after.push_back(capturing->capture_last);
    capturing->capture_last = capturing->capture->AddKernel(shape, std::move(after))->index;
    return abi::CUDA_SUCCESS;
  }
  simgpu::EnqueueWork(*driver->machine, context, queue,
                      simgpu::KernelDurationNs(context->kernel_ns_per_thread, shape.Threads()));
  return abi::CUDA_SUCCESS;
}

KernelShape Shape(unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                  unsigned int block_x, unsigned int block_y, unsigned int block_z) {
  return KernelShape{.grid = {grid_x, grid_y, grid_z}, .block = {block_x, block_y, block_z}};
}

CUresult LaunchEx(const abi::CUlaunchConfig* config, abi::CUfunction function, void** params,
                  void** extra, bool per_thread_default) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  bool cooperative = false;
  for (unsigned int i = 0; i < config->numAttrs; ++i) {
    const abi::CUlaunchAttribute& attribute = config->attrs[i];
    if (!KnownAttribute(attribute.id)) return abi::CUDA_ERROR_INVALID_VALUE;
    if (attribute.id == abi::CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      cooperative = attribute.value.cooperative != 0;
    }
  }
  return Launch(function,
                Shape(config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                      config->blockDimY, config->blockDimZ),
                config->hStream, params, extra, per_thread_default, cooperative);
}

}  // namespace

extern "C" {

CUresult cuLaunchKernel(abi::CUfunction function, unsigned int grid_x, unsigned int grid_y,
                        unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                        unsigned int block_z, unsigned int /*shared_bytes*/, abi::CUstream stream,
                        void** params, void** extra) {
  return Launch(function, Shape(grid_x, grid_y, grid_z, block_x, block_y, block_z), stream, params,
                extra, /*per_thread_default=*/false, /*cooperative=*/false);
}

CUresult cuLaunchKernel_ptsz(abi::CUfunction function, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int /*shared_bytes*/,
                             abi::CUstream stream, void** params, void** extra) {
  return Launch(function, Shape(grid_x, grid_y, grid_z, block_x, block_y, block_z), stream, params,
                extra, /*per_thread_default=*/true, /*cooperative=*/false);
}

CUresult cuLaunchKernelEx(const abi::CUlaunchConfig* config, abi::CUfunction function,
                          void** params, void** extra) {
  return LaunchEx(config, function, params, extra, /*per_thread_default=*/false);
}

CUresult cuLaunchKernelEx_ptsz(const abi::CUlaunchConfig* config, abi::CUfunction function,
                               void** params, void** extra) {
  return LaunchEx(config, function, params, extra, /*per_thread_default=*/true);
}

CUresult cuLaunchCooperativeKernel(abi::CUfunction function, unsigned int grid_x,
                                   unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                                   unsigned int block_y, unsigned int block_z,
                                   unsigned int /*shared_bytes*/, abi::CUstream stream,
                                   void** params) {
  return Launch(function, Shape(grid_x, grid_y, grid_z, block_x, block_y, block_z), stream, params,
                nullptr, /*per_thread_default=*/false, /*cooperative=*/true);
}

CUresult cuLaunchCooperativeKernel_ptsz(abi::CUfunction function, unsigned int grid_x,
                                        unsigned int grid_y, unsigned int grid_z,
                                        unsigned int block_x, unsigned int block_y,
                                        unsigned int block_z, unsigned int /*shared_bytes*/,
                                        abi::CUstream stream, void** params) {
  return Launch(function, Shape(grid_x, grid_y, grid_z, block_x, block_y, block_z), stream, params,
                nullptr, /*per_thread_default=*/true, /*cooperative=*/true);
}

}  // extern "C"
