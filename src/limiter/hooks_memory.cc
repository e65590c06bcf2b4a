// The charged allocation paths and their frees: every way a program takes device memory is charged
// to its workload's budget before the driver allocates, rolled back if the driver fails, and
// released by the matching free.
#include "limiter/hooks.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace {

// Charges `bytes` to the placement's GPU, lets the driver `allocate`, and records the handle it
// produced under the charge in `table`. A failed driver call gives the charge back.
template <typename Allocate, typename Key>
CUresult Charged(AllocTable& table, AllocTarget at, uint64_t bytes, Allocate allocate, Key key) {
  if (!Charge(at.gpu, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = allocate();
  if (r != CUDA_SUCCESS) {
    Uncharge(at.gpu, bytes);
    return r;
  }
  // A full table cannot record the handle: the charge then stays until the process ends, which
  // errs on the side of the limit.
  table.Insert(key(), ChargeRecord{bytes, at.gpu, at.context});
  return r;
}

// Releases what `key` was charged once the driver has freed it. Handles we never charged pass
// through untouched; a failed free keeps the charge.
template <typename Free>
CUresult Released(AllocTable& table, uint64_t key, Free free_it) {
  ChargeRecord charge;
  bool charged = table.Take(key, &charge);
  CUresult r = free_it();
  if (charged) {
    if (r == CUDA_SUCCESS) {
      Uncharge(charge.gpu, charge.bytes);
    } else {
      table.Insert(key, charge);
    }
  }
  return r;
}

// The charge for memory a device pointer points to, for every cuMemAlloc* flavour.
template <typename Allocate>
CUresult ChargedPointer(AllocTarget at, uint64_t bytes, CUdeviceptr* dptr, Allocate allocate) {
  return Charged(g_rt.pointers, at, bytes, allocate, [dptr] { return *dptr; });
}

// Where a pool allocates: on the GPU recorded at cuMemPoolCreate, else (default and device pools)
// the current context's. GPU -1 when it is host memory or a GPU without a limit.
AllocTarget TargetForPool(CUmemoryPool pool) {
  AllocTarget at = CurrentTarget();
  ChargeRecord recorded;
  if (g_rt.objects.Find(reinterpret_cast<uint64_t>(pool), &recorded)) {
    at.gpu = recorded.gpu < kMaxLimitedGpus ? recorded.gpu : -1;
  }
  return at;
}
constexpr int kNotLimitedPool = 0xff;

CUresult AllocAsync(cuMemAllocAsync_t real, CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  if (!Active()) return Bypass(real, dptr, bytes, stream);
  AllocTarget at = CurrentTarget();
  if (at.gpu < 0 || !dptr || bytes == 0) return real(dptr, bytes, stream);
  return ChargedPointer(at, bytes, dptr, [&] { return real(dptr, bytes, stream); });
}

CUresult AllocFromPool(cuMemAllocFromPoolAsync_t real, CUdeviceptr* dptr, size_t bytes,
                       CUmemoryPool pool, CUstream stream) {
  if (!Active()) return Bypass(real, dptr, bytes, pool, stream);
  AllocTarget at = TargetForPool(pool);
  if (at.gpu < 0 || !dptr || bytes == 0) return real(dptr, bytes, pool, stream);
  return ChargedPointer(at, bytes, dptr, [&] { return real(dptr, bytes, pool, stream); });
}

CUresult FreeAsync(cuMemFreeAsync_t real, CUdeviceptr dptr, CUstream stream) {
  if (!Active()) return Bypass(real, dptr, stream);
  return Released(g_rt.pointers, dptr, [&] { return real(dptr, stream); });
}

// Bytes of one element of an array: channels x the size of the channel format. Formats not listed
// (block-compressed, video) are charged 4 bytes a channel, at least what any of them takes.
uint64_t ElementBytes(CUarray_format format, unsigned channels) {
  uint64_t per_channel = 4;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      per_channel = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      per_channel = 2;
      break;
    default:
      break;
  }
  return per_channel * (channels ? channels : 1);
}

// Bytes of a (mipmapped) array: each level halves width, height and depth (unless layered:
// then Depth counts layers).
uint64_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  uint64_t total = 0;
  uint64_t w = d.Width, h = d.Height, depth = d.Depth;
  for (unsigned l = 0; l < (levels ? levels : 1); ++l) {
    total +=
        (w ? w : 1) * (h ? h : 1) * (depth ? depth : 1) * ElementBytes(d.Format, d.NumChannels);
    w = w > 1 ? w / 2 : 1;
    if (h) h = h > 1 ? h / 2 : 1;
    if (depth && !(d.Flags & CUDA_ARRAY3D_LAYERED)) depth = depth > 1 ? depth / 2 : 1;
  }
  return total;
}

template <typename Handle>
uint64_t Key(Handle h) {
  return reinterpret_cast<uint64_t>(h);
}

}  // namespace

extern "C" CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  auto real = Real_cuMemAlloc_v2();
  if (!Active()) return Bypass(real, dptr, bytes);
  AllocTarget at = CurrentTarget();
  if (at.gpu < 0 || !dptr || bytes == 0) return real(dptr, bytes);
  return ChargedPointer(at, bytes, dptr, [&] { return real(dptr, bytes); });
}

