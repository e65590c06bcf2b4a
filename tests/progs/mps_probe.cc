// mps_probe: a CUDA client for the MPS tests. It does one thing on device 0 and prints what it
// saw as key=value lines. With --ready FILE it writes its pid to FILE once its context exists
// (and its kernels, if any, are queued), so a test can act on a client that is known to be up.
//
//   mps_probe [--ready FILE] info            init= devices= sms= total= free=
//   mps_probe [--ready FILE] alloc MIB...    one allocation after another: allocN= free= total=
//   mps_probe [--ready FILE] run START_NS BLOCKS COUNT
//       waits until CLOCK_MONOTONIC reaches START_NS, queues COUNT kernels of BLOCKS x 1024
//       threads back to back, synchronises: sync= elapsed_ms= (START to the end of the
//       synchronisation) engine_ms= (the context's engine time, simgpuCtxGetEngineTime)
//       busy_ms= (GPU 0's busy time over the same stretch, simgpuGetEngineBusyTime)
//   mps_probe [--ready FILE] fault-wait BLOCKS HOLD_MS
//       queues one kernel, synchronises (a fault ends the wait): sync= sync_at_ns= (when it
//       returned) after= (a cuMemAlloc afterwards), then stays HOLD_MS before exiting
//   mps_probe [--ready FILE] watch SECONDS
//       every 5 ms synchronises and queries memory until a call fails or SECONDS pass:
//       watch= (the first failure, or 0) at_ns= (when it ended) after_ms= (since ready)
//   mps_probe [--ready FILE] hold MS         keeps its context MS milliseconds, then exits
//   mps_probe fault GPU PID                  simgpuInjectKernelFault(GPU, PID): fault=
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "simgpu/core/engine_truth.h"
#include "simgpu/cuda/cuda_exports.h"
#include "simgpu/nvml/fault_injection.h"
#include "spin_kernel.h"

using namespace gpufrac::abi;

namespace {

std::uint64_t NowNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000u + now.tv_nsec;
}

void SleepUntilNs(std::uint64_t deadline) {
  const timespec until{.tv_sec = static_cast<time_t>(deadline / 1000000000u),
                       .tv_nsec = static_cast<long>(deadline % 1000000000u)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) != 0) {
  }
}

void SleepMs(double ms) { SleepUntilNs(NowNs() + static_cast<std::uint64_t>(ms * 1e6)); }

const char* g_ready_file = nullptr;

void Ready() {
  if (g_ready_file != nullptr) {
    const std::string temp = std::string(g_ready_file) + ".tmp";
    if (std::FILE* f = std::fopen(temp.c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
      std::rename(temp.c_str(), g_ready_file);
    }
  }
  std::printf("ready\n");
  std::fflush(stdout);
}

// cuInit and device 0's primary context; false (with init= printed) when that fails.
bool Start(CUcontext* context) {
  const CUresult init = cuInit(0);
  std::printf("init=%d\n", static_cast<int>(init));
  if (init != CUDA_SUCCESS) return false;
  if (cuDevicePrimaryCtxRetain(context, 0) != CUDA_SUCCESS || cuCtxSetCurrent(*context) != 0) {
    std::printf("context=failed\n");
    return false;
  }
  return true;
}

CUfunction Kernel() {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  cuModuleLoadData(&module, kSpinPtx);
  cuModuleGetFunction(&function, module, "spin");
  return function;
}

void PrintMemory() {
  size_t free = 0, total = 0;
  const CUresult result = cuMemGetInfo_v2(&free, &total);
  std::printf("meminfo=%d free=%zu total=%zu\n", static_cast<int>(result), free, total);
}

int Info() {
  CUcontext context = nullptr;
  if (!Start(&context)) return 0;
  int count = 0, sms = 0;
  cuDeviceGetCount(&count);
  cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
  std::printf("devices=%d sms=%d\n", count, sms);
  PrintMemory();
  Ready();
  return 0;
}

int Alloc(int argc, char** argv) {
  CUcontext context = nullptr;
  if (!Start(&context)) return 0;
  for (int i = 0; i < argc; ++i) {
    CUdeviceptr pointer = 0;
    const std::size_t bytes = std::strtoull(argv[i], nullptr, 10) << 20;
    std::printf("alloc%d=%d\n", i, static_cast<int>(cuMemAlloc_v2(&pointer, bytes)));
  }
  PrintMemory();
  Ready();
  return 0;
}

int Run(std::uint64_t start_ns, unsigned blocks, int count) {
  CUcontext context = nullptr;
  if (!Start(&context)) return 0;
  const CUfunction kernel = Kernel();
  Ready();
  SleepUntilNs(start_ns);
  unsigned long long busy_before = 0, busy_after = 0;
  simgpuGetEngineBusyTime(0, &busy_before);
  for (int i = 0; i < count; ++i) {
    cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr);
  }
  const CUresult sync = cuCtxSynchronize();
  const double elapsed_ms = (static_cast<double>(NowNs()) - static_cast<double>(start_ns)) / 1e6;
  unsigned long long engine_ns = 0;
  simgpuCtxGetEngineTime(context, &engine_ns);
  simgpuGetEngineBusyTime(0, &busy_after);
  std::printf("sync=%d elapsed_ms=%.3f engine_ms=%.3f busy_ms=%.3f\n", static_cast<int>(sync),
              elapsed_ms, engine_ns / 1e6, (busy_after - busy_before) / 1e6);
  return 0;
}

