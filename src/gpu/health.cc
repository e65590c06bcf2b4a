// GPU health from NVML events and lost-GPU errors (see health.h). One event set covers every
// watched GPU; when NVML says a GPU in it is lost, the set is rebuilt without the lost GPUs so
// that the others' events keep coming.
#include "gpu/health.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "abi/nvml_abi.h"
#include "common/log.h"
#include "gpu/nvml_library.h"

namespace gpufrac::gpu {
namespace {

// The events that make a GPU unhealthy. Single-bit ECC errors are corrected by the hardware.
constexpr unsigned long long kWatchedEvents =
    abi::nvmlEventTypeXidCriticalError | abi::nvmlEventTypeDoubleBitEccError;

// Bounds one Check's draining, in case events arrive faster than they are read.
constexpr int kMaxEventsPerCheck = 1024;

struct KnownXid {
  unsigned long long xid;
  const char* meaning;
};

// From NVIDIA's XID catalogue; the ones operators meet most.
constexpr KnownXid kKnownXids[] = {
    {13, "graphics engine exception"},
    {31, "GPU memory page fault"},
    {43, "GPU stopped processing"},
    {45, "preemptive cleanup, due to previous errors"},
    {48, "double-bit ECC error"},
    {61, "internal micro-controller breakpoint/warning"},
    {62, "internal micro-controller halt"},
    {63, "ECC page retirement or row remapping recording event"},
    {64, "ECC page retirement or row remapper recording failure"},
    {68, "video processor exception"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {109, "context switch timeout"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
    {abi::kNvmlUnknownXid, "an XID the driver could not identify"},
};

}  // namespace

bool IsApplicationXid(unsigned long long xid) {
  switch (xid) {
    case 13:
    case 31:
    case 43:
    case 45:
    case 68:
    case 109:
      return true;
    default:
      return false;
  }
}

std::string_view XidDescription(unsigned long long xid) {
  for (const KnownXid& known : kKnownXids) {
    if (known.xid == xid) return known.meaning;
  }
  return {};
}

struct HealthMonitor::State {
  struct Gpu {
    abi::nvmlDevice_t handle = nullptr;  // Null when NVML could not open the GPU.
    unsigned long long events = 0;       // What it is registered for; 0 for none.
    GpuHealth health;
  };

  std::unique_ptr<NvmlSession> nvml;  // First: it shuts NVML down after the set is freed.
  abi::nvmlDeviceGetCount_v2_t get_count = nullptr;
  abi::nvmlDeviceGetHandleByIndex_v2_t get_handle = nullptr;
  abi::nvmlDeviceGetUUID_t get_uuid = nullptr;
  abi::nvmlDeviceGetMemoryInfo_t get_memory_info = nullptr;
  abi::nvmlDeviceGetSupportedEventTypes_t supported_events = nullptr;
  abi::nvmlDeviceRegisterEvents_t register_events = nullptr;
  abi::nvmlEventSetCreate_t create_set = nullptr;
  abi::nvmlEventSetWait_v2_t wait = nullptr;
  abi::nvmlEventSetFree_t free_set = nullptr;

  abi::nvmlEventSet_t set = nullptr;
  std::vector<Gpu> gpus;

  ~State() {
    if (set != nullptr) free_set(set);
  }

  std::string ErrorText(abi::nvmlReturn_t rc) const { return nvml->ErrorText(rc); }

  Status ResolveAll() {
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetCount_v2", &get_count));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetHandleByIndex_v2", &get_handle));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetUUID", &get_uuid));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetMemoryInfo", &get_memory_info));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceGetSupportedEventTypes", &supported_events));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlDeviceRegisterEvents", &register_events));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlEventSetCreate", &create_set));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlEventSetWait_v2", &wait));
    GPUFRAC_RETURN_IF_ERROR(nvml->Resolve("nvmlEventSetFree", &free_set));
    return OkStatus();
  }

  Status CallError(abi::nvmlReturn_t rc, const std::string& call) const {
    return nvml->CallError(rc, call);
  }

  // The health verdict for an NVML error on a GPU, or "" when the error says nothing about it.
  static std::string LostReason(abi::nvmlReturn_t rc) {
    switch (rc) {
      case abi::NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost (NVML_ERROR_GPU_IS_LOST): it has fallen off the bus or is otherwise "
               "inaccessible";
      case abi::NVML_ERROR_RESET_REQUIRED:
        return "GPU requires a reset (NVML_ERROR_RESET_REQUIRED)";
      default:
        return "";
    }
  }

  void MarkUnhealthy(Gpu& gpu, std::string reason) {
    if (!gpu.health.healthy) return;  // The first cause is the one worth keeping.
    gpu.health.healthy = false;
    gpu.health.reason = std::move(reason);
    LogWarning("GPU %u (%s) is unhealthy: %s", gpu.health.index,
               gpu.health.uuid.empty() ? "UUID unknown" : gpu.health.uuid.c_str(),
               gpu.health.reason.c_str());
  }

  // Opens GPU `index` and registers it for the watched events it supports.
  void AddGpu(unsigned index) {
    Gpu& gpu = gpus.emplace_back();
    gpu.health.index = index;
    const std::string label = "(GPU " + std::to_string(index) + ")";
    if (auto rc = get_handle(index, &gpu.handle); rc != abi::NVML_SUCCESS) {
      gpu.handle = nullptr;
      const std::string lost = LostReason(rc);
      MarkUnhealthy(gpu, !lost.empty() ? lost
                                       : "NVML cannot open the GPU: nvmlDeviceGetHandleByIndex_v2 "
                                         "failed: " +
                                             ErrorText(rc));
      return;
    }
    char uuid[abi::kNvmlDeviceUuidV2BufferSize] = {};
    if (auto rc = get_uuid(gpu.handle, uuid, sizeof(uuid)); rc == abi::NVML_SUCCESS) {
      uuid[sizeof(uuid) - 1] = '\0';
      gpu.health.uuid = uuid;
    } else if (std::string lost = LostReason(rc); !lost.empty()) {
      MarkUnhealthy(gpu, std::move(lost));
      return;
    }
    unsigned long long supported = 0;
    if (auto rc = supported_events(gpu.handle, &supported); rc != abi::NVML_SUCCESS) {
      if (std::string lost = LostReason(rc); !lost.empty()) {
        MarkUnhealthy(gpu, std::move(lost));
      } else {
        LogInfo(
            "GPU %u: nvmlDeviceGetSupportedEventTypes failed: %s; only checking whether it "
            "is lost",
            index, ErrorText(rc).c_str());
      }
      return;
    }
    gpu.events = supported & kWatchedEvents;
    if (gpu.events == 0) {
      LogInfo("GPU %u reports no XID or ECC events; only checking whether it is lost", index);
    }
  }

  // Registers every healthy GPU's events in `set`; a GPU that refuses is watched for loss only.
  void RegisterAll() {
    for (Gpu& gpu : gpus) {
      if (gpu.handle == nullptr || gpu.events == 0 || !gpu.health.healthy) continue;
      const auto rc = register_events(gpu.handle, gpu.events, set);
      if (rc == abi::NVML_SUCCESS) continue;
      if (std::string lost = LostReason(rc); !lost.empty()) {
        MarkUnhealthy(gpu, std::move(lost));
      } else {
        LogInfo("GPU %u: nvmlDeviceRegisterEvents failed: %s; only checking whether it is lost",
                gpu.health.index, ErrorText(rc).c_str());
        gpu.events = 0;
      }
    }
  }

  // A new set without the unhealthy GPUs: NVML keeps answering GPU_IS_LOST for a set holding a
  // lost GPU. Events between the old set and the new one are missed (NVML records nothing for
  // a set before registration).
  void RebuildEventSet() {
    if (set != nullptr) free_set(set);
    set = nullptr;
    if (auto rc = create_set(&set); rc != abi::NVML_SUCCESS) {
      set = nullptr;
      LogWarning("nvmlEventSetCreate failed: %s; GPU health now only checks for lost GPUs",
                 ErrorText(rc).c_str());
      return;
    }
    RegisterAll();
  }

  void HandleEvent(const abi::nvmlEventData_t& event) {
    auto found = std::find_if(gpus.begin(), gpus.end(),
                              [&](const Gpu& gpu) { return gpu.handle == event.device; });
    if (found == gpus.end()) return;
    Gpu& gpu = *found;
    std::string where;
    if (event.gpuInstanceId != abi::kNvmlEventNoInstanceId) {
      where = " in MIG GPU instance " + std::to_string(event.gpuInstanceId);
    }
    if (event.eventType == abi::nvmlEventTypeXidCriticalError) {
      const unsigned long long xid = event.eventData;
      const std::string_view meaning = XidDescription(xid);
      std::string text = "XID " + std::to_string(xid);
      if (!meaning.empty()) text += " (" + std::string(meaning) + ")";
      if (IsApplicationXid(xid)) {
        LogInfo("GPU %u: %s%s, an application error; the GPU stays healthy", gpu.health.index,
                text.c_str(), where.c_str());
        return;
      }
      MarkUnhealthy(gpu, text + where);
    } else if (event.eventType == abi::nvmlEventTypeDoubleBitEccError) {
      MarkUnhealthy(gpu, "double-bit ECC error (uncorrectable memory error)" + where);
    }
  }

  // Asks every healthy GPU something NVML must reach the GPU for; the answer says if it is lost.
  void CheckLost() {
    for (Gpu& gpu : gpus) {
      if (gpu.handle == nullptr || !gpu.health.healthy) continue;
      abi::nvmlMemory_t memory{};
      if (std::string lost = LostReason(get_memory_info(gpu.handle, &memory)); !lost.empty()) {
        MarkUnhealthy(gpu, std::move(lost));
      }
    }
  }

  size_t UnhealthyCount() const {
    return static_cast<size_t>(std::count_if(gpus.begin(), gpus.end(),
                                             [](const Gpu& gpu) { return !gpu.health.healthy; }));
  }

  std::vector<GpuHealth> Snapshot() const {
    std::vector<GpuHealth> out;
    out.reserve(gpus.size());
    for (const Gpu& gpu : gpus) out.push_back(gpu.health);
    return out;
  }
};

