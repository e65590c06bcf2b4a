// Process-wide limiter state: loading the limit file at load time, mapping device ordinals to
// budgets, per-thread budget lanes, charging and the over-limit message.
#include "limiter/runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "limiter/file_stat.h"

namespace gpufrac::limiter {

// Constant-initialised, so it is ready before any constructor (ours included) runs.
constinit Runtime g_rt;

namespace {

constexpr int kMaxOrdinals = 64;
constexpr int8_t kUnknown = -2;
constexpr int8_t kUnlimited = -1;

std::atomic<int8_t> g_ordinal_gpu[kMaxOrdinals];
pthread_mutex_t g_slow_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_key_t g_thread_key;
ProcessId g_self;
std::atomic<bool> g_broken_reported{false};

// Per thread: its lane (+1, so that zero means none) and whether it holds the member mutex, per
// limited GPU. Initial-exec TLS: one %fs-relative load, no call.
__thread int16_t t_lane_plus1[kMaxLimitedGpus] __attribute__((tls_model("initial-exec")));
__thread bool t_anchor[kMaxLimitedGpus] __attribute__((tls_model("initial-exec")));

// The calling thread's last current context and its GPU, valid while the epoch is unchanged (a
// destroyed context's handle may be reused for one on another device).
std::atomic<uint32_t> g_context_epoch{1};
__thread uint64_t t_context __attribute__((tls_model("initial-exec")));
__thread int t_context_gpu __attribute__((tls_model("initial-exec")));
__thread uint32_t t_context_epoch __attribute__((tls_model("initial-exec")));
__thread uint64_t t_instance __attribute__((tls_model("initial-exec")));
uint64_t g_next_instance = 1;  // under g_slow_lock

void ThreadExit(void*) {
  for (int g = 0; g < g_rt.config.gpu_count; ++g) {
    GpuState& gs = g_rt.gpus[g];
    if (t_lane_plus1[g]) gs.budget.IdleLane(t_lane_plus1[g] - 1, g_self);
    t_lane_plus1[g] = 0;
    if (t_anchor[g]) {
      gs.budget.HandOverMember(gs.member.load());
      t_anchor[g] = false;
      gs.needs_anchor.store(true, std::memory_order_release);
    }
  }
}

void SetBroken(const char* reason) {
  g_rt.mode = Mode::kBroken;
  snprintf(g_rt.error, sizeof(g_rt.error),
           "gpufrac: %s; CUDA is disabled for this process rather than run without its GPU memory "
           "limit\n",
           reason);
}

void ForkChild() {
  // The child is a new process: nothing of the parent's lanes, members or contexts is its own.
  if (!proc::ReadProcessId(getpid(), &g_self)) {
    // Without its identity the child could not be told from a dead process: no CUDA for it.
    SetBroken("cannot read this process's identity from /proc after fork");
  }
  t_context = 0;
  t_context_epoch = 0;
  ForkComputeArbiters();
  for (int g = 0; g < kMaxLimitedGpus; ++g) {
    t_lane_plus1[g] = 0;
    t_anchor[g] = false;
    g_rt.gpus[g].member.store(-1);
    g_rt.gpus[g].needs_anchor.store(false);
    pthread_mutex_init(&g_rt.gpus[g].primary_lock, nullptr);
    g_rt.gpus[g].primary_refs = 0;
    g_rt.gpus[g].primary_charged = false;
    g_rt.gpus[g].primary_context = 0;
  }
  pthread_mutex_init(&g_slow_lock, nullptr);
}

// Which limit file applies: the fixed container path if it exists, else the environment variable.
const char* LimitFilePath() {
  struct stat st;
  if (StatPath(kContainerLimitFile, &st) == 0) return kContainerLimitFile;
  const char* env = getenv(kLimitFileEnv);
  return (env && *env) ? env : nullptr;
}

__attribute__((constructor)) void LoadConfiguration() {
  for (auto& o : g_ordinal_gpu) o.store(kUnknown, std::memory_order_relaxed);
  const char* path = LimitFilePath();
  if (!path) return;  // no configuration: pass everything through untouched
  char err[400];
  if (!LoadLimitFile(path, &g_rt.config, err, sizeof(err))) return SetBroken(err);
  if (getenv("GPUFRAC_QUIET")) g_rt.config.quiet = true;
  for (int g = 0; g < g_rt.config.gpu_count; ++g) {
    const GpuLimit& limit = g_rt.config.gpus[g];
    char name[160];
    if (!BudgetName(g_rt.config.workload, limit.uuid, name, sizeof(name))) {
      return SetBroken("the workload's budget name is too long");
    }
    // The launcher's budget directory, where only it creates names; else the workload's own
    // /dev/shm (a container's), where the first process creates the budget.
    Budget& budget = g_rt.gpus[g].budget;
    bool opened = g_rt.config.budget_dir[0] != '\0'
                      ? budget.AttachIn(g_rt.config.budget_dir, name + 1, err, sizeof(err))
                      : budget.Open(name, limit.limit_bytes, limit.context_bytes, err, sizeof(err));
    if (!opened) return SetBroken(err);
  }
  // Device pointers: 96 KiB of slots for the first few thousand live (in the core's own caches),
  // 6 MiB for the next quarter million, and 48 MiB more, touched only when needed. The first
  // part's probe is short because every lookup of a later part's entry walks it.
  if (!g_rt.pointers.Init({{size_t{1} << 12, 8}, {size_t{1} << 18, 64}, {size_t{1} << 21}}) ||
      !g_rt.objects.Init({{size_t{1} << 16}}) || !g_rt.handles.Init({{size_t{1} << 16}}) ||
      !g_rt.mappings.Init({{size_t{1} << 16}}) || !g_rt.contexts.Init({{size_t{1} << 12}}) ||
      !proc::ReadProcessId(getpid(), &g_self) ||
      pthread_key_create(&g_thread_key, ThreadExit) != 0) {
    return SetBroken("cannot set up the limiter's bookkeeping");
  }
  pthread_atfork(nullptr, nullptr, ForkChild);
  g_rt.mode = Mode::kActive;
  AttachComputeArbiters();
  // Also now, not only in cuInit: code that reads the variable before CUDA starts (frameworks
  // counting devices through NVML, child processes) sees the same devices as the driver will.
  RestrictCudaVisibleDevices();
}

// Slow path: give the calling thread a lane in `gpu`'s budget (joining as a member first).
int AcquireLane(int gpu) {
  GpuState& gs = g_rt.gpus[gpu];
  pthread_mutex_lock(&g_slow_lock);
  // From here on this thread may hold the member mutex or a lane: its exit must hand them over.
  pthread_setspecific(g_thread_key, reinterpret_cast<void*>(1));
  if (gs.member.load() < 0) {
    int m = gs.budget.JoinMember(g_self);
    gs.member.store(m);
    t_anchor[gpu] = m >= 0;
  }
  int lane = gs.member.load() < 0 ? -1 : gs.budget.AcquireLane(g_self);
  pthread_mutex_unlock(&g_slow_lock);
  if (lane < 0) return -1;
  t_lane_plus1[gpu] = static_cast<int16_t>(lane + 1);
  return lane;
}

inline int LaneFor(int gpu) {
  int lane = t_lane_plus1[gpu] - 1;
  return lane >= 0 ? lane : AcquireLane(gpu);
}

// The thread that kept this process's member mutex locked has exited: take it over so that the
// process's death stays visible to the others.
inline void ReanchorIfNeeded(int gpu) {
  GpuState& gs = g_rt.gpus[gpu];
  if (__builtin_expect(!gs.needs_anchor.load(std::memory_order_relaxed), 1)) return;
  bool expected = true;
  if (!gs.needs_anchor.compare_exchange_strong(expected, false)) return;
  gs.budget.AdoptMember(gs.member.load());
  t_anchor[gpu] = true;
  pthread_setspecific(g_thread_key, reinterpret_cast<void*>(1));
}

// Sizes for the message, formatted without the heap.
void FormatBytes(uint64_t bytes, char* buf, size_t len) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t scale = 1;
  while (u < 4 && bytes >= scale * 1024) {
    scale *= 1024;
    ++u;
  }
  if (u == 0) {
    snprintf(buf, len, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    uint64_t hundredths = bytes * 100 / scale;
    snprintf(buf, len, "%llu.%02llu %s", static_cast<unsigned long long>(hundredths / 100),
             static_cast<unsigned long long>(hundredths % 100), units[u]);
  }
}

void ReportOverLimit(int gpu, uint64_t requested) {
  if (g_rt.config.quiet) return;
  const GpuState& gs = g_rt.gpus[gpu];
  char limit[32], used[32], req[32];
  FormatBytes(gs.budget.limit(), limit, sizeof(limit));
  FormatBytes(gs.budget.used(), used, sizeof(used));
  FormatBytes(requested, req, sizeof(req));
  PrintError(
      "gpufrac: out of GPU memory on %s: workload %s has a limit of %s, %s in use, %s requested "
      "(GPUFRAC_QUIET=1 silences this)\n",
      g_rt.config.gpus[gpu].uuid, g_rt.config.workload, limit, used, req);
}

void ReportNoLane(int gpu) {
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  PrintError(
      "gpufrac: workload %s has more than %d processes or %d threads allocating on %s; their "
      "allocations are refused\n",
      g_rt.config.workload, kBudgetMembers, kBudgetLanes, g_rt.config.gpus[gpu].uuid);
}

}  // namespace

void ReportBroken() {
  if (g_broken_reported.exchange(true)) return;
  PrintError("%s", g_rt.error);
}

void PrintError(const char* format, ...) {
  char line[700];
  va_list args;
  va_start(args, format);
  int n = vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  if (n <= 0) return;
  ssize_t ignored = write(STDERR_FILENO, line, strnlen(line, sizeof(line)));
  (void)ignored;
}

int GpuForOrdinal(abi::CUdevice dev) {
  if (dev < 0 || dev >= kMaxOrdinals) return -1;
  int8_t gpu = g_ordinal_gpu[dev].load(std::memory_order_acquire);
  if (__builtin_expect(gpu != kUnknown, 1)) return gpu;
  abi::CUuuid uuid;
  abi::CUresult r = abi::CUDA_ERROR_NOT_FOUND;
  if (auto v2 = Real_cuDeviceGetUuid_v2()) r = v2(&uuid, dev);
  if (r != abi::CUDA_SUCCESS) r = Real_cuDeviceGetUuid()(&uuid, dev);
  if (r != abi::CUDA_SUCCESS) return -1;  // not a valid device (yet): decide next time
  gpu = kUnlimited;
  for (int g = 0; g < g_rt.config.gpu_count; ++g) {
    if (memcmp(g_rt.config.gpus[g].uuid_bytes, uuid.bytes, 16) == 0) gpu = static_cast<int8_t>(g);
  }
  g_ordinal_gpu[dev].store(gpu, std::memory_order_release);
  return gpu;
}

AllocTarget CurrentTarget() {
  abi::CUcontext ctx = nullptr;
  if (Real_cuCtxGetCurrent()(&ctx) != abi::CUDA_SUCCESS || !ctx) return {-1, 0};
  const uint64_t handle = reinterpret_cast<uint64_t>(ctx);
  const uint32_t epoch = g_context_epoch.load(std::memory_order_acquire);
  if (t_context == handle && t_context_epoch == epoch) return {t_context_gpu, t_instance};
  // Slow path, once per thread and context: its GPU and its instance number.
  abi::CUdevice dev;
  int gpu = Real_cuCtxGetDevice()(&dev) == abi::CUDA_SUCCESS ? GpuForOrdinal(dev) : -1;
  pthread_mutex_lock(&g_slow_lock);
  ChargeRecord known;
  uint64_t instance;
  if (g_rt.contexts.Find(handle, &known)) {
    instance = known.owner;
  } else {
    instance = g_next_instance++;
    g_rt.contexts.Insert(handle, ChargeRecord{0, 0, instance});
  }
  pthread_mutex_unlock(&g_slow_lock);
  t_context = handle;
  t_context_gpu = gpu;
  t_context_epoch = epoch;
  t_instance = instance;
  return {gpu, instance};
}

uint64_t RetireContext(uint64_t handle) {
  pthread_mutex_lock(&g_slow_lock);
  ChargeRecord known{0, 0, 0};
  g_rt.contexts.Take(handle, &known);
  g_context_epoch.fetch_add(1, std::memory_order_acq_rel);
  pthread_mutex_unlock(&g_slow_lock);
  return known.owner;
}

void RestoreContext(uint64_t handle, uint64_t instance) {
  if (instance == 0) return;
  pthread_mutex_lock(&g_slow_lock);
  ChargeRecord meanwhile;
  if (g_rt.contexts.Find(handle, &meanwhile)) {
    // Another thread allocated in the context while its destruction was pending and gave it a
    // new instance: it stays, and the old instance's allocations move to it.
    const uint64_t now = meanwhile.owner;
    for (AllocTable* table : {&g_rt.pointers, &g_rt.objects}) {
      table->TakeAllOwnedBy(instance, [&](uint64_t key, ChargeRecord charge) {
        charge.owner = now;
        table->Insert(key, charge);
      });
    }
  } else {
    g_rt.contexts.Insert(handle, ChargeRecord{0, 0, instance});
  }
  g_context_epoch.fetch_add(1, std::memory_order_acq_rel);
  pthread_mutex_unlock(&g_slow_lock);
}

int GpuForNvmlDevice(abi::nvmlDevice_t device) {
  // NVML is not a hot path: ask for the UUID each time rather than cache handles.
  char text[abi::kNvmlDeviceUuidV2BufferSize];
  if (Real_nvmlDeviceGetUUID()(device, text, sizeof(text)) != abi::NVML_SUCCESS) return -1;
  unsigned char bytes[16];
  if (!ParseUuid(text, bytes)) return -1;
  for (int g = 0; g < g_rt.config.gpu_count; ++g) {
    if (memcmp(g_rt.config.gpus[g].uuid_bytes, bytes, 16) == 0) return g;
  }
  return -1;
}

bool Charge(int gpu, uint64_t bytes) {
  GpuState& gs = g_rt.gpus[gpu];
  ReanchorIfNeeded(gpu);
  int lane = LaneFor(gpu);
  if (lane < 0) {
    ReportNoLane(gpu);
    return false;
  }
  if (gs.budget.Reserve(lane, g_self, bytes)) return true;
  ReportOverLimit(gpu, bytes);
  return false;
}

void Uncharge(int gpu, uint64_t bytes) {
  ReanchorIfNeeded(gpu);
  int lane = LaneFor(gpu);
  // Without a lane (all 1024 taken) the release cannot be recorded; the charge then stays until
  // this process ends, which errs on the safe side.
  if (lane >= 0) g_rt.gpus[gpu].budget.Release(lane, bytes);
}

void VirtualMemory(int gpu, uint64_t physical_free, uint64_t* total, uint64_t* free,
                   uint64_t* used) {
  Budget& b = g_rt.gpus[gpu].budget;
  ReanchorIfNeeded(gpu);
  if (__builtin_expect(b.MemberDied(), 0)) b.Reclaim(g_self, /*wait=*/false);  // a dead member
  uint64_t limit = b.limit();
  uint64_t in_use = b.used();
  uint64_t left = in_use < limit ? limit - in_use : 0;
  *total = limit;
  *used = in_use;
  *free = left < physical_free ? left : physical_free;
}

}  // namespace gpufrac::limiter
