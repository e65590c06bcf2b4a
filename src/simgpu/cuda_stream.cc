// Driver entry points for streams and kernel launches. A launch validates its arguments, adds the
// kernel's modelled duration to the stream (see sim_time.h) and returns; synchronisation waits
// until the context's compute engine has run the work (engine.h).
#include "simgpu/cuda_exports.h"
#include "simgpu/driver.h"
#include "simgpu/sim_time.h"

namespace {

namespace abi = gpufrac::abi;
namespace simgpu = gpufrac::simgpu;
using abi::CUresult;
using simgpu::Context;
using simgpu::Driver;
using simgpu::Stream;

constexpr unsigned int kMaxThreadsPerBlock = 1024;
constexpr unsigned int kMaxBlockZ = 64;
constexpr unsigned int kMaxGridX = 0x7fffffff;
constexpr unsigned int kMaxGridYZ = 65535;

bool IsSpecialStream(abi::CUstream stream) {
  return stream == nullptr || stream == abi::CU_STREAM_LEGACY ||
         stream == abi::CU_STREAM_PER_THREAD;
}

CUresult Launch(abi::CUfunction function, unsigned int grid_x, unsigned int grid_y,
                unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                unsigned int block_z, abi::CUstream stream, void** params, void** extra,
                bool per_thread_default) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  const auto* kernel = reinterpret_cast<const simgpu::Function*>(function);
  if (kernel == nullptr || kernel->magic != simgpu::Function::kMagic) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0 ||
      grid_x > kMaxGridX || grid_y > kMaxGridYZ || grid_z > kMaxGridYZ ||
      block_x > kMaxThreadsPerBlock || block_y > kMaxThreadsPerBlock || block_z > kMaxBlockZ ||
      static_cast<std::uint64_t>(block_x) * block_y * block_z > kMaxThreadsPerBlock ||
      (params != nullptr && extra != nullptr)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, stream, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  const double threads = static_cast<double>(grid_x) * grid_y * grid_z *
                         static_cast<double>(block_x * block_y * block_z);
  simgpu::EnqueueWork(*driver->machine, context, queue,
                      simgpu::KernelDurationNs(context->kernel_ns_per_thread, threads));
  return abi::CUDA_SUCCESS;
}

CUresult Synchronize(abi::CUstream handle, bool per_thread_default) {
  if (!IsSpecialStream(handle)) {
    // A created stream knows its context; it need not be current.
    Driver* driver;
    if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
    const auto* stream = reinterpret_cast<const Stream*>(handle);
    if (stream->magic != Stream::kMagic) return abi::CUDA_ERROR_INVALID_HANDLE;
    simgpu::WaitForStreamWork(*driver->machine, stream->context,
                              stream->done_ns.load(std::memory_order_relaxed));
    return abi::CUDA_SUCCESS;
  }
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  simgpu::StreamQueue queue;
  if (CUresult result = simgpu::ResolveStream(context, handle, per_thread_default, &queue);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  simgpu::WaitForStreamWork(*driver->machine, context, queue.done->load(std::memory_order_relaxed));
  return abi::CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuStreamCreate(abi::CUstream* handle, unsigned int flags) {
  Driver* driver;
  Context* context;
  if (CUresult result = simgpu::GetDriverAndContext(&driver, &context);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  if (handle == nullptr || (flags & ~abi::CU_STREAM_NON_BLOCKING) != 0) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(driver->mu);
  Stream* stream;
  if (driver->free_streams.empty()) {
    stream = new Stream;
  } else {
    stream = driver->free_streams.back();
    driver->free_streams.pop_back();
  }
  stream->context = context;
  stream->flags = flags;
  stream->done_ns.store(0, std::memory_order_relaxed);
  stream->magic = Stream::kMagic;
  driver->streams.insert(stream);
  *handle = simgpu::ToHandle(stream);
  return abi::CUDA_SUCCESS;
}

// Work already queued still completes (and cuCtxSynchronize still waits for it).
CUresult cuStreamDestroy_v2(abi::CUstream handle) {
  Driver* driver;
  if (CUresult result = simgpu::GetDriver(&driver); result != abi::CUDA_SUCCESS) return result;
  auto* stream = reinterpret_cast<Stream*>(handle);
  std::lock_guard lock(driver->mu);
  if (driver->streams.count(stream) == 0) return abi::CUDA_ERROR_INVALID_HANDLE;
  stream->magic = 0;
  driver->streams.erase(stream);
  driver->free_streams.push_back(stream);
  return abi::CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(abi::CUstream stream) {
  return Synchronize(stream, /*per_thread_default=*/false);
}

CUresult cuStreamSynchronize_ptsz(abi::CUstream stream) {
  return Synchronize(stream, /*per_thread_default=*/true);
}

CUresult cuLaunchKernel(abi::CUfunction function, unsigned int grid_x, unsigned int grid_y,
                        unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                        unsigned int block_z, unsigned int /*shared_bytes*/, abi::CUstream stream,
                        void** params, void** extra) {
  return Launch(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, stream, params, extra,
                /*per_thread_default=*/false);
}

CUresult cuLaunchKernel_ptsz(abi::CUfunction function, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int /*shared_bytes*/,
                             abi::CUstream stream, void** params, void** extra) {
  return Launch(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, stream, params, extra,
                /*per_thread_default=*/true);
}

}  // extern "C"
