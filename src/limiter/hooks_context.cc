// Contexts: each CUDA context takes device memory of its own (code, stacks, heaps) before the
// program allocates anything. It is charged as the per-context amount the launcher wrote into the
// limit file (a per-GPU-model estimate): per created context, and once for the primary context
// while it is retained. Destroying a context (or resetting or fully releasing the primary one)
// frees everything allocated in it, so the charges of those allocations are released too.
#include "limiter/hooks.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace {

template <typename Create>
CUresult ChargedContext(CUcontext* pctx, CUdevice dev, Create create) {
  int gpu = pctx ? GpuForOrdinal(dev) : -1;
  uint64_t bytes = gpu >= 0 ? g_rt.gpus[gpu].budget.context_bytes() : 0;
  if (bytes == 0) return create();
  if (!Charge(gpu, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = create();
  if (r != CUDA_SUCCESS) {
    Uncharge(gpu, bytes);
    return r;
  }
  g_rt.objects.Insert(reinterpret_cast<uint64_t>(*pctx), ChargeRecord{bytes, gpu, 0});
  return r;
}

// The driver has destroyed the context `instance` and with it every allocation made in it.
void ReleaseAllocationsOf(uint64_t instance) {
  auto release = [](uint64_t, const ChargeRecord& c) { Uncharge(c.gpu, c.bytes); };
  g_rt.pointers.TakeAllOwnedBy(instance, release);
  g_rt.objects.TakeAllOwnedBy(instance, release);
}

}  // namespace

extern "C" CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  auto real = Real_cuCtxCreate_v2();
  if (!Active()) return Bypass(real, pctx, flags, dev);
  return ChargedContext(pctx, dev, [&] { return real(pctx, flags, dev); });
}

extern "C" CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int count,
                                   unsigned int flags, CUdevice dev) {
  auto real = Real_cuCtxCreate_v3();
  if (!Active()) return Bypass(real, pctx, params, count, flags, dev);
  return ChargedContext(pctx, dev, [&] { return real(pctx, params, count, flags, dev); });
}

extern "C" CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                   CUdevice dev) {
  auto real = Real_cuCtxCreate_v4();
  if (!Active()) return Bypass(real, pctx, params, flags, dev);
  return ChargedContext(pctx, dev, [&] { return real(pctx, params, flags, dev); });
}

extern "C" CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto real = Real_cuCtxDestroy_v2();
  if (!Active()) return Bypass(real, ctx);
  const uint64_t handle = reinterpret_cast<uint64_t>(ctx);
  ChargeRecord charge;
  bool charged = g_rt.objects.Take(handle, &charge);
  // Retired before the driver runs: a new context that gets this handle is another instance.
  uint64_t instance = RetireContext(handle);
  CUresult r = real(ctx);
  if (r != CUDA_SUCCESS) {
    RestoreContext(handle, instance);
    if (charged) g_rt.objects.Insert(handle, charge);
    return r;
  }
  if (charged) Uncharge(charge.gpu, charge.bytes);
  if (instance) ReleaseAllocationsOf(instance);
  return r;
}

// The primary context's calls run under its GPU's lock, driver call included: what the driver
// does to the reference count and what the limiter records must not interleave with another
// thread's retain or release.
extern "C" CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  auto real = Real_cuDevicePrimaryCtxRetain();
  if (!Active()) return Bypass(real, pctx, dev);
  int gpu = pctx ? GpuForOrdinal(dev) : -1;
  if (gpu < 0) return real(pctx, dev);
  GpuState& gs = g_rt.gpus[gpu];
  const uint64_t bytes = gs.budget.context_bytes();
  pthread_mutex_lock(&gs.primary_lock);
  // The first reference creates the context, so it is charged before the driver runs.
  bool charge_now = !gs.primary_charged && bytes > 0;
  if (charge_now && !Charge(gpu, bytes)) {
    pthread_mutex_unlock(&gs.primary_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = real(pctx, dev);
  if (r == CUDA_SUCCESS) {
    ++gs.primary_refs;
    gs.primary_charged = gs.primary_charged || charge_now;
    gs.primary_context = reinterpret_cast<uint64_t>(*pctx);
  } else if (charge_now) {
    Uncharge(gpu, bytes);
  }
  pthread_mutex_unlock(&gs.primary_lock);
  return r;
}

extern "C" CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  auto real = Real_cuDevicePrimaryCtxRelease_v2();
  if (!Active()) return Bypass(real, dev);
  int gpu = GpuForOrdinal(dev);
  if (gpu < 0) return real(dev);
  GpuState& gs = g_rt.gpus[gpu];
  pthread_mutex_lock(&gs.primary_lock);
  // The last reference destroys the context: retire it first, so that a context created again
  // with the same handle is a new instance whose allocations the sweep leaves alone.
  const uint64_t handle = gs.primary_refs == 1 ? gs.primary_context : 0;
  const uint64_t instance = handle ? RetireContext(handle) : 0;
  CUresult r = real(dev);
  if (r != CUDA_SUCCESS) {
    RestoreContext(handle, instance);
    pthread_mutex_unlock(&gs.primary_lock);
    return r;
  }
  if (gs.primary_refs > 0) --gs.primary_refs;
  const bool uncharge = gs.primary_refs == 0 && gs.primary_charged;
  if (gs.primary_refs == 0) {
    gs.primary_charged = false;
    gs.primary_context = 0;
  }
  pthread_mutex_unlock(&gs.primary_lock);
  if (uncharge) Uncharge(gpu, gs.budget.context_bytes());
  if (instance) ReleaseAllocationsOf(instance);
  return r;
}

// A reset destroys every allocation in the primary context but keeps its references: the context
// comes back on its next use, so its own charge stays.
extern "C" CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  auto real = Real_cuDevicePrimaryCtxReset_v2();
  if (!Active()) return Bypass(real, dev);
  int gpu = GpuForOrdinal(dev);
  if (gpu < 0) return real(dev);
  GpuState& gs = g_rt.gpus[gpu];
  pthread_mutex_lock(&gs.primary_lock);
  const uint64_t handle = gs.primary_context;
  const uint64_t instance = handle ? RetireContext(handle) : 0;
  CUresult r = real(dev);
  if (r != CUDA_SUCCESS) RestoreContext(handle, instance);
  pthread_mutex_unlock(&gs.primary_lock);
  if (r == CUDA_SUCCESS && instance) ReleaseAllocationsOf(instance);
  return r;
}
