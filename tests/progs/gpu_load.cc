// gpu_load: a GPU workload that keeps the GPU busy, for the compute-share tests and benchmark.
// It queues kernels of about KERNEL_MS each back to back for SECONDS (then waits for them), in one
// of the ways work reaches a GPU, and prints "ready" once its context exists and "launches=N" at
// the end. On simgpu a kernel's duration follows from its grid (simgpu/core/sim_time.h).
//
//   gpu_load MODE KERNEL_MS SECONDS [SMS]
//   MODE: kernel (cuLaunchKernel) | ptsz (cuLaunchKernel_ptsz) | ex (cuLaunchKernelEx)
//         | coop (cuLaunchCooperativeKernel) | graph (cuGraphLaunch of a 4-kernel graph)
//         | runtime13 (cuLaunchKernel, synchronising every 10 launches (every launch for kernels
//           of 50 ms or more) as a PyTorch loop calling torch.cuda.synchronize() on CUDA 13
//           does: through the cuCtxSynchronize that cuGetProcAddress gives for CUDA 13.0,
//           cuCtxSynchronize_v2)
//         | sleep (no work: an idle workload)
//         | burst (a bursty workload: about 50 ms of kernels, a synchronisation, then 50 ms with
//           no work, over and over; prints "burst" as each quiet period begins)
//         | latency (one kernel at a time, synchronising after each, like an inference loop; at
//           the end prints "lat START_S LATENCY_US" per kernel: when it was launched, seconds
//           after "ready", and how long until its synchronisation returned)
//         | contexts (8 contexts of its own, one kernel queued in each in turn and then each
//           synchronised, over and over: work queued in several contexts at once, which the GPU
//           time-slices as it does processes)
//         | cost (tiny one-block kernels launched in batches of 1,000 with a synchronisation
//           between batches; prints the launch calls' wall and thread CPU time per launch,
//           "wall_ns_per_launch=X cpu_ns_per_launch=Y", synchronisations excluded; KERNEL_MS is
//           ignored)
//   SMS: size kernels for a GPU of that many SMs instead of the count the device reports. An MPS
//   client sees only its share of the SMs; a grid sized for the whole GPU keeps a kernel the same
//   work with and without MPS.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "simgpu/cuda/cuda_exports.h"
#include "spin_kernel.h"

using namespace gpufrac::abi;

namespace {

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "gpu_load: %s failed: %d\n", what, static_cast<int>(r));
    std::exit(2);
  }
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

double ThreadCpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// latency mode: per-kernel completion latency of a synchronous loop.
int RunLatency(CUfunction kernel, unsigned blocks, double seconds) {
  std::vector<std::pair<double, double>> samples;
  samples.reserve(1 << 16);
  const double start = Now();
  const double end = start + seconds;
  for (double t = start; t < end; t = Now()) {
    Check(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr),
          "cuLaunchKernel");
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
    samples.emplace_back(t - start, (Now() - t) * 1e6);
  }
  for (const auto& [at, us] : samples) std::printf("lat %.6f %.1f\n", at, us);
  std::printf("launches=%zu\n", samples.size());
  return 0;
}

// cost mode: what a launch call costs the launching thread, the GPU's work excluded.
int RunCost(CUfunction kernel, double seconds) {
  constexpr int kBatch = 1000;
  double wall = 0, cpu = 0;
  long launches = 0;
  const double end = Now() + seconds;
  while (Now() < end) {
    const double wall0 = Now(), cpu0 = ThreadCpuNow();
    for (int i = 0; i < kBatch; ++i) {
      Check(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
            "cuLaunchKernel");
    }
    wall += Now() - wall0;
    cpu += ThreadCpuNow() - cpu0;
    launches += kBatch;
    // Keep the queue short (each tiny kernel is 2 us of simulated GPU time).
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  std::printf("launches=%ld wall_ns_per_launch=%.2f cpu_ns_per_launch=%.2f\n", launches,
              wall * 1e9 / launches, cpu * 1e9 / launches);
  return 0;
}

}  // namespace

