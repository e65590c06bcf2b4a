// CUDA contexts of the simulated driver and each thread's context stack. A context belongs to
// one device, costs the model's context_bytes of device memory while active, and owns the
// allocations, streams, modules and arrays created while it was current.
#pragma once

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "gpu/catalogue.h"
#include "simgpu/core/engine.h"

namespace gpufrac::simgpu {

struct Context {
  static constexpr std::uint32_t kMagic = 0x43747821;

  std::uint32_t magic = kMagic;
  int ordinal = 0;   // CUdevice, as this process numbers devices
  int physical = 0;  // index in the shared machine
  const gpu::GpuModel* model = nullptr;
  bool primary = false;
  double kernel_ns_per_thread = 0;
  int sm_count = 0;  // of the device (or MIG device) it runs on

  // True while the context holds its memory and resources. Read without the driver lock on hot
  // paths; changed only with the driver lock held.
  std::atomic<bool> active{false};
  // Guarded by the driver lock.
  bool destroyed = false;    // a non-primary context after cuCtxDestroy
  int primary_refcount = 0;  // cuDevicePrimaryCtxRetain minus Release

  // The context's place on its device's compute engine while active; its streams' completion
  // times below are on the engine clock of that seat (engine.h). `activation` counts the times
  // the context was (re)activated, so stale per-thread stream entries can be told apart.
  EngineSeat engine;
  std::atomic<std::uint64_t> activation{0};

  // Simulated completion times on the engine clock: of the legacy default stream, of all work
  // on blocking streams (the legacy one included), and of all work on non-blocking streams.
  std::atomic<std::uint64_t> legacy_done_ns{0};
  std::atomic<std::uint64_t> blocking_done_ns{0};
  std::atomic<std::uint64_t> non_blocking_done_ns{0};

  // When everything queued in the context will have completed.
  std::uint64_t AllDoneNs() const {
    const std::uint64_t blocking = blocking_done_ns.load(std::memory_order_relaxed);
    const std::uint64_t non_blocking = non_blocking_done_ns.load(std::memory_order_relaxed);
    return blocking > non_blocking ? blocking : non_blocking;
  }
};

inline abi::CUcontext ToHandle(Context* context) {
  return reinterpret_cast<abi::CUcontext>(context);
}
inline Context* ContextFromHandle(abi::CUcontext handle) {
  return reinterpret_cast<Context*>(handle);
}

// The top of the calling thread's context stack (kept apart from the rest of the stack so the
// hot paths read one trivially-initialised thread-local).
extern thread_local constinit Context* t_current_context;

inline Context* CurrentContext() { return t_current_context; }

// cuCtxPushCurrent: `context` becomes current, the previous one is kept beneath it.
void PushContext(Context* context);

// cuCtxPopCurrent: removes and returns the current context (nullptr if the stack is empty).
Context* PopContext();

// cuCtxSetCurrent: replaces the current context; nullptr pops it.
void SetCurrentContext(Context* context);

// Empties the calling thread's stack (used in a forked child, whose contexts are its parent's).
void ForgetThreadContexts();

}  // namespace gpufrac::simgpu
