// cuInit, the process's lifetime hooks (fork, exit) and the driver's resource bookkeeping.
#include "simgpu/cuda/driver.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <new>

#include "proc/process_identity.h"
#include "simgpu/core/device_names.h"
#include "simgpu/core/engine.h"
#include "simgpu/core/kernel_fault.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/core/mig_state.h"
#include "simgpu/core/mps_settings.h"
#include "simgpu/core/visible_devices.h"
#include "simgpu/cuda/mps_client.h"

namespace gpufrac::simgpu {

using abi::CUresult;

constinit std::atomic<Driver*> g_driver{nullptr};

namespace {

std::mutex g_init_mu;
bool g_init_done = false;  // guarded by g_init_mu
CUresult g_init_result = abi::CUDA_SUCCESS;

bool IsHostBacked(AllocationKind kind) {
  return kind == AllocationKind::kManaged || kind == AllocationKind::kHostPool;
}

CUresult Complain(const std::string& message, CUresult result) {
  std::fprintf(stderr, "simgpu: cuInit: %s\n", message.c_str());
  return result;
}

// The physical devices of `devices` as a bit mask.
std::uint32_t DeviceMask(const std::vector<VisibleDevice>& devices) {
  std::uint32_t mask = 0;
  for (const VisibleDevice& device : devices) mask |= 1u << device.physical;
  return mask;
}

// The devices CUDA_VISIBLE_DEVICES names; for an MPS client, among those its server serves.
std::vector<VisibleDeviceRef> VisibleRefs(const MpsAttachment& mps, const DeviceNames& names) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!mps.attached) return ParseVisibleDevices(visible, names);
  // The server's devices (full UUIDs), remapped: the process's own list picks among them.
  std::string served;
  for (const std::string& uuid : mps.devices) served += (served.empty() ? "" : ",") + uuid;
  return RemapVisibleDevices(visible, ParseVisibleDevices(served.c_str(), names), names);
}

// A MIG device as the process sees it: the instance's UUID, name, memory and SMs; the process
// is bound to it through its slot.
void BindMigDevice(const SharedDevice& shared, const MigBinding& binding, ProcessSlot* slot,
                   VisibleDevice* device) {
  const SharedGpuInstance& instance = shared.gpu_instances[binding.gpu_instance];
  device->uuid = MigDeviceUuid(shared, binding.gpu_instance, binding.compute_instance);
  device->name = MigDeviceName(shared, binding.gpu_instance, binding.compute_instance);
  device->total_bytes = instance.total_bytes;
  const std::uint32_t slices = instance.compute[binding.compute_instance].slice_count;
  device->sm_count = static_cast<int>(instance.sm_count * slices / instance.compute_slices);
  device->gpu_instance = binding.gpu_instance;
  device->compute_instance = binding.compute_instance;
  device->mig_generation = binding.generation;
  slot->mig_binding.store(PackMigBinding(binding), std::memory_order_release);
}

// An MPS client's view of a device: the SMs its thread percentage allows and its server's
// memory limit. `ordinal` is the device's place in the process's list.
void ApplyMpsShare(const MpsAttachment& mps, int ordinal, const std::string& uuid,
                   VisibleDevice* device) {
  // The SMs the percentage allows are what the device reports and what kernels run on.
  const int sms = ThreadPercentageSms(device->sm_count, mps.thread_percentage);
  device->mps_share_ppm = static_cast<std::uint32_t>(static_cast<std::uint64_t>(sms) *
                                                     kWholeEnginePpm / device->sm_count);
  device->sm_count = sms;
  device->mps_group = mps.group;
  device->mps_limit_bytes = MpsClientMemLimit(mps, ordinal, uuid);
}

// Gives back what Initialize took before it failed: the slot, the MPS connection, the driver.
void Abandon(SharedMachine& machine, ProcessSlot& slot, const MpsAttachment& mps, Driver* driver) {
  ReleaseSlot(machine, slot);
  if (mps.server_fd >= 0) ::close(mps.server_fd);
  delete driver;
}

