// cuda_probe: a small CUDA driver API program the limiter tests run (unchanged on simulated and
// real GPUs). It reaches the driver by one of the three paths programs use — direct linking,
// dlopen+dlsym, or cuGetProcAddress — and prints what it observed as key=value lines.
//
//   cuda_probe [--path linked|dlsym|procaddr] [--cuda-version N] ACTION [ARGS]
//   actions: uuid | info | nvml | alloc KIND BYTES | fill BYTES | hold BYTES
//            | race SHM BYTES ROUNDS | setenv-alloc FILE BYTES | resolve | hotloop N
//            | endctx ctx|reset BYTES | threads N BYTES | work BYTES SECONDS
//            | legacy HOW KIND BYTES | legacy-hold HOW BYTES | devices
//            | nvml-list OTHER_UUID OTHER_SERIAL | mig-setup
//   --setenv-visible VALUE sets CUDA_VISIBLE_DEVICES with setenv() before cuInit.
//   (legacy: the pre-CUDA 3.2 32-bit entry points, found by HOW = linked, dlsym (on the
//   library's handle), default (dlsym RTLD_DEFAULT) or procaddr (cuGetProcAddress at
//   --cuda-version, e.g. 3010))
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "abi/cuda_abi.h"
#include "abi/nvml_abi.h"
#include "progs/race_shared.h"

using namespace gpufrac::abi;

// Every driver function the probe calls: (field, exported symbol, base name for cuGetProcAddress,
// per-thread-stream variant).
#define PROBE_FUNCTIONS(X)                                                                    \
  X(cuInit, cuInit, "cuInit", false)                                                          \
  X(cuDeviceGet, cuDeviceGet, "cuDeviceGet", false)                                           \
  X(cuDeviceGetUuid_v2, cuDeviceGetUuid_v2, "cuDeviceGetUuid", false)                         \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem_v2, "cuDeviceTotalMem", false)                      \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", false)    \
  X(cuCtxSetCurrent, cuCtxSetCurrent, "cuCtxSetCurrent", false)                               \
  X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", false) \
  X(cuCtxCreate_v2, cuCtxCreate_v2, "cuCtxCreate", false)                                     \
  X(cuCtxDestroy_v2, cuCtxDestroy_v2, "cuCtxDestroy", false)                                  \
  X(cuMemGetInfo_v2, cuMemGetInfo_v2, "cuMemGetInfo", false)                                  \
  X(cuMemAlloc_v2, cuMemAlloc_v2, "cuMemAlloc", false)                                        \
  X(cuMemFree_v2, cuMemFree_v2, "cuMemFree", false)                                           \
  X(cuMemAllocPitch_v2, cuMemAllocPitch_v2, "cuMemAllocPitch", false)                         \
  X(cuMemAllocManaged, cuMemAllocManaged, "cuMemAllocManaged", false)                         \
  X(cuMemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync", false)                               \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz, "cuMemAllocAsync", true)                      \
  X(cuMemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync", false)                                  \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", false)       \
  X(cuMemPoolCreate, cuMemPoolCreate, "cuMemPoolCreate", false)                               \
  X(cuMemPoolDestroy, cuMemPoolDestroy, "cuMemPoolDestroy", false)                            \
  X(cuMemCreate, cuMemCreate, "cuMemCreate", false)                                           \
  X(cuMemRelease, cuMemRelease, "cuMemRelease", false)                                        \
  X(cuMemAddressReserve, cuMemAddressReserve, "cuMemAddressReserve", false)                   \
  X(cuMemAddressFree, cuMemAddressFree, "cuMemAddressFree", false)                            \
  X(cuMemMap, cuMemMap, "cuMemMap", false)                                                    \
  X(cuMemUnmap, cuMemUnmap, "cuMemUnmap", false)                                              \
  X(cuMemSetAccess, cuMemSetAccess, "cuMemSetAccess", false)                                  \
  X(cuArrayCreate_v2, cuArrayCreate_v2, "cuArrayCreate", false)                               \
  X(cuArray3DCreate_v2, cuArray3DCreate_v2, "cuArray3DCreate", false)                         \
  X(cuArrayDestroy, cuArrayDestroy, "cuArrayDestroy", false)                                  \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, "cuMipmappedArrayCreate", false)          \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", false)       \
  X(cuStreamSynchronize, cuStreamSynchronize, "cuStreamSynchronize", false)

// Direct-link declarations with the ABI types (the _ptsz variant shares its base type).
using cuMemAllocAsync_ptsz_t = cuMemAllocAsync_t;
#define PROBE_TYPEDEF(field, sym, base, ptsz) using field##_fn = std::remove_pointer_t<field##_t>;
PROBE_FUNCTIONS(PROBE_TYPEDEF)
extern "C" {
#define PROBE_DECLARE(field, sym, base, ptsz) field##_fn sym;
PROBE_FUNCTIONS(PROBE_DECLARE)
}

