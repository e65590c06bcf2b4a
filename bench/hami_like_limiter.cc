// libhami_like.so: the compute-share benchmark's peer, a launch throttle built the way HAMi-core
// describes its own (a token bucket of grid sizes refilled by a utilisation feedback loop), so
// that gpufrac is compared with that approach on the same simulated GPU. Benchmark-only: never
// installed, never used by gpufrac. See docs/compute-benchmark.md for the sources it follows.
//
// Mechanism, as published for HAMi-core (src/multiprocess/multiprocess_utilization_watcher.c and
// the analyses in HAMi-core issues #274 and #314):
//  - Each process holds a bucket of "CUDA cores" tokens whose ceiling starts at
//    SMs x max threads per SM x 32. A hooked launch waits, sleeping 10 ms at a time, while the
//    bucket is negative, then takes its grid size (blocks) from it; the bucket may go negative.
//  - A watcher thread wakes every 120 ms, reads the process's recent SM utilisation, and moves
//    its refill amount ("share") up when the utilisation is at or below the limit and down when
//    above, by a step of SMs^2 x threads per SM x diff / 2560 (diff = |limit - util|, at least 5),
//    multiplied by 2 x diff / (limit + 1) when diff exceeds half the limit. It then adds the share
//    to the bucket (capped at the ceiling). When the share sits at the ceiling and the bucket is
//    still negative, the ceiling doubles.
//  - Throttled entry points: cuLaunchKernel and cuLaunchKernelEx. Graph launches, cooperative
//    launches and the per-thread-stream forms pass through unthrottled, as in HAMi-core.
//
// Environment: HAMI_LIKE_SHARE (the limit as a fraction, e.g. 0.25; HAMi-core's
// CUDA_DEVICE_SM_LIMIT is that in percent), HAMI_LIKE_STEP=linear (the step without one SM factor,
// as proposed in HAMi-core PR #317; default: the published quadratic step), HAMI_LIKE_LOG=1 (one
// line per watcher tick on stderr).
//
// Utilisation: HAMi-core asks NVML (nvmlDeviceGetProcessUtilization) for the samples of the last
// second and sums the SM utilisation of its processes. NVML returns, per process, its utilisation
// over the driver's last sample period. The simulated NVML does not model per-process samples, so
// a sampler thread here measures them the same way from the simulator's ground truth
// (simgpuGetProcessEngineTime): at every boundary of NVML's 1/6 s sample period it records this
// process's share of the period just ended. That is exact, so if anything it helps the peer.
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "abi/cuda_abi.h"
#include "simgpu/core/engine_truth.h"

using namespace gpufrac::abi;

