// The limiter's process-wide state and the helpers every hook uses: the configuration read at load
// time, the real driver entry points, the budget per limited GPU, each thread's budget lane, and
// the tables that remember what each allocation was charged.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "limiter/alloc_table.h"
#include "limiter/budget.h"
#include "limiter/hook_table.h"
#include "limiter/limit_config.h"
#include "proc/process_identity.h"

namespace gpufrac::limiter {

namespace abi = ::gpufrac::abi;

enum class Library : int { Cuda = 0, Nvml = 1 };

enum SymbolId : int {
#define GPUFRAC_ID(lib, sym, opt) kId_##sym,
  GPUFRAC_HOOKS(GPUFRAC_ID) kHookCount,
  kFirstCall = kHookCount - 1,
  GPUFRAC_CALLS(GPUFRAC_ID) kSymbolCount
#undef GPUFRAC_ID
};

// --- real entry points (interpose.cc) ---
extern std::atomic<void*> g_real[kSymbolCount];
extern std::atomic<bool> g_resolved[2];
void ResolveLibrary(Library lib);

#define GPUFRAC_REAL(lib, sym, opt)                                                            \
  inline abi::entry::sym::Fn Real_##sym() {                                                    \
    if (__builtin_expect(                                                                      \
            !g_resolved[static_cast<int>(Library::lib)].load(std::memory_order_acquire), 0)) { \
      ResolveLibrary(Library::lib);                                                            \
    }                                                                                          \
    return reinterpret_cast<abi::entry::sym::Fn>(                                              \
        g_real[kId_##sym].load(std::memory_order_relaxed));                                    \
  }
GPUFRAC_HOOKS(GPUFRAC_REAL)
GPUFRAC_CALLS(GPUFRAC_REAL)
#undef GPUFRAC_REAL

// --- configuration and budgets (runtime.cc) ---
enum class Mode : int {
  kPassThrough,  // no limit file: touch nothing
  kActive,       // limits in force
  kBroken,       // a limit file exists but is unusable: CUDA must not start
};

struct GpuState {
  Budget budget;
  std::atomic<int> member{-1};  // this process's member slot in the budget
  std::atomic<bool> needs_anchor{false};
  // The primary context: references taken through the limiter and whether it is charged.
  pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
  int primary_refs = 0;
  bool primary_charged = false;
  uint64_t primary_context = 0;  // its handle, once retained
};

struct Runtime {
  Mode mode = Mode::kPassThrough;
  LimitConfig config{};
  char error[600]{};
  GpuState gpus[kMaxLimitedGpus];
  AllocTable pointers;  // device pointers (all cuMemAlloc* kinds, pools, managed)
  AllocTable objects;   // arrays, mipmapped arrays, contexts, memory pools
  AllocTable handles;   // cuMemCreate handles; the third word counts references to each
  AllocTable mappings;  // cuMemMap'ed ranges: start address -> size, and the handle mapped
  AllocTable contexts;  // context handle -> its instance number (third word)
};
extern Runtime g_rt;

inline bool Active() { return g_rt.mode == Mode::kActive; }

// Device ordinal -> index into g_rt.config.gpus, or -1 when that device has no limit.
int GpuForOrdinal(abi::CUdevice dev);

// Where an allocation made now by the calling thread lands: the limited GPU of its current context
// (-1 if none, or not limited) and that context's instance, whose destruction frees the memory.
// Instances are numbered by the limiter because the driver reuses handles: the primary context
// keeps its handle when it is destroyed and created again.
struct AllocTarget {
  int gpu;
  uint64_t context;
};
AllocTarget CurrentTarget();
// The context with this handle is about to be destroyed: returns its instance (0 if it has none)
// and makes the next context with the same handle a new instance.
uint64_t RetireContext(uint64_t handle);
// The driver refused to destroy it after all.
void RestoreContext(uint64_t handle, uint64_t instance);
// The GPU whose NVML handle is `device`, or -1.
int GpuForNvmlDevice(abi::nvmlDevice_t device);

// Reserves `bytes` on `gpu` for the calling thread's process. On refusal prints the over-limit
// line (unless quiet) and returns false.
bool Charge(int gpu, uint64_t bytes);
void Uncharge(int gpu, uint64_t bytes);

// The memory figures a workload sees for `gpu`, given what the device itself reports free.
void VirtualMemory(int gpu, uint64_t physical_free, uint64_t* total, uint64_t* free,
                   uint64_t* used);

// Restricts CUDA_VISIBLE_DEVICES to the limit file's GPUs before the driver reads it (at load
// time and in cuInit; hooks_devices.cc).
void RestrictCudaVisibleDevices();

// The compute arbiters of the GPUs whose limit carries a compute share (hooks_launch.cc): joined
// at load time, made the child's own after fork.
void AttachComputeArbiters();
void ForkComputeArbiters();

// Writes the broken-configuration message to stderr (once per process).
void ReportBroken();

// printf to stderr in one write, without the heap (lines longer than 700 bytes are cut).
void PrintError(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace gpufrac::limiter