extern "C" CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  // Managed memory may migrate to the host, but it can all be resident on the GPU at once, so it
  // is charged in full.
  auto real = Real_cuMemAllocManaged();
  if (!Active()) return Bypass(real, dptr, bytes, flags);
  AllocTarget at = CurrentTarget();
  if (at.gpu < 0 || !dptr || bytes == 0) return real(dptr, bytes, flags);
  return ChargedPointer(at, bytes, dptr, [&] { return real(dptr, bytes, flags); });
}

extern "C" CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                       size_t height, unsigned int element_bytes) {
  auto real = Real_cuMemAllocPitch_v2();
  if (!Active()) return Bypass(real, dptr, pitch, width, height, element_bytes);
  AllocTarget at = CurrentTarget();
  const int gpu = at.gpu;
  if (gpu < 0 || !dptr || !pitch || width == 0 || height == 0) {
    return real(dptr, pitch, width, height, element_bytes);
  }
  // The driver chooses the pitch; rows are aligned to at most 512 bytes on every NVIDIA GPU, so
  // this estimate is charged first and corrected to the real pitch afterwards.
  const uint64_t estimate = ((width + 511) / 512) * 512 * height;
  if (!Charge(gpu, estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(dptr, pitch, width, height, element_bytes);
  if (r != CUDA_SUCCESS) {
    Uncharge(gpu, estimate);
    return r;
  }
  const uint64_t actual = static_cast<uint64_t>(*pitch) * height;
  if (actual > estimate && !Charge(gpu, actual - estimate)) {
    Real_cuMemFree_v2()(*dptr);
    Uncharge(gpu, estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (actual < estimate) Uncharge(gpu, estimate - actual);
  g_rt.pointers.Insert(*dptr, ChargeRecord{actual, gpu, at.context});
  return r;
}

extern "C" CUresult cuMemFree_v2(CUdeviceptr dptr) {
  auto real = Real_cuMemFree_v2();
  if (!Active()) return Bypass(real, dptr);
  return Released(g_rt.pointers, dptr, [&] { return real(dptr); });
}

extern "C" CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return AllocAsync(Real_cuMemAllocAsync(), dptr, bytes, stream);
}
extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return AllocAsync(Real_cuMemAllocAsync_ptsz(), dptr, bytes, stream);
}
extern "C" CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                            CUstream stream) {
  return AllocFromPool(Real_cuMemAllocFromPoolAsync(), dptr, bytes, pool, stream);
}
extern "C" CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                 CUstream stream) {
  return AllocFromPool(Real_cuMemAllocFromPoolAsync_ptsz(), dptr, bytes, pool, stream);
}
// The charge is released when the program frees, not when the pool later returns the memory to
// the device: what a workload holds is what it has allocated and not freed.
extern "C" CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(Real_cuMemFreeAsync(), dptr, stream);
}
extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(Real_cuMemFreeAsync_ptsz(), dptr, stream);
}

extern "C" CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  auto real = Real_cuMemPoolCreate();
  if (!Active()) return Bypass(real, pool, props);
  CUresult r = real(pool, props);
  if (r == CUDA_SUCCESS && pool && props) {
    int gpu = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                  ? GpuForOrdinal(props->location.id)
                  : -1;
    g_rt.objects.Insert(Key(*pool), ChargeRecord{0, gpu >= 0 ? gpu : kNotLimitedPool, 0});
  }
  return r;
}

extern "C" CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  auto real = Real_cuMemPoolDestroy();
  if (!Active()) return Bypass(real, pool);
  // A pool itself is charged nothing (its allocations are): only forget where it allocates.
  ChargeRecord record;
  bool known = g_rt.objects.Take(Key(pool), &record);
  CUresult r = real(pool);
  if (r != CUDA_SUCCESS && known) g_rt.objects.Insert(Key(pool), record);
  return r;
}

extern "C" CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto real = Real_cuArrayCreate_v2();
  if (!Active()) return Bypass(real, array, desc);
  AllocTarget at = CurrentTarget();
  if (at.gpu < 0 || !array || !desc) return real(array, desc);
  CUDA_ARRAY3D_DESCRIPTOR as3d{desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0};
  return Charged(
      g_rt.objects, at, ArrayBytes(as3d, 1), [&] { return real(array, desc); },
      [array] { return Key(*array); });
}

extern "C" CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  auto real = Real_cuArray3DCreate_v2();
  if (!Active()) return Bypass(real, array, desc);
  AllocTarget at = CurrentTarget();
  if (at.gpu < 0 || !array || !desc) return real(array, desc);
  return Charged(
      g_rt.objects, at, ArrayBytes(*desc, 1), [&] { return real(array, desc); },
      [array] { return Key(*array); });
}

extern "C" CUresult cuMipmappedArrayCreate(CUmipmappedArray* array,
                                           const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                           unsigned int levels) {
  auto real = Real_cuMipmappedArrayCreate();
  if (!Active()) return Bypass(real, array, desc, levels);
  AllocTarget at = CurrentTarget();
  if (at.gpu < 0 || !array || !desc) return real(array, desc, levels);
  return Charged(
      g_rt.objects, at, ArrayBytes(*desc, levels), [&] { return real(array, desc, levels); },
      [array] { return Key(*array); });
}

extern "C" CUresult cuArrayDestroy(CUarray array) {
  auto real = Real_cuArrayDestroy();
  if (!Active()) return Bypass(real, array);
  return Released(g_rt.objects, Key(array), [&] { return real(array); });
}

extern "C" CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
  auto real = Real_cuMipmappedArrayDestroy();
  if (!Active()) return Bypass(real, array);
  return Released(g_rt.objects, Key(array), [&] { return real(array); });
}