namespace {

constexpr int64_t kFactor = 32;
constexpr int64_t kTickNs = 120'000'000;    // the watcher's period
constexpr int64_t kCycleNs = 10'000'000;    // a throttled launch's sleep
constexpr int64_t kPeriodNs = 1'000'000'000 / 6;  // NVML's (and simgpu's) sample period
// CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR; the simulator does not answer it, and
// models 2048 resident threads per SM (H100's figure), so that is the fallback.
constexpr int kMaxThreadsPerSmAttribute = 39;

struct Peer {
  int limit = 0;  // percent; 0 or >= 100: not throttled
  bool linear_step = false;
  bool log = false;
  cuLaunchKernel_t launch = nullptr;
  cuLaunchKernelEx_t launch_ex = nullptr;
  std::atomic<int64_t> tokens{0};
  std::atomic<int64_t> ceiling{0};
  int64_t sms = 0;
  int64_t threads_per_sm = 0;
  // The last complete sample period's utilisation of this process, percent; -1 before the first.
  std::atomic<int> util{-1};
  pthread_once_t started = PTHREAD_ONCE_INIT;
};

Peer g_peer;

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

void SleepUntil(int64_t at_ns) {
  timespec ts{static_cast<time_t>(at_ns / 1'000'000'000),
              static_cast<long>(at_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

// Plays the driver's side of nvmlDeviceGetProcessUtilization for this process.
void* Sampler(void*) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  auto engine_time = nvml == nullptr ? nullptr
                                     : reinterpret_cast<gpufrac::simgpu::simgpuGetProcessEngineTime_t>(
                                           dlsym(nvml, gpufrac::simgpu::kSimgpuGetProcessEngineTimeSymbol));
  if (engine_time == nullptr) {
    std::fprintf(stderr, "hami_like: no simgpuGetProcessEngineTime: utilisation unknown\n");
    return nullptr;
  }
  const unsigned pid = static_cast<unsigned>(getpid());
  int64_t boundary = (MonoNs() / kPeriodNs + 1) * kPeriodNs;
  SleepUntil(boundary);
  unsigned long long last = 0;
  engine_time(0, pid, &last);
  for (;;) {
    boundary += kPeriodNs;
    SleepUntil(boundary);
    unsigned long long now = 0;
    if (engine_time(0, pid, &now) != 0) continue;
    const int64_t used = static_cast<int64_t>(now - last);
    last = now;
    const int64_t percent = (used * 100 + kPeriodNs / 2) / kPeriodNs;
    g_peer.util.store(static_cast<int>(percent > 100 ? 100 : percent), std::memory_order_relaxed);
  }
}

int64_t Step(int limit, int util, int64_t share) {
  const int diff = std::abs(limit - util) < 5 ? 5 : std::abs(limit - util);
  const int64_t sm_factor = g_peer.linear_step ? 1 : g_peer.sms;
  int64_t step = sm_factor * g_peer.sms * g_peer.threads_per_sm * diff / 2560;
  if (diff > limit / 2) step = step * diff * 2 / (limit + 1);  // far off: move faster
  const int64_t ceiling = g_peer.ceiling.load(std::memory_order_relaxed);
  if (util <= limit) return share + step > ceiling ? ceiling : share + step;
  return share - step < 0 ? 0 : share - step;
}

void AddTokens(int64_t amount) {
  int64_t before = g_peer.tokens.load(std::memory_order_relaxed);
  int64_t after;
  do {
    const int64_t ceiling = g_peer.ceiling.load(std::memory_order_relaxed);
    after = before + amount > ceiling ? ceiling : before + amount;
  } while (!g_peer.tokens.compare_exchange_weak(before, after, std::memory_order_relaxed));
}

void* Watcher(void*) {
  int64_t share = 0;
  for (;;) {
    SleepNs(kTickNs);
    const int util = g_peer.util.load(std::memory_order_relaxed);
    // No sample yet (or none this process made in the last second) reads as 0, as NVML returns
    // no entry for a process without utilisation.
    const int seen = util < 0 ? 0 : util;
    if (share == g_peer.ceiling.load(std::memory_order_relaxed) &&
        g_peer.tokens.load(std::memory_order_relaxed) < 0) {
      g_peer.ceiling.store(share * 2, std::memory_order_relaxed);
      share *= 2;
    }
    share = Step(g_peer.limit, seen, share);
    AddTokens(share);
    if (g_peer.log) {
      std::fprintf(stderr, "hami_like: util=%d share=%lld tokens=%lld ceiling=%lld\n", seen,
                   static_cast<long long>(share),
                   static_cast<long long>(g_peer.tokens.load(std::memory_order_relaxed)),
                   static_cast<long long>(g_peer.ceiling.load(std::memory_order_relaxed)));
    }
  }
}

// On the first throttled launch (the program has a context by then): the device's size, the
// bucket, and the two threads.
void Start() {
  auto get_device = reinterpret_cast<cuCtxGetDevice_t>(dlsym(RTLD_DEFAULT, "cuCtxGetDevice"));
  auto attribute =
      reinterpret_cast<cuDeviceGetAttribute_t>(dlsym(RTLD_DEFAULT, "cuDeviceGetAttribute"));
  CUdevice device = 0;
  int sms = 0, threads = 0;
  if (get_device != nullptr) get_device(&device);
  if (attribute != nullptr) {
    attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    if (attribute(&threads, static_cast<CUdevice_attribute>(kMaxThreadsPerSmAttribute), device) !=
        CUDA_SUCCESS) {
      threads = 2048;
    }
  }
  g_peer.sms = sms > 0 ? sms : 132;
  g_peer.threads_per_sm = threads > 0 ? threads : 2048;
  g_peer.ceiling.store(g_peer.sms * g_peer.threads_per_sm * kFactor, std::memory_order_relaxed);
  pthread_t thread;
  pthread_create(&thread, nullptr, Sampler, nullptr);
  pthread_detach(thread);
  pthread_create(&thread, nullptr, Watcher, nullptr);
  pthread_detach(thread);
}

void RateLimit(int64_t grid) {
  if (g_peer.limit <= 0 || g_peer.limit >= 100) return;
  pthread_once(&g_peer.started, Start);
  int64_t before = g_peer.tokens.load(std::memory_order_relaxed);
  for (;;) {
    if (before < 0) {
      SleepNs(kCycleNs);
      before = g_peer.tokens.load(std::memory_order_relaxed);
      continue;
    }
    if (g_peer.tokens.compare_exchange_weak(before, before - grid, std::memory_order_relaxed)) {
      return;
    }
  }
}

__attribute__((constructor)) void Init() {
  g_peer.launch = reinterpret_cast<cuLaunchKernel_t>(dlsym(RTLD_NEXT, "cuLaunchKernel"));
  g_peer.launch_ex = reinterpret_cast<cuLaunchKernelEx_t>(dlsym(RTLD_NEXT, "cuLaunchKernelEx"));
  if (const char* share = getenv("HAMI_LIKE_SHARE")) {
    g_peer.limit = static_cast<int>(std::atof(share) * 100 + 0.5);
  }
  const char* step = getenv("HAMI_LIKE_STEP");
  g_peer.linear_step = step != nullptr && std::strcmp(step, "linear") == 0;
  const char* log = getenv("HAMI_LIKE_LOG");
  g_peer.log = log != nullptr && log[0] == '1';
}

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult cuLaunchKernel(
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
    unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params,
    void** extra) {
  if (g_peer.launch == nullptr) return CUDA_ERROR_NOT_FOUND;
  RateLimit(static_cast<int64_t>(gx) * gy * gz);
  return g_peer.launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

extern "C" __attribute__((visibility("default"))) CUresult cuLaunchKernelEx(
    const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (g_peer.launch_ex == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (config != nullptr) {
    RateLimit(static_cast<int64_t>(config->gridDimX) * config->gridDimY * config->gridDimZ);
  }
  return g_peer.launch_ex(config, f, params, extra);
}
