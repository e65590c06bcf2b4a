// Process-local state of the simulated CUDA driver: the devices this process sees, its slot in
// the shared machine, and every object it has created. One instance, published by cuInit.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "abi/cuda_abi.h"
#include "gpu/catalogue.h"
#include "simgpu/core/kernel_fault.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/core/uuid.h"
#include "simgpu/cuda/allocation_table.h"
#include "simgpu/cuda/context.h"
#include "simgpu/cuda/event.h"
#include "simgpu/cuda/graph.h"
#include "simgpu/cuda/memory_objects.h"
#include "simgpu/cuda/module.h"
#include "simgpu/cuda/stream.h"

namespace gpufrac::simgpu {

struct VisibleDevice {
  int physical = 0;
  const gpu::GpuModel* model = nullptr;
  Uuid uuid{};         // the MIG device's own UUID for a MIG device
  Uuid parent_uuid{};  // the GPU's UUID (what cuDeviceGetUuid v1 reports for a MIG device)
  std::string name;    // cuDeviceGetName: the model's, or "<model> MIG 1g.10gb"
  std::uint64_t total_bytes = 0;  // the GPU's memory, or the MIG device's
  int sm_count = 0;
  int gpu_instance = -1;  // the MIG device's GPU instance; -1 for a whole GPU
  int compute_instance = -1;
  std::uint64_t mig_generation = 0;  // the GPU instance's generation when the process bound to it
  // As an MPS client: the server's group on the engine (0 without MPS), the share of the SMs
  // the process's kernels may use (sm_count is already that share of the device's), and its
  // pinned device memory limit (0: none).
  std::uint64_t mps_group = 0;
  std::uint32_t mps_share_ppm = kWholeEnginePpm;
  std::uint64_t mps_limit_bytes = 0;
};

struct Driver {
  // Fixed after cuInit.
  SharedMachine* machine = nullptr;
  std::vector<VisibleDevice> devices;  // by CUDA ordinal (after CUDA_VISIBLE_DEVICES)
  // The slot claimed at cuInit, kept (unlike `slot`) after exit begins: its sticky errors and
  // own memory figures are read without the lock.
  ProcessSlot* own_slot = nullptr;
  int mps_server_fd = -1;  // the connection to the MPS server; -1 without MPS

  std::mutex mu;
  // Everything below is guarded by `mu`.
  ProcessSlot* slot = nullptr;  // nullptr once the process has started exiting
  AllocationTable allocations;
  std::unordered_set<Context*> contexts;       // every context ever made; never freed, so stale
                                               // handles stay safe to inspect
  std::vector<Context*> primary_contexts;      // by ordinal; created on first retain
  std::unordered_set<Stream*> streams;         // live created streams
  std::vector<Stream*> free_streams;           // destroyed stream objects, reused
  std::unordered_set<Event*> events;           // live events
  std::vector<Event*> free_events;             // destroyed event objects, reused
  std::unordered_set<Graph*> graphs;           // graphs not destroyed (nodes belong to them)
  std::unordered_set<GraphExec*> graph_execs;  // executable graphs not destroyed
  std::unordered_set<Module*> modules;         // loaded modules
  std::vector<Module*> unloaded_modules;       // kept, so stale function handles fail cleanly
  std::unordered_set<ArrayObject*> arrays;
  std::vector<MemPool*> default_pools;    // by ordinal; created on first use
  std::unordered_set<MemPool*> pools;     // every pool not destroyed, default ones included
  std::vector<MemPool*> destroyed_pools;  // kept: their allocations may still be freed
  std::unordered_map<abi::CUmemGenericAllocationHandle, PhysicalAllocation> physical;
  abi::CUmemGenericAllocationHandle next_physical_handle = 0x100000;  // never reused
  // cuMemMap mappings by start address; reservations themselves are kReservation entries of
  // `allocations`.
  std::map<abi::CUdeviceptr, Mapping> mappings;

  int device_count() const { return static_cast<int>(devices.size()); }
  bool ValidOrdinal(abi::CUdevice ordinal) const {
    return ordinal >= 0 && ordinal < device_count();
  }

  // Charges `bytes` of device memory to this process (reclaiming dead processes' memory if the
  // device is full). CUDA_ERROR_OUT_OF_MEMORY if they do not fit, or would take the process past
  // its MPS pinned memory limit on the device; CUDA_ERROR_DEINITIALIZED once the process is
  // exiting. Caller holds `mu`.
  abi::CUresult ChargeLocked(int ordinal, std::uint64_t bytes);
  void ReleaseLocked(int ordinal, std::uint64_t bytes);

  // Places, charges and records an allocation described by `spec` (size, charge, device,
  // context, kind); host-accessible kinds get real anonymous memory. Caller holds `mu`.
  abi::CUresult AllocateLocked(const Allocation& spec, abi::CUdeviceptr* base);
  // Frees the allocation starting at `base`; CUDA_ERROR_INVALID_VALUE if there is none (or it
  // is an address reservation, which only cuMemAddressFree frees).
  abi::CUresult FreeLocked(abi::CUdeviceptr base);

  // Ends the stream's capture, if any, throwing its graph away. Caller holds `mu`.
  void DiscardCaptureLocked(Stream* stream);

  // Makes a context hold its memory again: charges context_bytes, joins its device's compute
  // engine (CUDA_ERROR_OUT_OF_MEMORY when the engine has no room for another context) and marks
  // it active.
  abi::CUresult ActivateContextLocked(Context* context);
  // Frees everything the context owns (allocations, arrays, streams, events, executable graphs,
  // modules) and its own memory, leaves the compute engine (its queued work is dropped), and
  // marks it inactive.
  void TeardownContextLocked(Context* context);
};

// The published driver; nullptr before a successful-enough cuInit (or in a forked child).
extern constinit std::atomic<Driver*> g_driver;

// cuInit: reads the environment, joins the shared machine and publishes the driver. The outcome
// of the first call sticks, as with the real driver.
abi::CUresult InitializeDriver(unsigned int flags);

// The driver, or CUDA_ERROR_NOT_INITIALIZED.
inline abi::CUresult GetDriver(Driver** driver) {
  *driver = g_driver.load(std::memory_order_acquire);
  return *driver != nullptr ? abi::CUDA_SUCCESS : abi::CUDA_ERROR_NOT_INITIALIZED;
}

// Slow path of GetDriverAndContext: the current context is not active (destroyed, released, or
// a primary context reset while still retained, which comes back to life on use).
abi::CUresult ReviveCurrentContext(Driver* driver, Context* context);

// The sticky error (kernel_fault.h) of the context's device, CUDA_SUCCESS if none.
inline abi::CUresult StickyErrorOf(const Driver* driver, const Context* context) {
  return StickyError(*driver->own_slot, context->physical);
}

// The driver and the calling thread's current context, ready for use; the error a context-bound
// driver call returns otherwise (a sticky error of the context's device included).
inline abi::CUresult GetDriverAndContext(Driver** driver, Context** context) {
  if (abi::CUresult result = GetDriver(driver); result != abi::CUDA_SUCCESS) return result;
  *context = CurrentContext();
  if (*context == nullptr) return abi::CUDA_ERROR_INVALID_CONTEXT;
  if ((*driver)->own_slot->fault_devices.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (abi::CUresult sticky = StickyErrorOf(*driver, *context); sticky != abi::CUDA_SUCCESS) {
      return sticky;
    }
  }
  if ((*context)->active.load(std::memory_order_acquire)) return abi::CUDA_SUCCESS;
  return ReviveCurrentContext(*driver, *context);
}

}  // namespace gpufrac::simgpu