// The process's devices, in CUDA's order, into `driver`. On failure (a GPU of a model this
// build does not know), `driver` is abandoned.
CUresult ListVisibleDevices(Driver* driver, const MpsAttachment& mps) {
  SharedMachine& machine = *driver->machine;
  ProcessSlot* slot = driver->slot;
  // Under the MIG lock, so the MIG device chosen cannot be destroyed before this process is
  // bound to it (and from then on counts as running in it).
  MigLock lock(machine);
  const MachineDeviceNames known = CollectDeviceNamesLocked(machine);
  const DeviceNames& names = known.names;
  for (const VisibleDeviceRef& ref : VisibleRefs(mps, names)) {
    const SharedDevice& shared = machine.devices[ref.physical];
    VisibleDevice device;
    device.physical = ref.physical;
    device.model = DeviceModel(shared);
    if (device.model == nullptr) {
      Abandon(machine, *slot, mps, driver);
      return Complain(std::string("unknown GPU model ") + shared.model, abi::CUDA_ERROR_UNKNOWN);
    }
    std::copy(std::begin(shared.uuid), std::end(shared.uuid), device.parent_uuid.begin());
    device.uuid = device.parent_uuid;
    device.name = device.model->nvml_name;
    device.total_bytes = shared.total_bytes;
    device.sm_count = device.model->sm_count;
    if (ref.mig >= 0) BindMigDevice(shared, known.migs[ref.mig], slot, &device);
    if (mps.attached) {
      ApplyMpsShare(mps, static_cast<int>(driver->devices.size()), VisibleDeviceUuid(names, ref),
                    &device);
    }
    driver->devices.push_back(device);
  }
  return abi::CUDA_SUCCESS;
}

CUresult Initialize() {
  std::string error;
  SharedMachine* machine = AttachSharedMachineFromEnv(&error);
  if (machine == nullptr) return Complain(error, abi::CUDA_ERROR_UNKNOWN);

  // Memory left behind by dead processes is returned before this one starts counting.
  ReclaimDeadProcesses(*machine, /*self_is_stale=*/true);
  ProcessSlot* slot = ClaimSlot(*machine, proc::CurrentProcess());
  if (slot == nullptr) {
    return Complain("all " + std::to_string(kMaxProcessSlots) + " process slots are in use",
                    abi::CUDA_ERROR_OUT_OF_MEMORY);
  }
  // An MPS client if a control daemon listens in the pipe directory (this may wait for another
  // user's server to end).
  MpsAttachment mps;
  if (CUresult result = AttachToMps(&mps); result != abi::CUDA_SUCCESS) {
    ReleaseSlot(*machine, *slot);
    return result;
  }

  auto* driver = new Driver;
  driver->machine = machine;
  driver->slot = slot;
  driver->own_slot = slot;
  driver->mps_server_fd = mps.server_fd;
  if (CUresult result = ListVisibleDevices(driver, mps); result != abi::CUDA_SUCCESS) {
    return result;
  }
  driver->primary_contexts.assign(driver->devices.size(), nullptr);
  driver->default_pools.assign(driver->devices.size(), nullptr);
  if (mps.attached) {
    // A server that goes away takes the process's contexts with it.
    const std::uint32_t mask = DeviceMask(driver->devices);
    WatchMpsServer(mps.server_fd, [driver, mask] {
      std::lock_guard lock(driver->mu);
      if (driver->slot == nullptr) return;  // exiting: the slot may already be someone else's
      FailProcess(*driver->machine, *driver->slot, mask, abi::CUDA_ERROR_MPS_RPC_FAILURE);
    });
  }
  g_driver.store(driver, std::memory_order_release);
  // Like the real driver, an empty device list still initialises (cuDeviceGetCount reports 0).
  return driver->devices.empty() ? abi::CUDA_ERROR_NO_DEVICE : abi::CUDA_SUCCESS;
}

// The parent's driver in a forked child: abandoned, but kept reachable (leak checkers).
Driver* g_parent_driver = nullptr;

// A forked child starts with no driver: the parent's contexts and memory are not its own.
void ForgetDriverInChild() {
  if (Driver* parent = g_driver.exchange(nullptr, std::memory_order_relaxed)) {
    g_parent_driver = parent;
    // The MPS server must see the parent leave when it does, not when this child ends too.
    if (parent->mps_server_fd >= 0) ::close(parent->mps_server_fd);
  }
  new (&g_init_mu) std::mutex;  // another parent thread may have held it across fork()
  g_init_done = false;
  ForgetThreadContexts();
  ForgetPerThreadStreams();
}

