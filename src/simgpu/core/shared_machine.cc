// Creation and mapping of the shared-memory machine segment.
#include "simgpu/core/shared_machine.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "simgpu/core/device_events.h"
#include "simgpu/core/engine.h"
#include "simgpu/core/mig_state.h"
#include "simgpu/core/uuid.h"

namespace gpufrac::simgpu {
namespace {

constexpr std::uint32_t kMagic = 0x53494d47;  // "SIMG"
// 2: MIG state; 3: events, lost GPUs; 4: engines; 5: MPS groups, weighted engine time, faults;
// 6: per-process utilisation samples.
constexpr std::uint32_t kLayoutVersion = 6;

std::string ErrnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// How long a process waits for the segment to become usable: its creator is between shm_open and
// fchmod, or another process holds the creation lock. Bounded, so that a stuck or hostile
// process of another user cannot block the others' cuInit (or a service's NVML) for ever.
constexpr int kAttachTries = 400;
constexpr useconds_t kAttachPauseUs = 5000;

// Opens the namespace's segment for reading and writing, creating it if there is none. One
// machine serves every user, as a GPU does: its creator makes it readable and writable by all
// (0666, whatever the umask). -1 with `error` when it cannot be opened in time.
int OpenSegment(const std::string& name, std::string* error) {
  for (int attempt = 0;; ++attempt) {
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      if (::fchmod(fd, 0666) == 0) return fd;
      *error = ErrnoText(("fchmod " + name).c_str());
      ::close(fd);
      ::shm_unlink(name.c_str());
      return -1;
    }
    if (errno == EEXIST) fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) return fd;
    // EACCES: made a moment ago and not yet opened to all; ENOENT: removed since.
    if ((errno != EACCES && errno != ENOENT && errno != EEXIST) || attempt == kAttachTries) {
      *error = ErrnoText(("shm_open " + name).c_str());
      if (errno == EACCES) *error += " (made by another user without access for all; remove it)";
      return -1;
    }
    ::usleep(kAttachPauseUs);
  }
}

// Takes the creation lock on `fd`, waiting a bounded time. False with `error`.
bool LockSegment(int fd, std::string* error) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || attempt == kAttachTries) {
      *error = errno == EWOULDBLOCK ? "flock: another process holds the machine's creation lock"
                                    : ErrnoText("flock");
      return false;
    }
    ::usleep(kAttachPauseUs);
  }
}

// Builds the device table. The segment is fresh zero-filled memory or a half-initialised one
// whose creator died; both are overwritten completely before `magic` is published.
void InitialiseMachine(SharedMachine* machine, std::string_view name_space,
                       const MachineConfig& config) {
  std::memset(static_cast<void*>(machine), 0, sizeof(SharedMachine));
  new (machine) SharedMachine;  // starts the lifetime of the atomics (all zero)
  machine->layout_version = kLayoutVersion;
  machine->device_count = config.device_count;
  const std::string text = FormatMachineConfig(config);
  std::strncpy(machine->config, text.c_str(), sizeof(machine->config) - 1);
  InitialiseMigMutex(*machine);
  InitialiseEventLog(*machine);
  machine->timeslice_ns = config.timeslice_ns;
  InitialiseEngines(*machine);
  for (int i = 0; i < config.device_count; ++i) {
    SharedDevice& device = machine->devices[i];
    const gpu::GpuModel& model = *config.models[i];
    const std::size_t length = std::min(model.short_name.size(), sizeof(device.model) - 1);
    std::memcpy(device.model, model.short_name.data(), length);
    device.total_bytes = model.memory_bytes;
    const Uuid uuid = DeviceUuid(name_space, i);
    std::memcpy(device.uuid, uuid.data(), uuid.size());
    device.mig_current = device.mig_pending =
        config.mig[i] ? abi::NVML_DEVICE_MIG_ENABLE : abi::NVML_DEVICE_MIG_DISABLE;
  }
  machine->magic.store(kMagic, std::memory_order_release);
}

}  // namespace

std::string SharedMemoryName(std::string_view name_space) {
  std::string name = "/simgpu.";
  for (char c : name_space.substr(0, 200)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    name += plain ? c : '_';
  }
  return name;
}

SharedMachine* AttachSharedMachine(std::string_view name_space, const MachineConfig& config,
                                   std::string* error) {
  const std::string name = SharedMemoryName(name_space);
  const int fd = OpenSegment(name, error);
  if (fd < 0) return nullptr;
  // Everyone takes the lock, so whoever finds the segment empty initialises it alone.
  if (!LockSegment(fd, error)) {
    ::close(fd);
    return nullptr;
  }
  SharedMachine* machine = nullptr;
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    *error = ErrnoText("fstat");
  } else if (info.st_size != 0 && info.st_size != static_cast<off_t>(sizeof(SharedMachine))) {
    *error = name + " has an incompatible layout (built by another simgpu version?); remove it";
  } else if (info.st_size == 0 && ::ftruncate(fd, sizeof(SharedMachine)) != 0) {
    *error = ErrnoText("ftruncate");
  } else {
    void* address =
        ::mmap(nullptr, sizeof(SharedMachine), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (address == MAP_FAILED) {
      *error = ErrnoText("mmap");
    } else {
      machine = static_cast<SharedMachine*>(address);
      if (machine->magic.load(std::memory_order_acquire) != kMagic ||
          machine->layout_version != kLayoutVersion) {
        InitialiseMachine(machine, name_space, config);
      }
    }
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return machine;
}

SharedMachine* AttachSharedMachineFromEnv(std::string* error) {
  MachineConfig config;
  const std::string config_text = ConfigTextFromEnv();
  if (!ParseMachineConfig(config_text, &config, error)) return nullptr;
  config.timeslice_ns = TimesliceNsFromEnv();
  SharedMachine* machine = AttachSharedMachine(NamespaceFromEnv(), config, error);
  if (machine == nullptr) return nullptr;
  const std::string wanted = FormatMachineConfig(config);
  if (std::getenv("SIMGPU_CONFIG") != nullptr && wanted != machine->config) {
    std::fprintf(stderr,
                 "simgpu: namespace \"%s\" already exists as %s; ignoring SIMGPU_CONFIG=%s\n",
                 NamespaceFromEnv().c_str(), machine->config, config_text.c_str());
  }
  return machine;
}

bool RemoveSharedMachine(std::string_view name_space) {
  return ::shm_unlink(SharedMemoryName(name_space).c_str()) == 0;
}

const gpu::GpuModel* DeviceModel(const SharedDevice& device) {
  return gpu::FindModel(
      std::string_view(device.model, ::strnlen(device.model, sizeof(device.model))));
}

}  // namespace gpufrac::simgpu