// The legacy entry points, linked directly (simgpu and the real driver export them).
extern "C" {
std::remove_pointer_t<cuMemAlloc_t> cuMemAlloc;
std::remove_pointer_t<cuMemAllocPitch_t> cuMemAllocPitch;
std::remove_pointer_t<cuMemFree_t> cuMemFree;
std::remove_pointer_t<cuMemGetInfo_t> cuMemGetInfo;
std::remove_pointer_t<cuDeviceTotalMem_t> cuDeviceTotalMem;
std::remove_pointer_t<cuArrayCreate_t> cuArrayCreate;
std::remove_pointer_t<cuArray3DCreate_t> cuArray3DCreate;
std::remove_pointer_t<cuCtxCreate_t> cuCtxCreate;
}

namespace {

struct Api {
#define PROBE_FIELD(field, sym, base, ptsz) field##_t field = nullptr;
  PROBE_FUNCTIONS(PROBE_FIELD)
};

Api g;
void* g_cuda = nullptr;
cuGetProcAddress_v2_t g_gpa = nullptr;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "cuda_probe: %s\n", what);
  std::exit(3);
}

void LoadLinked() {
#define PROBE_LINK(field, sym, base, ptsz) g.field = &::sym;
  PROBE_FUNCTIONS(PROBE_LINK)
}

void LoadDlsym() {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!g_cuda) Die("dlopen libcuda.so.1 failed");
#define PROBE_DLSYM(field, sym, base, ptsz) \
  g.field = reinterpret_cast<field##_t>(dlsym(g_cuda, #sym));
  PROBE_FUNCTIONS(PROBE_DLSYM)
}

void LoadProcAddress(int version) {
  g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!g_cuda) Die("dlopen libcuda.so.1 failed");
  auto gpa = reinterpret_cast<cuGetProcAddress_v2_t>(dlsym(g_cuda, "cuGetProcAddress_v2"));
  if (!gpa) Die("no cuGetProcAddress_v2");
#define PROBE_GPA(field, sym, base, ptsz)                                                         \
  {                                                                                               \
    void* p = nullptr;                                                                            \
    CUdriverProcAddressQueryResult st;                                                            \
    gpa(base, &p, version,                                                                        \
        ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT, &st); \
    g.field = reinterpret_cast<field##_t>(p);                                                     \
  }
  PROBE_FUNCTIONS(PROBE_GPA)
}

unsigned long long ParseBytes(const char* s) { return std::strtoull(s, nullptr, 0); }

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_probe: %s failed with %d\n", what, static_cast<int>(r));
    std::exit(4);
  }
}

CUdevice g_dev = 0;

