// Kernel launch checks (see kernel.h).
#include "simgpu/cuda/kernel.h"

#include <algorithm>

namespace gpufrac::simgpu {
namespace {

constexpr unsigned int kMaxThreadsPerBlock = 1024;
constexpr unsigned int kMaxBlockZ = 64;
constexpr unsigned int kMaxGridX = 0x7fffffff;
constexpr unsigned int kMaxGridYZ = 65535;

}  // namespace

double KernelShape::Threads() const {
  return static_cast<double>(Blocks()) * block[0] * block[1] * block[2];
}

unsigned long long KernelShape::Blocks() const {
  return static_cast<unsigned long long>(grid[0]) * grid[1] * grid[2];
}

abi::CUresult CheckKernel(abi::CUfunction function, const KernelShape& shape, void** params,
                          void** extra) {
  const auto* kernel = reinterpret_cast<const Function*>(function);
  if (kernel == nullptr || kernel->magic != Function::kMagic) {
    return abi::CUDA_ERROR_INVALID_HANDLE;
  }
  const unsigned int* grid = shape.grid;
  const unsigned int* block = shape.block;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 ||
      block[2] == 0 || grid[0] > kMaxGridX || grid[1] > kMaxGridYZ || grid[2] > kMaxGridYZ ||
      block[0] > kMaxThreadsPerBlock || block[1] > kMaxThreadsPerBlock || block[2] > kMaxBlockZ ||
      static_cast<unsigned long long>(block[0]) * block[1] * block[2] > kMaxThreadsPerBlock ||
      (params != nullptr && extra != nullptr)) {
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  return abi::CUDA_SUCCESS;
}

int MaxBlocksPerSm(const gpu::GpuModel& model) {
  if (model.architecture == "Turing") return 16;
  if (model.architecture == "Ada") return 24;
  return 32;
}

int MaxThreadsPerSm(const gpu::GpuModel& model) {
  if (model.architecture == "Turing") return 1024;
  if (model.architecture == "Ada") return 1536;
  return 2048;
}

bool FitsCooperatively(const gpu::GpuModel& model, int sm_count, const KernelShape& shape) {
  const unsigned long long threads_per_block =
      static_cast<unsigned long long>(shape.block[0]) * shape.block[1] * shape.block[2];
  const unsigned long long per_sm = std::min<unsigned long long>(
      MaxBlocksPerSm(model), MaxThreadsPerSm(model) / threads_per_block);
  return shape.Blocks() <= per_sm * static_cast<unsigned long long>(sm_count);
}

}  // namespace gpufrac::simgpu