int FaultWait(unsigned blocks, double hold_ms) {
  CUcontext context = nullptr;
  if (!Start(&context)) return 0;
  cuLaunchKernel(Kernel(), blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr);
  Ready();
  const CUresult sync = cuCtxSynchronize();
  const std::uint64_t synced = NowNs();
  CUdeviceptr pointer = 0;
  const CUresult after = cuMemAlloc_v2(&pointer, 1 << 20);
  std::printf("sync=%d sync_at_ns=%llu after=%d\n", static_cast<int>(sync),
              static_cast<unsigned long long>(synced), static_cast<int>(after));
  std::fflush(stdout);
  SleepMs(hold_ms);
  return 0;
}

int Watch(double seconds) {
  CUcontext context = nullptr;
  if (!Start(&context)) return 0;
  Ready();
  const std::uint64_t start = NowNs();
  const std::uint64_t end = start + static_cast<std::uint64_t>(seconds * 1e9);
  CUresult failure = CUDA_SUCCESS;
  while (NowNs() < end && failure == CUDA_SUCCESS) {
    size_t free = 0, total = 0;
    failure = cuCtxSynchronize();
    if (failure == CUDA_SUCCESS) failure = cuMemGetInfo_v2(&free, &total);
    if (failure == CUDA_SUCCESS) SleepMs(5);
  }
  const std::uint64_t now = NowNs();
  std::printf("watch=%d at_ns=%llu after_ms=%.1f\n", static_cast<int>(failure),
              static_cast<unsigned long long>(now), (now - start) / 1e6);
  return 0;
}

int Hold(double ms) {
  CUcontext context = nullptr;
  if (!Start(&context)) return 0;
  Ready();
  SleepMs(ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int i = 1;
  if (argc > 2 && std::strcmp(argv[1], "--ready") == 0) {
    g_ready_file = argv[2];
    i = 3;
  }
  if (i >= argc) {
    std::fprintf(stderr, "usage: mps_probe [--ready FILE] ACTION ARGS\n");
    return 2;
  }
  const std::string action = argv[i];
  char** args = argv + i + 1;
  const int count = argc - i - 1;
  if (action == "info" && count == 0) return Info();
  if (action == "alloc" && count >= 1) return Alloc(count, args);
  if (action == "run" && count == 3) {
    return Run(std::strtoull(args[0], nullptr, 10),
               static_cast<unsigned>(std::strtoul(args[1], nullptr, 10)), std::atoi(args[2]));
  }
  if (action == "fault-wait" && count == 2) {
    return FaultWait(static_cast<unsigned>(std::strtoul(args[0], nullptr, 10)), std::atof(args[1]));
  }
  if (action == "watch" && count == 1) return Watch(std::atof(args[0]));
  if (action == "hold" && count == 1) return Hold(std::atof(args[0]));
  if (action == "fault" && count == 2) {
    const nvmlReturn_t result = simgpuInjectKernelFault(static_cast<unsigned>(std::atoi(args[0])),
                                                        static_cast<unsigned>(std::atoi(args[1])));
    std::printf("fault=%d\n", static_cast<int>(result));
    return 0;
  }
  std::fprintf(stderr, "mps_probe: unknown action or arguments\n");
  return 2;
}