// cuInit, device 0, and its primary context made current.
void Setup() {
  CUresult r = g.cuInit(0);
  std::printf("init=%d\n", static_cast<int>(r));
  if (r != CUDA_SUCCESS) {
    std::fflush(stdout);
    std::exit(5);
  }
  Check(g.cuDeviceGet(&g_dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(g.cuDevicePrimaryCtxRetain(&ctx, g_dev), "cuDevicePrimaryCtxRetain");
  Check(g.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

unsigned long long Used() {
  size_t free = 0, total = 0;
  Check(g.cuMemGetInfo_v2(&free, &total), "cuMemGetInfo");
  return total - free;
}

void PrintInfo() {
  size_t free = 0, total = 0, device_total = 0;
  Check(g.cuMemGetInfo_v2(&free, &total), "cuMemGetInfo");
  Check(g.cuDeviceTotalMem_v2(&device_total, g_dev), "cuDeviceTotalMem");
  std::printf("free=%zu total=%zu device_total=%zu\n", free, total, device_total);
}

// Allocates one object of `kind`, reports the charge it caused, frees it, reports again.
int Alloc(const std::string& kind, unsigned long long bytes) {
  unsigned long long before = Used();
  CUresult r = CUDA_ERROR_INVALID_VALUE, fr = CUDA_SUCCESS;
  CUdeviceptr ptr = 0;
  unsigned long long during = 0;
  auto measure = [&] { during = Used(); };
  if (kind == "mem") {
    r = g.cuMemAlloc_v2(&ptr, bytes);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuMemFree_v2(ptr);
  } else if (kind == "pitch") {
    size_t pitch = 0;
    r = g.cuMemAllocPitch_v2(&ptr, &pitch, bytes / 1024, 1024, 4);
    std::printf("pitch=%zu\n", pitch);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuMemFree_v2(ptr);
  } else if (kind == "managed") {
    r = g.cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuMemFree_v2(ptr);
  } else if (kind == "async" || kind == "async_ptsz") {
    auto fn = kind == "async" ? g.cuMemAllocAsync : g.cuMemAllocAsync_ptsz;
    r = fn(&ptr, bytes, nullptr);
    if (r == CUDA_SUCCESS) {
      measure();
      fr = g.cuMemFreeAsync(ptr, nullptr);
      g.cuStreamSynchronize(nullptr);
    }
  } else if (kind == "pool" || kind == "hostpool") {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = kind == "pool" ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
    props.location.id = kind == "pool" ? g_dev : 0;
    CUmemoryPool pool;
    Check(g.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
    r = g.cuMemAllocFromPoolAsync(&ptr, bytes, pool, nullptr);
    if (r == CUDA_SUCCESS) {
      measure();
      fr = g.cuMemFreeAsync(ptr, nullptr);
      g.cuStreamSynchronize(nullptr);
    }
    g.cuMemPoolDestroy(pool);
  } else if (kind == "vmm" || kind == "vmmhost" || kind == "vmmnuma") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = kind == "vmm"       ? CU_MEM_LOCATION_TYPE_DEVICE
                         : kind == "vmmhost" ? CU_MEM_LOCATION_TYPE_HOST
                                             : CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = kind == "vmm" ? g_dev : 0;
    CUmemGenericAllocationHandle h;
    r = g.cuMemCreate(&h, bytes, &prop, 0);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuMemRelease(h);
  } else if (kind == "vmmmap") {
    // The usual VMM pattern: create, map, release the handle at once, use, unmap. The memory (and
    // its charge) lives until the unmap.
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_dev;
    CUmemGenericAllocationHandle h;
    r = g.cuMemCreate(&h, bytes, &prop, 0);
    if (r == CUDA_SUCCESS) {
      CUdeviceptr va;
      Check(g.cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
      Check(g.cuMemMap(va, bytes, 0, h, 0), "cuMemMap");
      CUmemAccessDesc access{prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      Check(g.cuMemSetAccess(va, bytes, &access, 1), "cuMemSetAccess");
      Check(g.cuMemRelease(h), "cuMemRelease");
      measure();
      fr = g.cuMemUnmap(va, bytes);
      Check(g.cuMemAddressFree(va, bytes), "cuMemAddressFree");
    }
  } else if (kind == "vmmmulti") {
    // Two allocations mapped side by side, both handles released, one unmap for the whole range.
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_dev;
    CUmemGenericAllocationHandle h[2];
    r = g.cuMemCreate(&h[0], bytes / 2, &prop, 0);
    if (r == CUDA_SUCCESS) {
      Check(g.cuMemCreate(&h[1], bytes / 2, &prop, 0), "cuMemCreate");
      CUdeviceptr va;
      Check(g.cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
      Check(g.cuMemMap(va, bytes / 2, 0, h[0], 0), "cuMemMap");
      Check(g.cuMemMap(va + bytes / 2, bytes / 2, 0, h[1], 0), "cuMemMap");
      Check(g.cuMemRelease(h[0]), "cuMemRelease");
      Check(g.cuMemRelease(h[1]), "cuMemRelease");
      measure();
      fr = g.cuMemUnmap(va, bytes);
      Check(g.cuMemAddressFree(va, bytes), "cuMemAddressFree");
    }
  } else if (kind == "array") {
    CUDA_ARRAY_DESCRIPTOR d{bytes / 4 / 1024, 1024, CU_AD_FORMAT_FLOAT, 1};
    CUarray a;
    r = g.cuArrayCreate_v2(&a, &d);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuArrayDestroy(a);
  } else if (kind == "array3d") {
    CUDA_ARRAY3D_DESCRIPTOR d{bytes / 4 / 64 / 16, 64, 16, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    CUarray a;
    r = g.cuArray3DCreate_v2(&a, &d);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuArrayDestroy(a);
  } else if (kind == "mipmap") {
    // Two levels of a 2D float array: the second level is a quarter of the first.
    CUDA_ARRAY3D_DESCRIPTOR d{bytes / 4 / 1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUmipmappedArray m;
    r = g.cuMipmappedArrayCreate(&m, &d, 2);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuMipmappedArrayDestroy(m);
  } else if (kind == "ctx") {
    CUcontext c;
    r = g.cuCtxCreate_v2(&c, 0, g_dev);
    if (r == CUDA_SUCCESS) measure(), fr = g.cuCtxDestroy_v2(c);
  } else {
    Die("unknown allocation kind");
  }
  unsigned long long after = Used();
  // free= is the free's result, or "none" when there was nothing to free.
  std::printf("alloc=%d charged=%llu free=%s after=%lld\n", static_cast<int>(r),
              r == CUDA_SUCCESS ? during - before : 0ull,
              r == CUDA_SUCCESS ? std::to_string(static_cast<int>(fr)).c_str() : "none",
              static_cast<long long>(after) - static_cast<long long>(before));
  return 0;
}

// A legacy entry point as a program finds it: linked, dlsym on the library, dlsym(RTLD_DEFAULT)
// or cuGetProcAddress at `version` (the base name is the symbol itself).
template <typename Fn>
Fn FindLegacy(const std::string& how, const char* name, Fn linked, int version) {
  void* p = nullptr;
  if (how == "linked") return linked;
  if (how == "dlsym") {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) Die("dlopen libcuda.so.1 failed");
    p = dlsym(cuda, name);
  } else if (how == "default") {
    p = dlsym(RTLD_DEFAULT, name);
  } else if (how == "procaddr") {
    CUdriverProcAddressQueryResult st;
    if (g_gpa == nullptr) Die("no cuGetProcAddress_v2");
    g_gpa(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  } else {
    Die("unknown way to find a legacy entry point");
  }
  if (!p) Die("legacy entry point not found");
  return reinterpret_cast<Fn>(p);
}

// Calls one legacy entry point of `kind` and prints its result and the charge it caused (as
// cuMemGetInfo_v2 sees it), then frees what it made.
int Legacy(const std::string& how, const std::string& kind, unsigned long long bytes, int version) {
  auto find = [&](const char* name, auto linked) { return FindLegacy(how, name, linked, version); };
  unsigned long long before = Used();
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  unsigned long long during = before;
  if (kind == "mem") {
    CUdeviceptr_v1 p = 0;
    r = find("cuMemAlloc", &::cuMemAlloc)(&p, static_cast<unsigned int>(bytes));
    during = Used();
    if (r == CUDA_SUCCESS) Check(::cuMemFree(p), "cuMemFree");
  } else if (kind == "pitch") {
    CUdeviceptr_v1 p = 0;
    unsigned int pitch = 0;
    r = find("cuMemAllocPitch", &::cuMemAllocPitch)(&p, &pitch, 65536,
                                                    static_cast<unsigned int>(bytes / 65536), 4);
    during = Used();
    if (r == CUDA_SUCCESS) Check(::cuMemFree(p), "cuMemFree");
  } else if (kind == "array" || kind == "array3d") {
    CUarray a = nullptr;
    if (kind == "array") {
      CUDA_ARRAY_DESCRIPTOR_v1 d{static_cast<unsigned int>(bytes / 4 / 1024), 1024,
                                 CU_AD_FORMAT_FLOAT, 1};
      r = find("cuArrayCreate", &::cuArrayCreate)(&a, &d);
    } else {
      CUDA_ARRAY3D_DESCRIPTOR_v1 d{
          static_cast<unsigned int>(bytes / 4 / 64 / 16), 64, 16, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
      r = find("cuArray3DCreate", &::cuArray3DCreate)(&a, &d);
    }
    during = Used();
    if (r == CUDA_SUCCESS) Check(g.cuArrayDestroy(a), "cuArrayDestroy");
  } else if (kind == "ctx") {
    CUcontext c = nullptr;
    r = find("cuCtxCreate", &::cuCtxCreate)(&c, 0, g_dev);
    if (r == CUDA_SUCCESS) {
      Check(g.cuCtxSetCurrent(c), "cuCtxSetCurrent");
      during = Used();
      Check(g.cuCtxDestroy_v2(c), "cuCtxDestroy");
      CUcontext primary;
      Check(g.cuDevicePrimaryCtxRetain(&primary, g_dev), "cuDevicePrimaryCtxRetain");
      Check(g.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    }
  } else if (kind == "free") {
    r = find("cuMemFree", &::cuMemFree)(0);
  } else if (kind == "info") {
    unsigned int free = 0, total = 0;
    r = find("cuMemGetInfo", &::cuMemGetInfo)(&free, &total);
    std::printf("legacy_total=%u\n", total);
  } else if (kind == "totalmem") {
    unsigned int total = 0;
    r = find("cuDeviceTotalMem", &::cuDeviceTotalMem)(&total, g_dev);
    std::printf("legacy_total=%u\n", total);
  } else {
    Die("unknown legacy kind");
  }
  std::printf("legacy=%d charged=%lld\n", static_cast<int>(r),
              static_cast<long long>(during) - static_cast<long long>(before));
  return 0;
}

// Holds `bytes` taken through the legacy cuMemAlloc until killed.
int LegacyHold(const std::string& how, unsigned long long bytes, int version) {
  CUdeviceptr_v1 p = 0;
  CUresult r =
      FindLegacy(how, "cuMemAlloc", &::cuMemAlloc, version)(&p, static_cast<unsigned int>(bytes));
  std::printf("legacy=%d\n", static_cast<int>(r));
  std::fflush(stdout);
  pause();
  return 0;
}

// The hot paths, bracketed by two getppid() calls so that a tracer can check nothing else enters
// the kernel in between.
int HotLoop(int rounds) {
  CUdeviceptr p;
  size_t free = 0, total = 0;
  Check(g.cuMemAlloc_v2(&p, 4096), "warm-up cuMemAlloc");  // first use: lane, budget membership
  Check(g.cuMemFree_v2(p), "warm-up cuMemFree");
  getppid();
  for (int i = 0; i < rounds; ++i) {
    if (g.cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || g.cuMemGetInfo_v2(&free, &total) ||
        g.cuMemFree_v2(p) != CUDA_SUCCESS) {
      Die("hot loop call failed");
    }
  }
  getppid();
  std::printf("hotloop=done\n");
  return 0;
}

// Allocates `bytes` in a context and then ends the context without freeing: by destroying a
// created context ("ctx") or resetting the primary one ("reset"). Prints what is in use after.
int EndContext(const std::string& how, unsigned long long bytes) {
  CUdeviceptr p;
  CUcontext primary;
  if (how == "ctx") {
    CUcontext c;
    Check(g.cuCtxCreate_v2(&c, 0, g_dev), "cuCtxCreate");
    Check(g.cuCtxSetCurrent(c), "cuCtxSetCurrent");
    Check(g.cuMemAlloc_v2(&p, bytes), "cuMemAlloc");
    std::printf("during=%llu\n", Used());
    Check(g.cuCtxDestroy_v2(c), "cuCtxDestroy");
  } else if (how == "reset") {
    Check(g.cuMemAlloc_v2(&p, bytes), "cuMemAlloc");
    std::printf("during=%llu\n", Used());
    Check(g.cuDevicePrimaryCtxReset_v2(g_dev), "cuDevicePrimaryCtxReset");
  } else {
    Die("unknown way to end a context");
  }
  Check(g.cuDevicePrimaryCtxRetain(&primary, g_dev), "cuDevicePrimaryCtxRetain");
  Check(g.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
  std::printf("after=%llu\n", Used());
  return 0;
}

// `count` threads each allocate 50 blocks; each thread's blocks are then freed by the next
// thread (frees on another thread than the allocation). Prints what is in use before and after.
int Threads(int count, unsigned long long bytes) {
  CUcontext ctx;
  Check(g.cuDevicePrimaryCtxRetain(&ctx, g_dev), "cuDevicePrimaryCtxRetain");
  unsigned long long before = Used();
  std::vector<std::vector<CUdeviceptr>> blocks(static_cast<size_t>(count));
  std::atomic<int> failures{0};
  auto run = [&](auto body) {
    std::vector<std::thread> threads;
    for (int t = 0; t < count; ++t) {
      threads.emplace_back([&, t] {
        if (g.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) failures++;
        body(t);
      });
    }
    for (auto& th : threads) th.join();
  };
  run([&](int t) {
    for (int i = 0; i < 50; ++i) {
      CUdeviceptr p;
      if (g.cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS) blocks[t].push_back(p);
    }
  });
  unsigned long long during = Used();
  run([&](int t) {
    for (CUdeviceptr p : blocks[(t + 1) % count]) {
      if (g.cuMemFree_v2(p) != CUDA_SUCCESS) failures++;
    }
  });
  std::printf("threads_during=%llu threads_added=%llu threads_after=%lld failures=%d\n", during,
              during - before, static_cast<long long>(Used()) - static_cast<long long>(before),
              failures.load());
  return 0;
}

int Fill(unsigned long long chunk) {
  int count = 0;
  CUresult r;
  CUdeviceptr p;
  while ((r = g.cuMemAlloc_v2(&p, chunk)) == CUDA_SUCCESS) ++count;
  std::printf("count=%d last=%d\n", count, static_cast<int>(r));
  return 0;
}

// A stand-in for a training step: holds `bytes` of GPU memory for `seconds`, then frees it.
// Exits 2 when the allocation fails (e.g. over the workload's limit).
int Work(unsigned long long bytes, double seconds) {
  CUdeviceptr p;
  CUresult r = g.cuMemAlloc_v2(&p, bytes);
  std::printf("work=%d bytes=%llu\n", static_cast<int>(r), bytes);
  std::fflush(stdout);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_probe: cuMemAlloc of %llu bytes failed with CUDA error %d\n", bytes,
                 static_cast<int>(r));
    return 2;
  }
  usleep(static_cast<useconds_t>(seconds * 1e6));
  g.cuMemFree_v2(p);
  std::printf("done\n");
  return 0;
}

int Hold(unsigned long long bytes) {
  CUdeviceptr p;
  CUresult r = g.cuMemAlloc_v2(&p, bytes);
  std::printf("hold=%d\n", static_cast<int>(r));
  std::fflush(stdout);
  if (r == CUDA_SUCCESS) pause();
  return 0;
}

int Race(const char* shm, unsigned long long bytes, int rounds) {
  int fd = shm_open(shm, O_RDWR, 0);
  if (fd < 0) Die("shm_open");
  auto* s = static_cast<gpufrac::testing::RaceShared*>(mmap(
      nullptr, sizeof(gpufrac::testing::RaceShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  for (int round = 0; round < rounds; ++round) {
    pthread_barrier_wait(&s->barrier);  // everyone allocates at once
    CUdeviceptr p;
    CUresult r = g.cuMemAlloc_v2(&p, bytes);
    if (r == CUDA_SUCCESS) {
      s->successes[round].fetch_add(1);
      int64_t live = s->live_bytes.fetch_add(static_cast<int64_t>(bytes)) + bytes;
      int64_t max = s->max_live_bytes.load();
      while (live > max && !s->max_live_bytes.compare_exchange_weak(max, live)) {
      }
    } else if (r != CUDA_ERROR_OUT_OF_MEMORY) {
      Die("unexpected allocation error in race");
    }
    pthread_barrier_wait(&s->barrier);  // everyone holds what they got
    if (r == CUDA_SUCCESS) {
      s->live_bytes.fetch_sub(static_cast<int64_t>(bytes));
      Check(g.cuMemFree_v2(p), "cuMemFree");
    }
    pthread_barrier_wait(&s->barrier);  // everything is freed before the next round
  }
  std::printf("race=done\n");
  return 0;
}

// Which object a function pointer lives in and under which name (for the resolution test).
void Describe(const char* label, void* p) {
  Dl_info info{};
  if (!p || !dladdr(p, &info)) {
    std::printf("%s=none\n", label);
    return;
  }
  const char* lib = info.dli_fname ? std::strrchr(info.dli_fname, '/') : nullptr;
  std::printf("%s=%s@%s\n", label, info.dli_sname ? info.dli_sname : "?",
              lib ? lib + 1 : (info.dli_fname ? info.dli_fname : "?"));
}

// How cuGetProcAddress and dlsym resolve a few names across versions and stream flags.
int Resolve() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) Die("dlopen libcuda.so.1 failed");
  auto gpa = reinterpret_cast<cuGetProcAddress_v2_t>(dlsym(cuda, "cuGetProcAddress_v2"));
  Describe("dlsym.cuGetProcAddress_v2", reinterpret_cast<void*>(gpa));
  Describe("dlsym.cuMemAlloc_v2", dlsym(cuda, "cuMemAlloc_v2"));
  Describe("dlsym.cuDeviceGet", dlsym(cuda, "cuDeviceGet"));
  struct Query {
    const char* name;
    int version;
    cuuint64_t flags;
  } queries[] = {
      {"cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuMemAlloc", 3000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuMemGetInfo", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
      {"cuMemAllocAsync", 11000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuDeviceGet", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
      {"cuCtxSynchronize", 13000, CU_GET_PROC_ADDRESS_DEFAULT},
  };
  for (const Query& q : queries) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = gpa(q.name, &p, q.version, q.flags, &st);
    char label[128];
    std::snprintf(label, sizeof(label), "gpa.%s.%d.%s", q.name, q.version,
                  q.flags == CU_GET_PROC_ADDRESS_DEFAULT ? "default" : "ptsz");
    std::printf("%s.rc=%d %s.status=%d\n", label, static_cast<int>(r), label, static_cast<int>(st));
    Describe(label, p);
  }
  return 0;
}

// Device 0's UUID as NVML and CUDA_VISIBLE_DEVICES spell it: GPU-xxxxxxxx-xxxx-...
std::string DeviceUuid() {
  CUuuid uuid;
  Check(g.cuDeviceGetUuid_v2(&uuid, g_dev), "cuDeviceGetUuid");
  const unsigned char* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

void PrintNvml() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!nvml) Die("dlopen libnvidia-ml.so.1 failed");
  auto init = reinterpret_cast<nvmlInit_v2_t>(dlsym(nvml, "nvmlInit_v2"));
  auto by_uuid =
      reinterpret_cast<nvmlDeviceGetHandleByUUID_t>(dlsym(nvml, "nvmlDeviceGetHandleByUUID"));
  auto info1 = reinterpret_cast<nvmlDeviceGetMemoryInfo_t>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  auto info2 =
      reinterpret_cast<nvmlDeviceGetMemoryInfo_v2_t>(dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
  if (!init || !by_uuid || !info1 || !info2 || init() != NVML_SUCCESS) Die("NVML unusable");
  // NVML ignores CUDA_VISIBLE_DEVICES: find CUDA device 0 by its UUID.
  std::string text = DeviceUuid();
  nvmlDevice_t dev;
  if (by_uuid(text.c_str(), &dev) != NVML_SUCCESS) Die("nvmlDeviceGetHandleByUUID failed");
  nvmlMemory_t m1{};
  nvmlMemory_v2_t m2{};
  m2.version = kNvmlMemoryV2Version;
  if (info1(dev, &m1) != NVML_SUCCESS || info2(dev, &m2) != NVML_SUCCESS) Die("memory info");
  std::printf("nvml.total=%llu nvml.free=%llu nvml.used=%llu\n", m1.total, m1.free, m1.used);
  std::printf("nvml2.total=%llu nvml2.free=%llu nvml2.used=%llu\n", m2.total, m2.free, m2.used);
}

void PrintUuid() { std::printf("uuid=%s\n", DeviceUuid().c_str()); }

// The CUDA devices this process sees.
void PrintDevices() {
  auto count_fn = reinterpret_cast<cuDeviceGetCount_t>(dlsym(RTLD_DEFAULT, "cuDeviceGetCount"));
  int count = -1;
  if (!count_fn) Die("no cuDeviceGetCount");
  Check(count_fn(&count), "cuDeviceGetCount");
  std::printf("cuda.count=%d\n", count);
}

void* NvmlFunction(const char* name) {
  static void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!nvml) Die("dlopen libnvidia-ml.so.1 failed");
  void* f = dlsym(nvml, name);
  if (!f) Die(name);
  return f;
}
#define NVML(name) reinterpret_cast<name##_t>(NvmlFunction(#name))

// NVML's view: the devices it lists (both forms of count and index), and every way to look up
// a device (`other_uuid`, `other_serial`: another GPU's), with each answer.
int NvmlList(const char* other_uuid, const char* other_serial) {
  if (NVML(nvmlInit_v2)() != NVML_SUCCESS) Die("nvmlInit");
  unsigned int count = 0, count1 = 0;
  std::printf("nvml.count.rc=%d ", NVML(nvmlDeviceGetCount_v2)(&count));
  std::printf("nvml.count1.rc=%d\n", NVML(nvmlDeviceGetCount)(&count1));
  std::printf("nvml.count=%u nvml.count1=%u\n", count, count1);
  for (unsigned int i = 0; i <= count; ++i) {
    nvmlDevice_t device = nullptr, device1 = nullptr;
    nvmlReturn_t r = NVML(nvmlDeviceGetHandleByIndex_v2)(i, &device);
    nvmlReturn_t r1 = NVML(nvmlDeviceGetHandleByIndex)(i, &device1);
    std::printf("nvml.%u.rc=%d nvml.%u.rc1=%d nvml.%u.same=%d\n", i, r, i, r1, i,
                device == device1 ? 1 : 0);
    if (r != NVML_SUCCESS) continue;
    char uuid[kNvmlDeviceUuidV2BufferSize] = "", serial[kNvmlDeviceSerialBufferSize] = "";
    unsigned int index = 99;
    NVML(nvmlDeviceGetUUID)(device, uuid, sizeof(uuid));
    NVML(nvmlDeviceGetSerial)(device, serial, sizeof(serial));
    NVML(nvmlDeviceGetIndex)(device, &index);
    std::printf("nvml.%u.uuid=%s nvml.%u.serial=%s nvml.%u.index=%u\n", i, uuid, i, serial, i,
                index);
    unsigned int migs = 0;
    if (NVML(nvmlDeviceGetMaxMigDeviceCount)(device, &migs) == NVML_SUCCESS && migs > 0) {
      int found = 0;
      for (unsigned int m = 0; m < migs; ++m) {
        nvmlDevice_t mig = nullptr;
        if (NVML(nvmlDeviceGetMigDeviceHandleByIndex)(device, m, &mig) != NVML_SUCCESS) continue;
        NVML(nvmlDeviceGetUUID)(mig, uuid, sizeof(uuid));
        std::printf("nvml.%u.mig.%d=%s\n", i, found++, uuid);
      }
      std::printf("nvml.%u.migs=%d\n", i, found);
    }
  }
  nvmlDevice_t device = nullptr;
  std::printf("byuuid.rc=%d\n", NVML(nvmlDeviceGetHandleByUUID)(other_uuid, &device));
  std::printf("byserial.rc=%d\n", NVML(nvmlDeviceGetHandleBySerial)(other_serial, &device));
  nvmlUUID_t text{};
  text.version = kNvmlUuidV1Version;
  text.type = NVML_UUID_TYPE_ASCII;
  std::snprintf(text.value.str, sizeof(text.value.str), "%s", other_uuid);
  std::printf("byuuidv.rc=%d\n", NVML(nvmlDeviceGetHandleByUUIDV)(&text, &device));
  // Every bus of domain 0: how many answer, in both forms.
  int buses = 0, buses1 = 0;
  for (int bus = 0; bus < 256; ++bus) {
    char id[32];
    std::snprintf(id, sizeof(id), "00000000:%02x:00.0", bus);
    buses += NVML(nvmlDeviceGetHandleByPciBusId_v2)(id, &device) == NVML_SUCCESS;
    buses1 += NVML(nvmlDeviceGetHandleByPciBusId)(id, &device) == NVML_SUCCESS;
  }
  std::printf("bypci.found=%d bypci1.found=%d\n", buses, buses1);
  return 0;
}

// Two 1-slice MIG devices on GPU 0 (in MIG mode), made without the limiter; prints their UUIDs.
int MigSetup() {
  if (NVML(nvmlInit_v2)() != NVML_SUCCESS) Die("nvmlInit");
  nvmlDevice_t gpu = nullptr;
  if (NVML(nvmlDeviceGetHandleByIndex_v2)(0, &gpu) != NVML_SUCCESS) Die("no GPU 0");
  nvmlGpuInstanceProfileInfo_t profile{};
  if (NVML(nvmlDeviceGetGpuInstanceProfileInfo)(gpu, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &profile) !=
      NVML_SUCCESS) {
    Die("no 1-slice profile");
  }
  for (int i = 0; i < 2; ++i) {
    nvmlGpuInstance_t instance = nullptr;
    nvmlComputeInstanceProfileInfo_t compute{};
    nvmlComputeInstance_t ci = nullptr;
    if (NVML(nvmlDeviceCreateGpuInstance)(gpu, profile.id, &instance) != NVML_SUCCESS ||
        NVML(nvmlGpuInstanceGetComputeInstanceProfileInfo)(
            instance, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
            NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &compute) != NVML_SUCCESS ||
        NVML(nvmlGpuInstanceCreateComputeInstance)(instance, compute.id, &ci) != NVML_SUCCESS) {
      Die("cannot create a MIG device");
    }
    nvmlDevice_t mig = nullptr;
    char uuid[kNvmlDeviceUuidV2BufferSize] = "";
    if (NVML(nvmlDeviceGetMigDeviceHandleByIndex)(gpu, static_cast<unsigned int>(i), &mig) !=
            NVML_SUCCESS ||
        NVML(nvmlDeviceGetUUID)(mig, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      Die("cannot find the MIG device");
    }
    std::printf("mig.%d=%s\n", i, uuid);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string path = "linked";
  int version = 12000;
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; i += 2) {
    if (i + 1 >= argc) Die("option without value");
    if (std::strcmp(argv[i], "--path") == 0) path = argv[i + 1];
    if (std::strcmp(argv[i], "--cuda-version") == 0) version = std::atoi(argv[i + 1]);
    // After the limiter has loaded, before cuInit: what a program's own setenv does.
    if (std::strcmp(argv[i], "--setenv-visible") == 0) {
      setenv("CUDA_VISIBLE_DEVICES", argv[i + 1], 1);
    }
  }
  if (i >= argc) Die("missing action");
  std::string action = argv[i];
  if (action == "resolve") return Resolve();
  if (action == "mig-setup") return MigSetup();
  if (action == "nvml-list") {
    if (i + 2 >= argc) Die("missing argument");
    return NvmlList(argv[i + 1], argv[i + 2]);
  }
  if (path == "linked") {
    LoadLinked();
  } else if (path == "dlsym") {
    LoadDlsym();
  } else if (path == "procaddr") {
    LoadProcAddress(version);
  } else {
    Die("unknown --path");
  }
  if (void* cuda = dlopen("libcuda.so.1", RTLD_NOW)) {
    g_gpa = reinterpret_cast<cuGetProcAddress_v2_t>(dlsym(cuda, "cuGetProcAddress_v2"));
  }
  Setup();
  auto arg = [&](int k) {
    if (i + k >= argc) Die("missing argument");
    return argv[i + k];
  };
  if (action == "uuid") {
    PrintUuid();
  } else if (action == "info") {
    PrintInfo();
  } else if (action == "devices") {
    PrintDevices();
    PrintUuid();
  } else if (action == "nvml") {
    PrintInfo();
    PrintNvml();
  } else if (action == "alloc") {
    return Alloc(arg(1), ParseBytes(arg(2)));
  } else if (action == "endctx") {
    return EndContext(arg(1), ParseBytes(arg(2)));
  } else if (action == "threads") {
    return Threads(std::atoi(arg(1)), ParseBytes(arg(2)));
  } else if (action == "hotloop") {
    return HotLoop(std::atoi(arg(1)));
  } else if (action == "fill") {
    return Fill(ParseBytes(arg(1)));
  } else if (action == "work") {
    return Work(ParseBytes(arg(1)), std::atof(arg(2)));
  } else if (action == "hold") {
    return Hold(ParseBytes(arg(1)));
  } else if (action == "race") {
    return Race(arg(1), ParseBytes(arg(2)), std::atoi(arg(3)));
  } else if (action == "legacy") {
    return Legacy(arg(1), arg(2), ParseBytes(arg(3)), version);
  } else if (action == "legacy-hold") {
    return LegacyHold(arg(1), ParseBytes(arg(2)), version);
  } else if (action == "setenv-alloc") {
    // A workload pointing the limiter at another limit file after it started: no effect.
    setenv("GPUFRAC_LIMIT_FILE", arg(1), 1);
    setenv("GPUFRAC_LIMIT_BYTES", "1099511627776", 1);
    CUdeviceptr p;
    std::printf("alloc=%d\n", static_cast<int>(g.cuMemAlloc_v2(&p, ParseBytes(arg(2)))));
  } else {
    Die("unknown action");
  }
  return 0;
}