// contexts mode: a kernel of `threads` threads in each of 8 contexts, then a synchronisation of
// each, until `seconds` have passed.
int RunContexts(CUdevice device, double threads, double seconds) {
  constexpr int kContexts = 8;
  CUcontext contexts[kContexts] = {};
  CUfunction kernels[kContexts] = {};
  for (int i = 0; i < kContexts; ++i) {
    Check(cuCtxCreate_v2(&contexts[i], 0, device), "cuCtxCreate_v2");
    CUmodule module = nullptr;
    Check(cuModuleLoadData(&module, kSpinPtx), "cuModuleLoadData");
    Check(cuModuleGetFunction(&kernels[i], module, "spin"), "cuModuleGetFunction");
  }
  const unsigned blocks = threads > 1024 ? static_cast<unsigned>(threads / 1024) : 1;
  std::printf("ready\n");
  long launches = 0;
  const double end = Now() + seconds;
  while (Now() < end) {
    for (int i = 0; i < kContexts; ++i) {
      Check(cuCtxSetCurrent(contexts[i]), "cuCtxSetCurrent");
      Check(cuLaunchKernel(kernels[i], blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr),
            "cuLaunchKernel");
      ++launches;
    }
    for (int i = 0; i < kContexts; ++i) {
      Check(cuCtxSetCurrent(contexts[i]), "cuCtxSetCurrent");
      Check(cuCtxSynchronize(), "cuCtxSynchronize");
    }
  }
  std::printf("launches=%ld\n", launches);
  return 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: gpu_load MODE KERNEL_MS SECONDS [SMS]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const double kernel_ms = std::atof(argv[2]);
  const double seconds = std::atof(argv[3]);
  Check(cuInit(0), "cuInit");
  CUdevice device = 0;
  Check(cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext context = nullptr;
  Check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUmodule module = nullptr;
  Check(cuModuleLoadData(&module, kSpinPtx), "cuModuleLoadData");
  CUfunction kernel = nullptr;
  Check(cuModuleGetFunction(&kernel, module, "spin"), "cuModuleGetFunction");
  int sms = 0;
  Check(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "attribute");
  const int sized_for = argc == 5 ? std::atoi(argv[4]) : sms;
  // Threads for kernel_ms on every SM at full occupancy (2048 per SM), less the launch latency.
  const double threads = (kernel_ms * 1000 - 2) * sized_for * 2048;
  const unsigned blocks = threads > 1024 ? static_cast<unsigned>(threads / 1024) : 1;
  if (mode == "contexts") return RunContexts(device, threads, seconds);
  CUgraphExec graph_exec = nullptr;
  if (mode == "graph") {
    CUstream capture = nullptr;
    Check(cuStreamCreate(&capture, 1), "cuStreamCreate");
    Check(cuStreamBeginCapture_v2(capture, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    for (int i = 0; i < 4; ++i) {
      Check(cuLaunchKernel(kernel, blocks / 4 + 1, 1, 1, 1024, 1, 1, 0, capture, nullptr, nullptr),
            "capture launch");
    }
    CUgraph graph = nullptr;
    Check(cuStreamEndCapture(capture, &graph), "cuStreamEndCapture");
    Check(cuGraphInstantiateWithFlags(&graph_exec, graph, 0), "cuGraphInstantiateWithFlags");
  }
  CUstream streams[4] = {};
  if (mode == "streams") {
    for (CUstream& stream : streams) Check(cuStreamCreate(&stream, 1), "cuStreamCreate");
  }
  long sync_every = kernel_ms < 50 ? static_cast<long>(50 / kernel_ms) : 1;
  cuCtxSynchronize_v2_t synchronize_v2 = nullptr;
  if (mode == "runtime13") {
    void* entry = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    Check(
        cuGetProcAddress_v2("cuCtxSynchronize", &entry, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found),
        "cuGetProcAddress_v2(cuCtxSynchronize, 13000)");
    synchronize_v2 = reinterpret_cast<cuCtxSynchronize_v2_t>(entry);
    sync_every = kernel_ms < 50 ? 10 : 1;
  }
  std::printf("ready\n");
  if (mode == "latency") return RunLatency(kernel, blocks, seconds);
  if (mode == "cost") return RunCost(kernel, seconds);
  long launches = 0;
  const double end = Now() + seconds;
  while (Now() < end) {
    if (mode == "sleep") {
      timespec pause{0, 10'000'000};
      nanosleep(&pause, nullptr);
      continue;
    }
    if (mode == "burst") {
      for (long i = 0; i < sync_every; ++i) {
        Check(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr),
              "cuLaunchKernel");
      }
      launches += sync_every;
      Check(cuCtxSynchronize(), "cuCtxSynchronize");
      std::printf("burst\n");
      timespec quiet{0, 50'000'000};
      nanosleep(&quiet, nullptr);
      continue;
    }
    if (mode == "kernel" || mode == "runtime13") {
      Check(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr),
            "cuLaunchKernel");
    } else if (mode == "streams") {
      Check(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, streams[launches % 4], nullptr,
                           nullptr),
            "cuLaunchKernel");
    } else if (mode == "ptsz") {
      Check(cuLaunchKernel_ptsz(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr),
            "cuLaunchKernel_ptsz");
    } else if (mode == "ex") {
      CUlaunchConfig config{};
      config.gridDimX = blocks;
      config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = 1024;
      config.blockDimY = config.blockDimZ = 1;
      Check(cuLaunchKernelEx(&config, kernel, nullptr, nullptr), "cuLaunchKernelEx");
    } else if (mode == "coop") {
      // A cooperative grid must fit on the GPU at once: many short ones instead of one long.
      Check(cuLaunchCooperativeKernel(kernel, static_cast<unsigned>(sms) * 2, 1, 1, 1024, 1, 1, 0,
                                      nullptr, nullptr),
            "cuLaunchCooperativeKernel");
    } else if (mode == "graph") {
      Check(cuGraphLaunch(graph_exec, nullptr), "cuGraphLaunch");
    } else {
      std::fprintf(stderr, "gpu_load: unknown mode %s\n", mode.c_str());
      return 2;
    }
    ++launches;
    // Keep at most about 50 ms queued, as a training loop's data dependencies would.
    if (launches % sync_every == 0) {
      Check(synchronize_v2 ? synchronize_v2(nullptr) : cuCtxSynchronize(), "cuCtxSynchronize");
    }
  }
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("launches=%ld\n", launches);
  return 0;
}
