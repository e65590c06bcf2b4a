// Driver entry points for CUDA arrays and mipmapped arrays. An array charges its texel bytes to
// the current context's device: width * max(height,1) * max(depth,1) * element size, summed over
// mip levels that halve each dimension (real layouts add tiling padding, not simulated).
#include <algorithm>

#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/cuda/driver.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::ArrayObject;
using simgpu::Context;
using simgpu::Driver;

constexpr std::uint64_t kTooBig = ~std::uint64_t{0};

int BytesPerChannel(abi::CUarray_format format) {
  switch (format) {
    case abi::CU_AD_FORMAT_UNSIGNED_INT8:
    case abi::CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case abi::CU_AD_FORMAT_UNSIGNED_INT16:
    case abi::CU_AD_FORMAT_SIGNED_INT16:
    case abi::CU_AD_FORMAT_HALF:
      return 2;
    case abi::CU_AD_FORMAT_UNSIGNED_INT32:
    case abi::CU_AD_FORMAT_SIGNED_INT32:
    case abi::CU_AD_FORMAT_FLOAT:
      return 4;
  }
  return 0;
}

struct Extent {
  std::uint64_t width, height, depth;
  int element_bytes;
  bool layered;  // depth counts layers, which mip levels do not halve
};

// Validates a descriptor; false for CUDA_ERROR_INVALID_VALUE.
bool ToExtent(std::size_t width, std::size_t height, std::size_t depth, abi::CUarray_format format,
              unsigned int channels, unsigned int flags, Extent* extent) {
  const int channel_bytes = BytesPerChannel(format);
  if (channel_bytes == 0 || (channels != 1 && channels != 2 && channels != 4) || width == 0) {
    return false;
  }
  const bool layered = (flags & abi::CUDA_ARRAY3D_LAYERED) != 0;
  if (depth > 0 && height == 0 && !layered) return false;
  *extent = Extent{width, height, depth, channel_bytes * static_cast<int>(channels), layered};
  return true;
}

std::uint64_t LevelBytes(const Extent& extent, int level) {
  const auto shrink = [level](std::uint64_t size) {
    return size == 0 ? 1 : std::max<std::uint64_t>(1, size >> level);
  };
  const std::uint64_t depth =
      extent.layered ? std::max<std::uint64_t>(extent.depth, 1) : shrink(extent.depth);
  const unsigned __int128 bytes = static_cast<unsigned __int128>(shrink(extent.width)) *
                                  shrink(extent.height) * depth * extent.element_bytes;
  return bytes > kTooBig ? kTooBig : static_cast<std::uint64_t>(bytes);
}

int MaxLevels(const Extent& extent) {
  std::uint64_t largest =
      std::max({extent.width, extent.height, extent.layered ? std::uint64_t{0} : extent.depth});
  int levels = 0;
  while (largest > 0) {
    ++levels;
    largest >>= 1;
  }
  return levels;
}

CUresult CreateArray(const Extent& extent, unsigned int levels, bool mipmapped,
                     ArrayObject** created) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  std::uint64_t bytes = 0;
  for (unsigned int level = 0; level < levels; ++level) {
    const std::uint64_t level_bytes = LevelBytes(extent, static_cast<int>(level));
    bytes = level_bytes > kTooBig - bytes ? kTooBig : bytes + level_bytes;
  }
  std::lock_guard lock(driver->mu);
  if (CUresult result = driver->ChargeLocked(context->ordinal, bytes);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  auto* array = new ArrayObject{.context = context, .mipmapped = mipmapped, .bytes = bytes};
  driver->arrays.insert(array);
  *created = array;
  return abi::CUDA_SUCCESS;
}

CUresult DestroyArray(ArrayObject* array, bool mipmapped) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  std::lock_guard lock(driver->mu);
  if (array == nullptr || driver->arrays.count(array) == 0 || array->mipmapped != mipmapped) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  driver->ReleaseLocked(array->context->ordinal, array->bytes);
  driver->arrays.erase(array);
  delete array;
  return abi::CUDA_SUCCESS;
}

// Argument errors come after the initialisation and context checks, as for other calls.
CUresult InvalidValueUnlessUninitialised() {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  return abi::CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

extern "C" {

CUresult cuArrayCreate_v2(abi::CUarray* handle, const abi::CUDA_ARRAY_DESCRIPTOR* desc) {
  Extent extent;
  if (handle == nullptr || desc == nullptr ||
      !ToExtent(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0, &extent)) {
    return InvalidValueUnlessUninitialised();
  }
  ArrayObject* array;
  CUresult result = CreateArray(extent, 1, /*mipmapped=*/false, &array);
  if (result == abi::CUDA_SUCCESS) *handle = reinterpret_cast<abi::CUarray>(array);
  return result;
}

// The legacy forms take 32-bit extents; the arrays are the same.
CUresult cuArrayCreate(abi::CUarray* handle, const abi::CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  if (desc == nullptr) return cuArrayCreate_v2(handle, nullptr);
  const abi::CUDA_ARRAY_DESCRIPTOR wide{desc->Width, desc->Height, desc->Format, desc->NumChannels};
  return cuArrayCreate_v2(handle, &wide);
}

CUresult cuArray3DCreate(abi::CUarray* handle, const abi::CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  if (desc == nullptr) return cuArray3DCreate_v2(handle, nullptr);
  const abi::CUDA_ARRAY3D_DESCRIPTOR wide{desc->Width,  desc->Height,      desc->Depth,
                                          desc->Format, desc->NumChannels, desc->Flags};
  return cuArray3DCreate_v2(handle, &wide);
}

CUresult cuArray3DCreate_v2(abi::CUarray* handle, const abi::CUDA_ARRAY3D_DESCRIPTOR* desc) {
  Extent extent;
  if (handle == nullptr || desc == nullptr ||
      !ToExtent(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels,
                desc->Flags, &extent)) {
    return InvalidValueUnlessUninitialised();
  }
  ArrayObject* array;
  CUresult result = CreateArray(extent, 1, /*mipmapped=*/false, &array);
  if (result == abi::CUDA_SUCCESS) *handle = reinterpret_cast<abi::CUarray>(array);
  return result;
}

CUresult cuMipmappedArrayCreate(abi::CUmipmappedArray* handle,
                                const abi::CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels) {
  Extent extent;
  if (handle == nullptr || desc == nullptr ||
      !ToExtent(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels,
                desc->Flags, &extent) ||
      levels == 0 || levels > static_cast<unsigned int>(MaxLevels(extent))) {
    return InvalidValueUnlessUninitialised();
  }
  ArrayObject* array;
  CUresult result = CreateArray(extent, levels, /*mipmapped=*/true, &array);
  if (result == abi::CUDA_SUCCESS) *handle = reinterpret_cast<abi::CUmipmappedArray>(array);
  return result;
}

CUresult cuArrayDestroy(abi::CUarray handle) {
  return DestroyArray(reinterpret_cast<ArrayObject*>(handle), /*mipmapped=*/false);
}

CUresult cuMipmappedArrayDestroy(abi::CUmipmappedArray handle) {
  return DestroyArray(reinterpret_cast<ArrayObject*>(handle), /*mipmapped=*/true);
}

}  // extern "C"
