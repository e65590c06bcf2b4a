// What the limiter adds to the driver's hot paths: cuMemAlloc+cuMemFree pairs (as live allocations
// grow from 10 to 100,000), cuMemGetInfo and cuLaunchKernel, called straight on the driver and
// through libgpufrac.so in the same run, alone and with 7 other processes of the same workload
// hammering the same budget. Run it with bench/run_limiter_bench.sh, on the simulated GPU or
// (GPUFRAC_BENCH_DRIVER=real) on a real one.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "abi/cuda_abi.h"

using namespace gpufrac::abi;

namespace {

struct Path {
  cuMemAlloc_v2_t alloc;
  cuMemFree_v2_t free;
  cuMemGetInfo_v2_t info;
  cuLaunchKernel_t launch;
};

Path g_direct, g_limited;
CUfunction g_kernel;
std::string g_self;

// A one-kernel PTX module: real drivers JIT it, the simulated one reads the entry name.
const char kPtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n";

void* Need(void* p, const char* what) {
  if (!p) {
    std::fprintf(stderr, "limiter_bench: %s: %s\n", what, dlerror());
    std::exit(1);
  }
  return p;
}

template <typename T>
T Sym(void* lib, const char* name) {
  return reinterpret_cast<T>(Need(dlsym(lib, name), name));
}

// Sets up the driver, a context, a kernel, and both paths. The limiter is loaded privately
// (RTLD_LOCAL), so its exported hooks are called exactly as a preloaded program would call them.
void Setup() {
  void* cuda = Need(dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), "libcuda.so.1");
  auto init = Sym<cuInit_t>(cuda, "cuInit");
  auto get = Sym<cuDeviceGet_t>(cuda, "cuDeviceGet");
  auto retain = Sym<cuDevicePrimaryCtxRetain_t>(cuda, "cuDevicePrimaryCtxRetain");
  auto set = Sym<cuCtxSetCurrent_t>(cuda, "cuCtxSetCurrent");
  auto load = Sym<cuModuleLoadData_t>(cuda, "cuModuleLoadData");
  auto function = Sym<cuModuleGetFunction_t>(cuda, "cuModuleGetFunction");
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  if (init(0) || get(&dev, 0) || retain(&ctx, dev) || set(ctx) || load(&mod, kPtx) ||
      function(&g_kernel, mod, "noop")) {
    std::fprintf(stderr, "limiter_bench: driver set-up failed\n");
    std::exit(1);
  }
  g_direct = {Sym<cuMemAlloc_v2_t>(cuda, "cuMemAlloc_v2"),
              Sym<cuMemFree_v2_t>(cuda, "cuMemFree_v2"),
              Sym<cuMemGetInfo_v2_t>(cuda, "cuMemGetInfo_v2"),
              Sym<cuLaunchKernel_t>(cuda, "cuLaunchKernel")};

  const char* lib = getenv("GPUFRAC_BENCH_LIMITER");
  void* limiter = Need(dlopen(lib ? lib : "libgpufrac.so", RTLD_NOW | RTLD_LOCAL), "libgpufrac.so");
  // Launches are found the way the CUDA runtime finds them: through cuGetProcAddress, which the
  // limiter interposes (and, with no compute limit, answers with the driver's own function).
  auto gpa = Sym<cuGetProcAddress_v2_t>(limiter, "cuGetProcAddress_v2");
  void* launch = nullptr;
  CUdriverProcAddressQueryResult status;
  gpa("cuLaunchKernel", &launch, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  g_limited = {Sym<cuMemAlloc_v2_t>(limiter, "cuMemAlloc_v2"),
               Sym<cuMemFree_v2_t>(limiter, "cuMemFree_v2"),
               Sym<cuMemGetInfo_v2_t>(limiter, "cuMemGetInfo_v2"),
               reinterpret_cast<cuLaunchKernel_t>(Need(launch, "cuLaunchKernel"))};
}

const Path& PathOf(const benchmark::State& state) { return state.range(0) ? g_limited : g_direct; }

// Seven other processes of the same workload allocating and freeing on the same budget.
class Contenders {
 public:
  Contenders(bool limited, int count) {
    for (int i = 0; i < count; ++i) {
      pid_t pid = fork();
      if (pid == 0) {
        execl(g_self.c_str(), g_self.c_str(), limited ? "--contend=limiter" : "--contend=direct",
              static_cast<char*>(nullptr));
        _exit(127);
      }
      pids_.push_back(pid);
    }
    usleep(200000);  // let them reach their loop
  }
  ~Contenders() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

[[noreturn]] void Contend(bool limited) {
  Setup();
  const Path& p = limited ? g_limited : g_direct;
  for (;;) {
    CUdeviceptr d;
    if (p.alloc(&d, 4096) == CUDA_SUCCESS) p.free(d);
  }
}

void AllocFree(benchmark::State& state, int contenders) {
  const Path& p = PathOf(state);
  Contenders others(state.range(0) != 0, contenders);
  std::vector<CUdeviceptr> live(static_cast<size_t>(state.range(1)));
  for (auto& d : live) p.alloc(&d, 4096);
  for (auto _ : state) {
    CUdeviceptr d;
    if (p.alloc(&d, 4096) != CUDA_SUCCESS) state.SkipWithError("allocation failed");
    p.free(d);
  }
  for (auto d : live) p.free(d);
  state.SetLabel(state.range(0) ? "limiter" : "direct");
}

void BM_AllocFree(benchmark::State& state) { AllocFree(state, 0); }
void BM_AllocFree8Proc(benchmark::State& state) { AllocFree(state, 7); }

void BM_MemGetInfo(benchmark::State& state) {
  const Path& p = PathOf(state);
  size_t free, total;
  for (auto _ : state) {
    p.info(&free, &total);
    benchmark::DoNotOptimize(free);
  }
  state.SetLabel(state.range(0) ? "limiter" : "direct");
}

void BM_MemGetInfo8Proc(benchmark::State& state) {
  Contenders others(state.range(0) != 0, 7);
  BM_MemGetInfo(state);
}

void BM_Launch(benchmark::State& state) {
  const Path& p = PathOf(state);
  for (auto _ : state) p.launch(g_kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
  state.SetLabel(state.range(0) ? "limiter" : "direct");
}

BENCHMARK(BM_AllocFree)->ArgsProduct({{0, 1}, {10, 1000, 100000}});
BENCHMARK(BM_AllocFree8Proc)->ArgsProduct({{0, 1}, {10}});
BENCHMARK(BM_MemGetInfo)->Arg(0)->Arg(1);
BENCHMARK(BM_MemGetInfo8Proc)->Arg(0)->Arg(1);
BENCHMARK(BM_Launch)->Arg(0)->Arg(1);

}  // namespace

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc > 1 && std::strncmp(argv[1], "--contend=", 10) == 0) {
    Contend(std::strcmp(argv[1] + 10, "limiter") == 0);
  }
  Setup();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