__attribute__((constructor)) void RegisterForkHandler() {
  ::pthread_atfork(nullptr, nullptr, &ForgetDriverInChild);
}

// At exit (or dlclose) the process's memory goes back to the machine at once, as when a real
// CUDA process exits; later calls from lingering threads fail with CUDA_ERROR_DEINITIALIZED.
__attribute__((destructor)) void DetachAtExit() {
  Driver* driver = g_driver.load(std::memory_order_acquire);
  if (driver == nullptr) return;
  std::lock_guard lock(driver->mu);
  if (driver->slot != nullptr) {
    // Queued work goes with the process, as when a CUDA process exits.
    for (Context* context : driver->contexts) {
      if (context->active.load(std::memory_order_relaxed)) {
        LeaveEngine(*driver->machine, context->engine);
        context->engine = EngineSeat{};
      }
    }
    ReleaseSlot(*driver->machine, *driver->slot);
    driver->slot = nullptr;
  }
}

}  // namespace

CUresult InitializeDriver(unsigned int flags) {
  if (flags != 0) return abi::CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_init_mu);
  if (!g_init_done) {
    g_init_result = Initialize();
    g_init_done = true;
  }
  return g_init_result;
}

CUresult ReviveCurrentContext(Driver* driver, Context* context) {
  std::lock_guard lock(driver->mu);
  if (context->active.load(std::memory_order_relaxed)) return abi::CUDA_SUCCESS;
  if (context->primary) {
    if (context->primary_refcount > 0) return driver->ActivateContextLocked(context);
    return abi::CUDA_ERROR_INVALID_CONTEXT;
  }
  return abi::CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

CUresult Driver::ChargeLocked(int ordinal, std::uint64_t bytes) {
  if (slot == nullptr) return abi::CUDA_ERROR_DEINITIALIZED;
  if (bytes == 0) return abi::CUDA_SUCCESS;
  if (const std::uint64_t limit = devices[ordinal].mps_limit_bytes; limit != 0) {
    // All of this process's charges are made under `mu`, so the check cannot go stale. The
    // limit counts everything the process holds on the device, its contexts included, as
    // NVIDIA says it accounts for CUDA's internal device allocations.
    const std::uint64_t held =
        slot->used_bytes[devices[ordinal].physical].load(std::memory_order_relaxed);
    if (held > limit || bytes > limit - held) return abi::CUDA_ERROR_OUT_OF_MEMORY;
  }
  return Charge(*machine, *slot, devices[ordinal].physical, bytes) ? abi::CUDA_SUCCESS
                                                                   : abi::CUDA_ERROR_OUT_OF_MEMORY;
}

void Driver::ReleaseLocked(int ordinal, std::uint64_t bytes) {
  if (bytes == 0 || slot == nullptr) return;
  Release(*machine, *slot, devices[ordinal].physical, bytes);
}

CUresult Driver::AllocateLocked(const Allocation& spec, abi::CUdeviceptr* base) {
  Allocation allocation = spec;
  if (CUresult result = ChargeLocked(spec.ordinal, spec.charged); result != abi::CUDA_SUCCESS) {
    return result;
  }
  abi::CUdeviceptr address = 0;
  if (IsHostBacked(spec.kind)) {
    void* memory = ::mmap(nullptr, spec.size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory != MAP_FAILED) {
      allocation.host_mapping = memory;
      address = reinterpret_cast<abi::CUdeviceptr>(memory);
    }
  } else if (spec.kind == AllocationKind::kLegacy32) {
    address = allocations.PlaceLegacy32(spec.size);
  } else {
    address = allocations.PlaceDevice(spec.size);
  }
  if (address == 0) {
    ReleaseLocked(spec.ordinal, spec.charged);
    return abi::CUDA_ERROR_OUT_OF_MEMORY;
  }
  allocations.Insert(address, allocation);
  *base = address;
  return abi::CUDA_SUCCESS;
}

CUresult Driver::FreeLocked(abi::CUdeviceptr base) {
  Allocation allocation;
  if (!allocations.Remove(base, &allocation)) return abi::CUDA_ERROR_INVALID_VALUE;
  if (allocation.kind == AllocationKind::kReservation) {
    // Put back rather than look up first: keeps the common free path to one tree search.
    allocations.Insert(base, allocation);
    return abi::CUDA_ERROR_INVALID_VALUE;
  }
  ReleaseLocked(allocation.ordinal, allocation.charged);
  if (allocation.host_mapping != nullptr) ::munmap(allocation.host_mapping, allocation.size);
  return abi::CUDA_SUCCESS;
}

void Driver::DiscardCaptureLocked(Stream* stream) {
  if (stream->capture == nullptr) return;
  graphs.erase(stream->capture);
  delete stream->capture;
  stream->capture = nullptr;
  stream->capture_last = -1;
  stream->capture_invalidated = false;
}

CUresult Driver::ActivateContextLocked(Context* context) {
  if (CUresult result = ChargeLocked(context->ordinal, context->model->context_bytes);
      result != abi::CUDA_SUCCESS) {
    return result;
  }
  const VisibleDevice& device = devices[context->ordinal];
  const EngineKey key{.device = device.physical,
                      .gpu_instance = device.gpu_instance,
                      .compute_instance = device.compute_instance,
                      .generation = device.mig_generation,
                      .group = device.mps_group,
                      .share_ppm = device.mps_share_ppm};
  EngineSeat seat;
  const int slot_index = static_cast<int>(slot - machine->slots);
  // A dead process's contexts are gone, as the driver tears them down at its exit: when the
  // engine's table is full, those still in it are removed before the new one is refused.
  if (!JoinEngine(*machine, key, slot_index, &seat) &&
      (RemoveDeadClients(*machine, key.device, /*force=*/true) == 0 ||
       !JoinEngine(*machine, key, slot_index, &seat))) {
    ReleaseLocked(context->ordinal, context->model->context_bytes);
    return abi::CUDA_ERROR_OUT_OF_MEMORY;
  }
  // The streams start again on the new engine clock, with nothing queued.
  context->engine = seat;
  context->activation.fetch_add(1, std::memory_order_relaxed);
  context->legacy_done_ns.store(0, std::memory_order_relaxed);
  context->blocking_done_ns.store(0, std::memory_order_relaxed);
  context->non_blocking_done_ns.store(0, std::memory_order_relaxed);
  context->active.store(true, std::memory_order_release);
  return abi::CUDA_SUCCESS;
}

void Driver::TeardownContextLocked(Context* context) {
  for (const Allocation& allocation : allocations.RemoveContext(context)) {
    ReleaseLocked(allocation.ordinal, allocation.charged);
    if (allocation.host_mapping != nullptr) ::munmap(allocation.host_mapping, allocation.size);
  }
  for (auto it = arrays.begin(); it != arrays.end();) {
    ArrayObject* array = *it;
    if (array->context != context) {
      ++it;
      continue;
    }
    ReleaseLocked(context->ordinal, array->bytes);
    delete array;
    it = arrays.erase(it);
  }
  for (auto it = streams.begin(); it != streams.end();) {
    Stream* stream = *it;
    if (stream->context != context) {
      ++it;
      continue;
    }
    DiscardCaptureLocked(stream);
    stream->magic = 0;
    free_streams.push_back(stream);
    it = streams.erase(it);
  }
  for (auto it = modules.begin(); it != modules.end();) {
    Module* module = *it;
    if (module->context != context) {
      ++it;
      continue;
    }
    module->magic = 0;
    for (auto& function : module->functions) function->magic = 0;
    unloaded_modules.push_back(module);
    it = modules.erase(it);
  }
  // Leaving the engine frees the events' watches.
  for (auto it = events.begin(); it != events.end();) {
    Event* event = *it;
    if (event->context != context) {
      ++it;
      continue;
    }
    event->magic = 0;
    free_events.push_back(event);
    it = events.erase(it);
  }
  for (auto it = graph_execs.begin(); it != graph_execs.end();) {
    if ((*it)->context != context) {
      ++it;
      continue;
    }
    delete *it;
    it = graph_execs.erase(it);
  }
  ReleaseLocked(context->ordinal, context->model->context_bytes);
  if (slot != nullptr) LeaveEngine(*machine, context->engine);
  context->engine = EngineSeat{};
  context->active.store(false, std::memory_order_release);
}

}  // namespace gpufrac::simgpu
