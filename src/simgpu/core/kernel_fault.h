// Fatal errors of CUDA contexts on the simulated machine and how far they reach: a faulting
// kernel takes its own process's contexts on that GPU, or under MPS (NVIDIA's "error
// containment" for Volta and later) every client of the same server on the GPUs those clients
// share; a lost MPS server takes all of its client's contexts. The error is sticky: it is kept in
// the process's slot (ProcessSlot::fault_devices / fault_error) and every context-bound driver
// call on those GPUs returns it until the process exits.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "abi/cuda_abi.h"
#include "simgpu/core/shared_machine.h"

namespace gpufrac::simgpu {

// The contexts of the process in `slot` on the physical devices of `device_mask` fail with
// `error`: their queued work is dropped, waits on them end, and the error sticks (the first
// error a process gets is the one it keeps reporting).
void FailProcess(SharedMachine& machine, ProcessSlot& slot, std::uint32_t device_mask,
                 abi::CUresult error);

// A kernel of process `pid` on physical device `device` hits a fatal fault (an illegal memory
// access, CUDA_ERROR_ILLEGAL_ADDRESS). Without MPS it takes that process's contexts on the
// device. If the process is an MPS client there, it takes every client of the same server on
// the devices the fault is contained in: `device`, then every device on which a client affected
// so far also runs, until no more are added. Returns false (and does nothing) when the process
// has no context on the device. `*contained` (optional) receives the devices it reached.
bool InjectKernelFault(SharedMachine& machine, int device, pid_t pid,
                       std::uint32_t* contained = nullptr);

// The sticky error of the process in `slot` on `device`, CUDA_SUCCESS if none.
inline abi::CUresult StickyError(const ProcessSlot& slot, int device) {
  if ((slot.fault_devices.load(std::memory_order_acquire) & (1u << device)) == 0) {
    return abi::CUDA_SUCCESS;
  }
  return static_cast<abi::CUresult>(slot.fault_error.load(std::memory_order_relaxed));
}

}  // namespace gpufrac::simgpu
