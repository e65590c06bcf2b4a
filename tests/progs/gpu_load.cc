// gpu_load: a GPU workload that keeps the GPU busy, for the compute-share tests and benchmark.
// It queues kernels of about KERNEL_MS each back to back for SECONDS (then waits for them), in one
// of the ways work reaches a GPU, and prints "ready" once its context exists and "launches=N" at
// the end. On simgpu a kernel's duration follows from its grid (simgpu/sim_time.h).
//
//   gpu_load MODE KERNEL_MS SECONDS
//   MODE: kernel (cuLaunchKernel) | ptsz (cuLaunchKernel_ptsz) | ex (cuLaunchKernelEx)
//         | coop (cuLaunchCooperativeKernel) | graph (cuGraphLaunch of a 4-kernel graph)
//         | sleep (no work: an idle workload)
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simgpu/cuda_exports.h"

using namespace gpufrac::abi;

namespace {

constexpr char kPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry spin()
{
  ret;
}
)";

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

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 4) {
    std::fprintf(stderr, "usage: gpu_load MODE KERNEL_MS SECONDS\n");
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
  Check(cuModuleLoadData(&module, kPtx), "cuModuleLoadData");
  CUfunction kernel = nullptr;
  Check(cuModuleGetFunction(&kernel, module, "spin"), "cuModuleGetFunction");
  int sms = 0;
  Check(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "attribute");
  // Threads for kernel_ms on every SM at full occupancy (2048 per SM), less the launch latency.
  const double threads = (kernel_ms * 1000 - 2) * sms * 2048;
  const unsigned blocks = threads > 1024 ? static_cast<unsigned>(threads / 1024) : 1;
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
  const long sync_every = kernel_ms < 50 ? static_cast<long>(50 / kernel_ms) : 1;
  std::printf("ready\n");
  long launches = 0;
  const double end = Now() + seconds;
  while (Now() < end) {
    if (mode == "sleep") {
      timespec pause{0, 10'000'000};
      nanosleep(&pause, nullptr);
      continue;
    }
    if (mode == "kernel") {
      Check(cuLaunchKernel(kernel, blocks, 1, 1, 1024, 1, 1, 0, nullptr, nullptr, nullptr),
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
    if (launches % sync_every == 0) Check(cuCtxSynchronize(), "cuCtxSynchronize");
  }
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("launches=%ld\n", launches);
  return 0;
}
