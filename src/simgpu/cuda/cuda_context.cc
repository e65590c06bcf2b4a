// Driver entry points for contexts: creation and destruction, the per-thread context stack,
// synchronisation, and the refcounted primary context of each device.
#include "simgpu/core/sim_time.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;

Context* NewContextLocked(Driver* driver, int ordinal, bool primary) {
  auto* context = new Context;
  context->ordinal = ordinal;
  context->physical = driver->devices[ordinal].physical;
  context->model = driver->devices[ordinal].model;
  context->primary = primary;
  context->kernel_ns_per_thread = simgpu::KernelNsPerThread(driver->devices[ordinal].sm_count);
  context->sm_count = driver->devices[ordinal].sm_count;
  driver->contexts.insert(context);
  return context;
}

CUresult CreateContext(abi::CUcontext* handle, unsigned int flags, abi::CUdevice ordinal) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr || (flags & ~abi::CU_CTX_FLAGS_MASK) != 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  if (!driver->ValidOrdinal(ordinal)) return abi::CUDA_ERROR_INVALID_DEVICE;
  Context* context;
  {
    std::lock_guard lock(driver->mu);
    context = NewContextLocked(driver, ordinal, /*primary=*/false);
    if (CUresult result = driver->ActivateContextLocked(context); result != abi::CUDA_SUCCESS) {
      context->destroyed = true;  // kept, like every context object, but never usable
      return result;
    }
  }
  simgpu::PushContext(context);
  *handle = simgpu::ToHandle(context);
  return abi::CUDA_SUCCESS;
}

// Whether `context` may become current: a live context, or a primary context that is still
// retained (a reset one comes back to life on use).
CUresult CheckUsable(Driver* driver, Context* context) {
  std::lock_guard lock(driver->mu);
  if (driver->contexts.count(context) == 0) return abi::CUDA_ERROR_INVALID_CONTEXT;
  if (context->primary) {
    return context->primary_refcount > 0 ? abi::CUDA_SUCCESS : abi::CUDA_ERROR_INVALID_CONTEXT;
  }
  return context->destroyed ? abi::CUDA_ERROR_CONTEXT_IS_DESTROYED : abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// The pre-3.2 form takes the same arguments and makes the same context.
CUresult cuCtxCreate(abi::CUcontext* handle, unsigned int flags, abi::CUdevice ordinal) {
  return CreateContext(handle, flags, ordinal);
}

CUresult cuCtxCreate_v2(abi::CUcontext* handle, unsigned int flags, abi::CUdevice ordinal) {
  return CreateContext(handle, flags, ordinal);
}

// Execution affinity (SM partitioning) is accepted and ignored.
CUresult cuCtxCreate_v3(abi::CUcontext* handle, abi::CUexecAffinityParam* params, int count,
                        unsigned int flags, abi::CUdevice ordinal) {
  if (count < 0 || (count > 0 && params == nullptr)) return abi::CUDA_ERROR_INVALID_VALUE;
  return CreateContext(handle, flags, ordinal);
}

// The creation parameters (execution affinity, CIG) are opaque here and ignored.
CUresult cuCtxCreate_v4(abi::CUcontext* handle, abi::CUctxCreateParams* /*params*/,
                        unsigned int flags, abi::CUdevice ordinal) {
  return CreateContext(handle, flags, ordinal);
}

CUresult cuCtxDestroy_v2(abi::CUcontext handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  Context* context = simgpu::ContextFromHandle(handle);
  {
    std::lock_guard lock(driver->mu);
    if (driver->contexts.count(context) == 0 || context->primary || context->destroyed) {
      return abi::CUDA_ERROR_INVALID_CONTEXT;
    }
    driver->TeardownContextLocked(context);
    context->destroyed = true;
  }
  if (simgpu::CurrentContext() == context) simgpu::PopContext();
  return abi::CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(abi::CUcontext* handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *handle = simgpu::ToHandle(simgpu::CurrentContext());
  return abi::CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(abi::CUcontext handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  Context* context = simgpu::ContextFromHandle(handle);
  if (context != nullptr) {
    if (CUresult result = CheckUsable(driver, context); result != abi::CUDA_SUCCESS) {
      return result;
    }
  }
  simgpu::SetCurrentContext(context);
  return abi::CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(abi::CUcontext handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  Context* context = simgpu::ContextFromHandle(handle);
  if (CUresult result = CheckUsable(driver, context); result != abi::CUDA_SUCCESS) return result;
  simgpu::PushContext(context);
  return abi::CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(abi::CUcontext* handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (simgpu::CurrentContext() == nullptr) return abi::CUDA_ERROR_INVALID_CONTEXT;
  Context* popped = simgpu::PopContext();
  if (handle != nullptr) *handle = simgpu::ToHandle(popped);
  return abi::CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(abi::CUdevice* device) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (device == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  *device = context->ordinal;
  return abi::CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  simgpu::WaitForStreamWork(*driver->machine, context, context->AllDoneNs());
  return simgpu::StickyErrorOf(driver, context);  // a fatal error may have ended the wait
}

// CUDA 13's form (what its runtime's cudaDeviceSynchronize resolves): the context named, or the
// current one for NULL.
CUresult cuCtxSynchronize_v2(abi::CUcontext handle) {
  if (handle == nullptr) return cuCtxSynchronize();
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  Context* context = simgpu::ContextFromHandle(handle);
  if (CUresult result = CheckUsable(driver, context); result != abi::CUDA_SUCCESS) return result;
  simgpu::WaitForStreamWork(*driver->machine, context, context->AllDoneNs());
  return simgpu::StickyErrorOf(driver, context);
}

CUresult cuDevicePrimaryCtxRetain(abi::CUcontext* handle, abi::CUdevice ordinal) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (handle == nullptr) return abi::CUDA_ERROR_INVALID_VALUE;
  if (!driver->ValidOrdinal(ordinal)) return abi::CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(driver->mu);
  Context*& context = driver->primary_contexts[ordinal];
  if (context == nullptr) context = NewContextLocked(driver, ordinal, /*primary=*/true);
  if (!context->active.load(std::memory_order_relaxed)) {
    if (CUresult result = driver->ActivateContextLocked(context); result != abi::CUDA_SUCCESS) {
      return result;
    }
  }
  ++context->primary_refcount;
  *handle = simgpu::ToHandle(context);
  return abi::CUDA_SUCCESS;
}

// The last release resets the context (frees everything it holds); it is not popped from any
// thread's stack.
CUresult cuDevicePrimaryCtxRelease_v2(abi::CUdevice ordinal) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (!driver->ValidOrdinal(ordinal)) return abi::CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(driver->mu);
  Context* context = driver->primary_contexts[ordinal];
  if (context == nullptr || context->primary_refcount == 0) {
    return abi::CUDA_ERROR_INVALID_CONTEXT;
  }
  if (--context->primary_refcount == 0 && context->active.load(std::memory_order_relaxed)) {
    driver->TeardownContextLocked(context);
  }
  return abi::CUDA_SUCCESS;
}

// Frees everything the primary context holds but keeps its references: a still-retained context
// is re-created on its next use.
CUresult cuDevicePrimaryCtxReset_v2(abi::CUdevice ordinal) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  if (!driver->ValidOrdinal(ordinal)) return abi::CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(driver->mu);
  Context* context = driver->primary_contexts[ordinal];
  if (context != nullptr && context->active.load(std::memory_order_relaxed)) {
    driver->TeardownContextLocked(context);
  }
  return abi::CUDA_SUCCESS;
}

}  // extern "C"
