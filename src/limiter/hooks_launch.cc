// Every way work reaches a GPU (kernel launches of all kinds and graph launches, with their
// per-thread-stream forms): on a GPU whose compute is arbitrated (the limit file's "compute"
// pair), a launch first waits for this process's turn (compute_arbiter.h). While others wait, the
// work a process has in flight is bounded: an event is recorded behind each launch, and a launch
// waits until at most about half a turn's worth is in flight; at the end of its turn the process
// waits for all its work before handing the turn on, and is charged for that time. Without a
// compute setting, or alone and unlimited on the GPU, a launch costs a flag test or two loads.
#include <pthread.h>
#include <time.h>

#include <atomic>

#include "limiter/compute_arbiter.h"
#include "limiter/hooks.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace {

constexpr int kInFlight = 8;
constexpr unsigned kEventDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING

// Per arbitrated GPU, this process's launches in flight: the events recorded behind them, oldest
// first, in a ring.
struct InFlight {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  CUcontext context = nullptr;  // the events' context
  CUevent events[kInFlight] = {};
  int oldest = 0;
  int pending = 0;
  // How many launches may stay in flight (at most kInFlight - 1): fewer when waiting for the
  // oldest takes long (long kernels), so that what is queued past the end of a turn stays about
  // half a turn's worth.
  int depth = 2;
};

ComputeArbiter g_arbiters[kMaxLimitedGpus];
InFlight g_in_flight[kMaxLimitedGpus];
// Whether any GPU is arbitrated, and which when exactly one GPU is limited (no lookup needed).
std::atomic<bool> g_any_arbiter{false};

int LaunchGpu() {
  if (g_rt.config.gpu_count == 1) return 0;
  return CurrentTarget().gpu;
}

// Waits for everything this process queued in its current context on the GPU.
void Drain(ComputeArbiter& arbiter, InFlight& flight) {
  arbiter.SetDraining(true);
  Real_cuCtxSynchronize()();
  arbiter.SetDraining(false);
  pthread_mutex_lock(&flight.lock);
  flight.pending = 0;
  pthread_mutex_unlock(&flight.lock);
}

// Records an event behind the launch just queued on `stream`, then waits (as draining: the holder
// is busy finishing work, not idle) until at most `depth` launches are in flight.
void Track(ComputeArbiter& arbiter, InFlight& flight, CUstream stream, bool per_thread) {
  CUcontext context = nullptr;
  if (Real_cuCtxGetCurrent()(&context) != CUDA_SUCCESS || context == nullptr) return;
  pthread_mutex_lock(&flight.lock);
  if (flight.context != context) {
    // Events belong to a context: start over in this one (the old one's are left to it).
    for (CUevent& event : flight.events) event = nullptr;
    flight.pending = 0;
    flight.context = context;
  }
  const int i = (flight.oldest + flight.pending) % kInFlight;
  if (flight.events[i] == nullptr &&
      Real_cuEventCreate()(&flight.events[i], kEventDisableTiming) != CUDA_SUCCESS) {
    flight.events[i] = nullptr;
  } else if ((per_thread ? Real_cuEventRecord_ptsz()(flight.events[i], stream)
                         : Real_cuEventRecord()(flight.events[i], stream)) == CUDA_SUCCESS) {
    ++flight.pending;
  }
  if (flight.pending > flight.depth) {
    arbiter.SetDraining(true);
    while (flight.pending > flight.depth) {
      const uint64_t start = MonotonicNs();
      Real_cuEventSynchronize()(flight.events[flight.oldest]);
      const uint64_t waited = MonotonicNs() - start;
      flight.oldest = (flight.oldest + 1) % kInFlight;
      --flight.pending;
      // With more in flight than the depth, the GPU finishes about one launch per wait: keep
      // at most half a turn's worth queued (none, for launches that long: the next launch waits
      // for this one, and a turn ends at most one launch late).
      if (waited > 0) {
        const uint64_t want = arbiter.TurnNs() / 2 / waited;
        flight.depth = want >= kInFlight - 1 ? kInFlight - 1 : static_cast<int>(want);
      }
    }
    arbiter.SetDraining(false);
  }
  pthread_mutex_unlock(&flight.lock);
}

// Whether launches on `stream` are being captured into a graph (they put no work on the GPU, and
// nothing may synchronise or record on the stream meanwhile).
bool Capturing(CUstream stream, bool per_thread) {
  auto is_capturing = per_thread ? Real_cuStreamIsCapturing_ptsz() : Real_cuStreamIsCapturing();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing != nullptr && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Runs `launch` (which queues work on `stream`) under the arbiter of its GPU.
template <typename Launch>
CUresult Gated(CUstream stream, bool per_thread, Launch launch) {
  if (!g_any_arbiter.load(std::memory_order_relaxed)) return launch();
  const int gpu = LaunchGpu();
  if (gpu < 0 || !g_arbiters[gpu].attached()) return launch();
  ComputeArbiter& arbiter = g_arbiters[gpu];
  ComputeArbiter::Gate gate = arbiter.Check();
  // The fast path: it holds the turn, nobody waits, no limit.
  if (gate == ComputeArbiter::Gate::kGo && !arbiter.Contended()) return launch();
  if (Capturing(stream, per_thread)) return launch();
  while (gate != ComputeArbiter::Gate::kGo) {
    if (gate == ComputeArbiter::Gate::kDrainThenRelease) {
      Drain(arbiter, g_in_flight[gpu]);
      if (arbiter.Release()) {
        gate = arbiter.Check();
        continue;
      }
    }
    if (!arbiter.Acquire()) break;
    gate = arbiter.Check();
  }
  const bool contended = arbiter.Contended();
  if (contended) arbiter.Touch();
  const CUresult result = launch();
  if (result == CUDA_SUCCESS && contended) Track(arbiter, g_in_flight[gpu], stream, per_thread);
  return result;
}

}  // namespace

