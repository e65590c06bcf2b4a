// Kernel launch rules shared by every way of launching a kernel (cuLaunchKernel, cuLaunchKernelEx,
// cuLaunchCooperativeKernel, graph kernel nodes): argument checks and the co-residency limit of
// cooperative launches.
#pragma once

#include "abi/cuda_abi.h"
#include "gpu/catalogue.h"
#include "simgpu/cuda/module.h"

namespace gpufrac::simgpu {

struct KernelShape {
  unsigned int grid[3] = {1, 1, 1};
  unsigned int block[3] = {1, 1, 1};

  double Threads() const;
  unsigned long long Blocks() const;
};

// CUDA_ERROR_INVALID_HANDLE for a function that is not a loaded kernel; CUDA_ERROR_INVALID_VALUE
// for a zero or too large dimension (block at most 1024 threads, 1024 x 1024 x 64; grid at most
// 2^31-1 x 65535 x 65535) or both `params` and `extra` given.
abi::CUresult CheckKernel(abi::CUfunction function, const KernelShape& shape, void** params,
                          void** extra);

// Resident blocks and threads per SM of the model's architecture (CUDA's compute capability
// tables: 16 blocks / 1024 threads on Turing, 24 / 1536 on Ada, 32 / 2048 on Ampere GA100,
// Hopper and Blackwell).
int MaxBlocksPerSm(const gpu::GpuModel& model);
int MaxThreadsPerSm(const gpu::GpuModel& model);

// Whether every block of a cooperative launch can be resident at once on `sm_count` SMs (the
// documented condition of cuLaunchCooperativeKernel; registers and shared memory are not
// modelled, so only the block and thread limits count).
bool FitsCooperatively(const gpu::GpuModel& model, int sm_count, const KernelShape& shape);

}  // namespace gpufrac::simgpu