HealthMonitor::HealthMonitor(std::unique_ptr<State> state)
    : state_(std::move(state)), last_(state_->Snapshot()) {}

HealthMonitor::~HealthMonitor() = default;

StatusOr<std::unique_ptr<HealthMonitor>> HealthMonitor::Open(const std::string& library) {
  auto state = std::make_unique<State>();
  GPUFRAC_ASSIGN_OR_RETURN(state->nvml, NvmlSession::Open(library, "GPU health checks"));
  GPUFRAC_RETURN_IF_ERROR(state->ResolveAll());
  unsigned count = 0;
  if (auto rc = state->get_count(&count); rc != abi::NVML_SUCCESS) {
    return state->CallError(rc, "nvmlDeviceGetCount_v2");
  }
  if (auto rc = state->create_set(&state->set); rc != abi::NVML_SUCCESS) {
    state->set = nullptr;
    return state->CallError(rc, "nvmlEventSetCreate");
  }
  state->gpus.reserve(count);
  for (unsigned i = 0; i < count; ++i) state->AddGpu(i);
  state->RegisterAll();
  return std::unique_ptr<HealthMonitor>(new HealthMonitor(std::move(state)));
}

std::vector<GpuHealth> HealthMonitor::Check(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (wait.count() > 0) {
    lock.lock();
  } else if (!lock.try_lock()) {
    std::lock_guard last_lock(last_mu_);
    return last_;
  }
  State& s = *state_;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::max(wait, std::chrono::milliseconds(0));
  int events = 0;
  while (s.set != nullptr && events < kMaxEventsPerCheck) {
    // After the first event only what is already pending is read. Never 0 ms: the headers do
    // not say whether 0 polls or waits forever.
    long long timeout_ms = 1;
    if (events == 0) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      timeout_ms = std::clamp<long long>(left.count(), 1, 0x7fffffff);
    }
    abi::nvmlEventData_t event{};
    const auto rc = s.wait(s.set, &event, static_cast<unsigned>(timeout_ms));
    if (rc == abi::NVML_SUCCESS) {
      ++events;
      s.HandleEvent(event);
      continue;
    }
    if (rc == abi::NVML_ERROR_TIMEOUT) {
      // NVML may also time out early ("e.g. when interrupt arrives"): wait out the rest.
      if (events == 0 && Clock::now() < deadline) continue;
      break;
    }
    if (rc == abi::NVML_ERROR_GPU_IS_LOST) {
      // Which GPU NVML does not say: ask each, then go on without the lost ones.
      const size_t unhealthy_before = s.UnhealthyCount();
      s.CheckLost();
      s.RebuildEventSet();
      if (s.UnhealthyCount() == unhealthy_before) {
        // No query confirms it; the new set would answer the same at once. Sleep out the wait
        // rather than spin.
        LogWarning("nvmlEventSetWait_v2 reports a lost GPU, but every GPU still answers");
        std::this_thread::sleep_until(deadline);
      }
      break;
    }
    LogWarning("nvmlEventSetWait_v2 failed: %s", s.ErrorText(rc).c_str());
    std::this_thread::sleep_until(deadline);
    break;
  }
  if (s.set == nullptr) std::this_thread::sleep_until(deadline);
  s.CheckLost();
  std::vector<GpuHealth> now = s.Snapshot();
  std::lock_guard last_lock(last_mu_);
  last_ = now;
  return now;
}

}  // namespace gpufrac::gpu