namespace gpufrac::limiter {

void AttachComputeArbiters() {
  // A container's own /dev/shm has no neighbours: its launcher names where the arbiters are.
  const char* dir =
      g_rt.config.arbiter_dir[0] != '\0' ? g_rt.config.arbiter_dir : g_rt.config.budget_dir;
  if (dir[0] == '\0') return;
  for (int g = 0; g < g_rt.config.gpu_count; ++g) {
    const GpuLimit& limit = g_rt.config.gpus[g];
    if (limit.compute_milli == 0) continue;
    char name[96];
    snprintf(name, sizeof(name), "compute.%s", limit.uuid);
    char err[400];
    if (g_arbiters[g].Attach(dir, name, g_rt.config.workload,
                             static_cast<uint32_t>(limit.compute_milli),
                             static_cast<uint32_t>(limit.compute_limit_milli), err, sizeof(err))) {
      g_any_arbiter.store(true, std::memory_order_relaxed);
    } else if (!g_rt.config.quiet) {
      PrintError("gpufrac: %s; this process's GPU time on %s is not arbitrated\n", err, limit.uuid);
    }
  }
}

void ForkComputeArbiters() {
  for (ComputeArbiter& arbiter : g_arbiters) arbiter.ForkedChild();
  for (InFlight& flight : g_in_flight) {
    pthread_mutex_init(&flight.lock, nullptr);
    flight.context = nullptr;
    for (CUevent& event : flight.events) event = nullptr;
    flight.pending = 0;
  }
}

}  // namespace gpufrac::limiter

extern "C" CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void** params,
                                   void** extra) {
  return Gated(stream, false, [&] {
    return Real_cuLaunchKernel()(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  });
}
extern "C" CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream stream,
                                        void** params, void** extra) {
  return Gated(stream, true, [&] {
    return Real_cuLaunchKernel_ptsz()(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  });
}
extern "C" CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                     void** extra) {
  return Gated(config ? config->hStream : nullptr, false,
               [&] { return Real_cuLaunchKernelEx()(config, f, params, extra); });
}
extern "C" CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                          void** extra) {
  return Gated(config ? config->hStream : nullptr, true,
               [&] { return Real_cuLaunchKernelEx_ptsz()(config, f, params, extra); });
}
extern "C" CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                              unsigned int gz, unsigned int bx, unsigned int by,
                                              unsigned int bz, unsigned int shared, CUstream stream,
                                              void** params) {
  return Gated(stream, false, [&] {
    return Real_cuLaunchCooperativeKernel()(f, gx, gy, gz, bx, by, bz, shared, stream, params);
  });
}
extern "C" CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                   unsigned int gz, unsigned int bx,
                                                   unsigned int by, unsigned int bz,
                                                   unsigned int shared, CUstream stream,
                                                   void** params) {
  return Gated(stream, true, [&] {
    return Real_cuLaunchCooperativeKernel_ptsz()(f, gx, gy, gz, bx, by, bz, shared, stream, params);
  });
}
// A holder waiting for its own work is finishing its turn, not idle: the others let it (up to
// kDrainGraceNs past its end) rather than take the turn and share the GPU with that work.
template <typename Wait>
CUresult Synchronizing(Wait wait) {
  if (!g_any_arbiter.load(std::memory_order_relaxed)) return wait();
  const int gpu = LaunchGpu();
  if (gpu < 0 || !g_arbiters[gpu].attached() || !g_arbiters[gpu].Holding()) return wait();
  g_arbiters[gpu].SetDraining(true);
  const CUresult result = wait();
  g_arbiters[gpu].SetDraining(false);
  return result;
}

extern "C" CUresult cuCtxSynchronize() {
  return Synchronizing([] { return Real_cuCtxSynchronize()(); });
}
// CUDA 13's runtime synchronises a device (cudaDeviceSynchronize, torch.cuda.synchronize) with
// this form: unseen, a holder waiting for its work would look idle and lose its turn while that
// work still runs, in the next holder's time.
extern "C" CUresult cuCtxSynchronize_v2(CUcontext context) {
  return Synchronizing([&] { return Real_cuCtxSynchronize_v2()(context); });
}
extern "C" CUresult cuStreamSynchronize(CUstream stream) {
  return Synchronizing([&] { return Real_cuStreamSynchronize()(stream); });
}
extern "C" CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  return Synchronizing([&] { return Real_cuStreamSynchronize_ptsz()(stream); });
}
extern "C" CUresult cuEventSynchronize(CUevent event) {
  return Synchronizing([&] { return Real_cuEventSynchronize()(event); });
}
extern "C" CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return Gated(stream, false, [&] { return Real_cuGraphLaunch()(exec, stream); });
}
extern "C" CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return Gated(stream, true, [&] { return Real_cuGraphLaunch_ptsz()(exec, stream); });
}
