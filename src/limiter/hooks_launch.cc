// Every way work reaches a GPU (kernel launches of all kinds and graph launches, with their
// per-thread-stream forms): on a GPU whose compute is arbitrated (the limit file's "compute"
// pair), a launch first waits for this process's turn (compute_arbiter.h). While others wait, the
// work a process has in flight is bounded by time: an event is recorded behind each launch, the
// GPU time a launch takes is measured from the events of launches queued back to back, and a
// launch waits until at most about half a turn's worth is in flight. The holder publishes when
// its queued work will be done; at the end of its turn it waits until that work ends within
// kHandOverNs, then hands the turn on. Without a compute setting, or alone and unlimited on the
// GPU, a launch costs a flag test or two loads.
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>

#include "limiter/compute_arbiter.h"
#include "limiter/hooks.h"
#include "limiter/own_gpu_time.h"
#include "limiter/prompt_wake.h"

using namespace gpufrac::abi;
using namespace gpufrac::limiter;

namespace {

constexpr int kInFlight = 48;
constexpr int kSamples = 7;
// Launches one sample of a launch's GPU time spans at most (Forget).
constexpr int kWindow = 8;
// Launches in flight at most, leaving the ring room for a window of forgotten ones.
constexpr int kMaxDepth = kInFlight - 2 - kWindow;
// A thread that saw its oldest launch end this much later than the GPU did was run late (a busy
// CPU): what follows is counted from the GPU's end. Sooner, from when it looked: with the GPU's
// end every time, an idle host's shares erred 0.95 points instead of 0.35 in the benchmark.
constexpr uint64_t kLateWakeNs = 300'000;

// Per arbitrated GPU, this process's launches in flight: the events recorded behind them, oldest
// first, in a ring, and what they teach about how long a launch takes.
struct InFlight {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  CUcontext context = nullptr;  // the events' context
  CUevent events[kInFlight] = {};
  bool timed[kInFlight] = {};  // created with timing (else: the simulator or driver ran out)
  // Queued while the launch before it (on any stream) was still unfinished, or right after a
  // marker: the GPU had this process's work all along from the one before's end to its own.
  bool behind[kInFlight] = {};
  // Not a launch's: recorded ahead of a launch onto an idle stream, to time it.
  bool marker[kInFlight] = {};
  int oldest = 0;
  int pending = 0;
  // GPU time per launch: the median of the last kSamples measured (a launch that shared the GPU
  // with another process's work measures long); 0 until one is measured.
  uint64_t launch_ns = 0;
  uint64_t samples[kSamples] = {};
  int sampled = 0;
  // When the launches in flight will be done, by launch_ns; 0: not known.
  uint64_t queued_until_ns = 0;
  // Recorded (with timing) as this process's work on the GPU last ran out, at anchor_ns on the
  // CPU's clock (0: none yet): the GPU time between it and a launch's event tells when that
  // launch ended on the CPU's clock, whenever this thread gets to look.
  CUevent anchor = nullptr;
  uint64_t anchor_ns = 0;
};

ComputeArbiter g_arbiters[kMaxLimitedGpus];
InFlight g_in_flight[kMaxLimitedGpus];
OwnGpuTime g_own_time[kMaxLimitedGpus];
// Whether any GPU is arbitrated, and which when exactly one GPU is limited (no lookup needed).
std::atomic<bool> g_any_arbiter{false};

int LaunchGpu() {
  if (g_rt.config.gpu_count == 1) return 0;
  return CurrentTarget().gpu;
}

// Under flight.lock: the oldest launch is done; learns from it how long a launch takes. Its slot
// keeps its event until the ring comes round (the ring holds at most kInFlight - 1), so later
// launches can still be measured against it.
//
// A launch takes the GPU's time from an earlier launch's end to its own, divided by the launches
// between, when each of them was queued behind the one before (up to kWindow): on one stream
// that is each launch's length; across streams whose work runs side by side it is their
// spacing, the GPU time each adds. (Timed one by one, four streams of 1 ms kernels that the GPU
// ran side by side measured 4 ms a launch: the holder's published end lay tens of milliseconds
// past its work's, and waiters slept while the GPU idled.)
void Forget(InFlight& flight) {
  const int i = flight.oldest;
  // The slots before it still hold the events of launches forgotten since they were recorded.
  const int history = kInFlight - flight.pending;
  int k = 0;
  while (k < kWindow && k < history && flight.behind[(i - k + kInFlight) % kInFlight]) ++k;
  const int from = (i - k + kInFlight) % kInFlight;
  float ms = 0;
  auto elapsed = Real_cuEventElapsedTime();
  if (k > 0 && flight.timed[i] && flight.timed[from] && elapsed != nullptr &&
      elapsed(&ms, flight.events[from], flight.events[i]) == CUDA_SUCCESS && ms > 0) {
    flight.samples[flight.sampled++ % kSamples] =
        static_cast<uint64_t>(static_cast<double>(ms) * 1e6) / static_cast<uint64_t>(k);
    uint64_t sorted[kSamples];
    const int n = std::min(flight.sampled, kSamples);
    std::copy(flight.samples, flight.samples + n, sorted);
    std::nth_element(sorted, sorted + n / 2, sorted + n);
    flight.launch_ns = sorted[n / 2];
  }
  flight.oldest = (i + 1) % kInFlight;
  --flight.pending;
}

// Under flight.lock: waits for the oldest launch. What is still in flight ends when its launches
// take from the oldest one's end (sooner or later than estimated before): now, or, when this
// thread was run more than kLateWakeNs after it, when it was by the GPU's clock against the
// anchor.
void WaitForOldest(InFlight& flight) {
  const int i = flight.oldest;
  Real_cuEventSynchronize()(flight.events[i]);
  uint64_t ended = MonotonicNs();
  float ms = 0;
  auto elapsed = Real_cuEventElapsedTime();
  if (flight.anchor_ns != 0 && flight.timed[i] && elapsed != nullptr &&
      elapsed(&ms, flight.anchor, flight.events[i]) == CUDA_SUCCESS && ms >= 0) {
    const uint64_t by_gpu = flight.anchor_ns + static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
    if (by_gpu + kLateWakeNs < ended) ended = by_gpu;
  }
  Forget(flight);
  if (flight.queued_until_ns != 0) {
    uint64_t launches = 0;
    for (int k = 0; k < flight.pending; ++k) {
      launches += flight.marker[(flight.oldest + k) % kInFlight] ? 0 : 1;
    }
    flight.queued_until_ns = ended + launches * flight.launch_ns;
  }
}

// At the end of a turn: waits until this process's work ends within kHandOverNs (by its
// measure; for all of it when that is not known) and returns when it ends (0: by now).
uint64_t Drain(ComputeArbiter& arbiter, InFlight& flight) {
  arbiter.SetDraining(true);
  pthread_mutex_lock(&flight.lock);
  uint64_t end = 0;
  if (flight.launch_ns != 0 && flight.queued_until_ns != 0) {
    while (flight.pending > 0 && flight.queued_until_ns > MonotonicNs() + kHandOverNs) {
      WaitForOldest(flight);
    }
    if (flight.pending > 0) end = flight.queued_until_ns;
  } else {
    pthread_mutex_unlock(&flight.lock);
    Real_cuCtxSynchronize()();
    pthread_mutex_lock(&flight.lock);
    while (flight.pending > 0) Forget(flight);
  }
  if (flight.pending == 0) flight.queued_until_ns = 0;
  pthread_mutex_unlock(&flight.lock);
  arbiter.SetDraining(false);
  return end;
}

// Under flight.lock: records the next event of the ring on `stream` (false: none could be).
// `measurable`: the GPU is this process's alone (its turn has begun: the last holder's work is
// done), so the launch's time between events is its own.
bool Record(InFlight& flight, CUstream stream, bool per_thread, bool marker, bool measurable) {
  const int i = (flight.oldest + flight.pending) % kInFlight;
  const int before = (i + kInFlight - 1) % kInFlight;
  if (flight.events[i] == nullptr) {
    flight.timed[i] = Real_cuEventCreate()(&flight.events[i], CU_EVENT_DEFAULT) == CUDA_SUCCESS;
    if (!flight.timed[i] &&
        Real_cuEventCreate()(&flight.events[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      flight.events[i] = nullptr;
      return false;
    }
  }
  flight.behind[i] =
      !marker && measurable && flight.pending > 0 &&
      (flight.marker[before] || Real_cuEventQuery()(flight.events[before]) == CUDA_ERROR_NOT_READY);
  if ((per_thread ? Real_cuEventRecord_ptsz()(flight.events[i], stream)
                  : Real_cuEventRecord()(flight.events[i], stream)) != CUDA_SUCCESS) {
    return false;
  }
  flight.marker[i] = marker;
  ++flight.pending;
  return true;
}

// Under flight.lock, with nothing of this process's unfinished: records the anchor on `stream`.
void Anchor(InFlight& flight, CUstream stream, bool per_thread) {
  flight.anchor_ns = 0;
  if (flight.anchor == nullptr &&
      Real_cuEventCreate()(&flight.anchor, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    flight.anchor = nullptr;
    return;
  }
  const uint64_t now = MonotonicNs();
  if ((per_thread ? Real_cuEventRecord_ptsz()(flight.anchor, stream)
                  : Real_cuEventRecord()(flight.anchor, stream)) == CUDA_SUCCESS) {
    flight.anchor_ns = now;
  }
}

// Before a launch on `stream`: when nothing this process queued is unfinished, records a marker
// ahead of it, so that the launch's GPU time can be measured (a launch behind an unfinished one
// is measured from that one's end).
void MarkIfIdle(InFlight& flight, CUstream stream, bool per_thread) {
  CUcontext context = nullptr;
  if (Real_cuCtxGetCurrent()(&context) != CUDA_SUCCESS || context != flight.context) return;
  pthread_mutex_lock(&flight.lock);
  while (flight.pending > 0 && Real_cuEventQuery()(flight.events[flight.oldest]) == CUDA_SUCCESS) {
    Forget(flight);
  }
  if (flight.pending == 0) {
    flight.queued_until_ns = 0;
    Anchor(flight, stream, per_thread);
    Record(flight, stream, per_thread, true, false);
  }
  pthread_mutex_unlock(&flight.lock);
}

// Records an event behind the launch just queued on `stream`, publishes when this process's
// work will be done, then waits (as draining: the holder is busy finishing work, not idle) until
// at most about half a turn's worth is in flight.
void Track(ComputeArbiter& arbiter, InFlight& flight, CUstream stream, bool per_thread,
           uint64_t launched_ns) {
  CUcontext context = nullptr;
  if (Real_cuCtxGetCurrent()(&context) != CUDA_SUCCESS || context == nullptr) return;
  pthread_mutex_lock(&flight.lock);
  if (flight.context != context) {
    // Events belong to a context: start over in this one (the old one's are left to it).
    for (CUevent& event : flight.events) event = nullptr;
    flight.anchor = nullptr;
    flight.anchor_ns = 0;
    flight.pending = 0;
    flight.queued_until_ns = 0;
    flight.context = context;
  }
  const uint64_t now = MonotonicNs();
  Record(flight, stream, per_thread, false, now >= arbiter.TurnStartNs());
  // A launch starts when what this process queued before it ends, when it was queued, and at its
  // turn's start at the earliest (the last holder's work runs until then). (Its launches measure
  // the time the GPU gave its workload's other processes between them: this is when its work
  // ends beside theirs.)
  if (flight.launch_ns != 0) {
    flight.queued_until_ns =
        std::max({flight.queued_until_ns, launched_ns, arbiter.TurnStartNs()}) + flight.launch_ns;
  }
  // At most about half a turn's worth in flight (none past this one for launches that long: the
  // next launch waits for this one, and a turn ends at most one launch late); two until the
  // launches' time is known.
  const uint64_t half_turn = arbiter.TurnNs() / 2;
  const int depth =
      flight.launch_ns == 0
          ? 2
          : static_cast<int>(std::min<uint64_t>(half_turn / flight.launch_ns, kMaxDepth));
  if (flight.pending > depth) {
    arbiter.SetDraining(true);
    while (flight.pending > depth) WaitForOldest(flight);
    arbiter.SetDraining(false);
  }
  arbiter.Queued(flight.queued_until_ns);
  pthread_mutex_unlock(&flight.lock);
  arbiter.Measure();
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
  WakePromptly();
  while (gate != ComputeArbiter::Gate::kGo) {
    if (gate == ComputeArbiter::Gate::kDrainThenRelease) {
      if (arbiter.Release(Drain(arbiter, g_in_flight[gpu]))) {
        gate = arbiter.Check();
        continue;
      }
    }
    if (!arbiter.Acquire()) break;
    gate = arbiter.Check();
  }
  const bool contended = arbiter.Contended();
  if (contended) {
    arbiter.Touch();
    MarkIfIdle(g_in_flight[gpu], stream, per_thread);
  }
  const uint64_t launched_ns = contended ? MonotonicNs() : 0;
  const CUresult result = launch();
  if (result == CUDA_SUCCESS && contended) {
    Track(arbiter, g_in_flight[gpu], stream, per_thread, launched_ns);
  }
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
    if (!limit.arbitrated) continue;
    char name[96];
    snprintf(name, sizeof(name), "compute.%s", limit.uuid);
    char err[400];
    if (g_arbiters[g].Attach(dir, name, g_rt.config.workload,
                             static_cast<uint32_t>(limit.compute_milli),
                             static_cast<uint32_t>(limit.compute_limit_milli), err, sizeof(err))) {
      g_any_arbiter.store(true, std::memory_order_relaxed);
      if (g_own_time[g].Open(limit.uuid)) g_arbiters[g].MeasureBy(&g_own_time[g]);
    } else if (!g_rt.config.quiet) {
      PrintError("gpufrac: %s; this process's GPU time on %s is not arbitrated\n", err, limit.uuid);
    }
  }
}

void ForkComputeArbiters() {
  for (ComputeArbiter& arbiter : g_arbiters) arbiter.ForkedChild();
  for (OwnGpuTime& own : g_own_time) own.ForkedChild();
  for (InFlight& flight : g_in_flight) {
    pthread_mutex_init(&flight.lock, nullptr);
    flight.context = nullptr;
    for (CUevent& event : flight.events) event = nullptr;
    flight.pending = 0;
    flight.launch_ns = 0;
    flight.sampled = 0;
    flight.queued_until_ns = 0;
    flight.anchor = nullptr;
    flight.anchor_ns = 0;
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
