// The entry points from before CUDA 3.2, with 32-bit pointers and sizes (cuMemAlloc, cuCtxCreate,
// ...). The driver still exports them and cuGetProcAddress hands them to callers asking for a
// cudaVersion below 3020. Their _v2 forms are charged or virtualised; these are refused while a
// limit is in force (CUDA_ERROR_NOT_SUPPORTED and one line on stderr), so that no allocation
// reaches the driver uncharged and no figure of the whole device is shown. No program built
// since CUDA 3.2 (2010) calls them.
#include <atomic>

#include "limiter/hooks.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace {

std::atomic<bool> g_reported[kHookCount];

template <typename Fn, typename... Args>
CUresult Refused(SymbolId id, const char* name, Fn real, Args... args) {
  if (!Active()) return Bypass(real, args...);
  if (!g_reported[id].exchange(true, std::memory_order_relaxed)) {
    PrintError(
        "gpufrac: %s is the 32-bit form from before CUDA 3.2, which is not supported under a GPU "
        "memory limit: it fails with CUDA_ERROR_NOT_SUPPORTED (use %s_v2)\n",
        name, name);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

extern "C" CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  return Refused(kId_cuDeviceTotalMem, "cuDeviceTotalMem", Real_cuDeviceTotalMem(), bytes, dev);
}
extern "C" CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return Refused(kId_cuCtxCreate, "cuCtxCreate", Real_cuCtxCreate(), pctx, flags, dev);
}
extern "C" CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytes) {
  return Refused(kId_cuMemAlloc, "cuMemAlloc", Real_cuMemAlloc(), dptr, bytes);
}
extern "C" CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pitch, unsigned int width,
                                    unsigned int height, unsigned int element_bytes) {
  return Refused(kId_cuMemAllocPitch, "cuMemAllocPitch", Real_cuMemAllocPitch(), dptr, pitch, width,
                 height, element_bytes);
}
extern "C" CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  return Refused(kId_cuMemFree, "cuMemFree", Real_cuMemFree(), dptr);
}
extern "C" CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  return Refused(kId_cuMemGetInfo, "cuMemGetInfo", Real_cuMemGetInfo(), free, total);
}
extern "C" CUresult cuArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  return Refused(kId_cuArrayCreate, "cuArrayCreate", Real_cuArrayCreate(), array, desc);
}
extern "C" CUresult cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  return Refused(kId_cuArray3DCreate, "cuArray3DCreate", Real_cuArray3DCreate(), array, desc);
}
