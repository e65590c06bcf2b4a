// The shared event log and lost flags (see device_events.h). Waiters sleep on a futex in the
// shared segment rather than polling, so a fault injected by one process wakes a waiting
// nvmlEventSetWait in another at once.
#include "simgpu/core/device_events.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace gpufrac::simgpu {
namespace {

class EventLogLock {
 public:
  explicit EventLogLock(SharedEventLog& log) : log_(log) {
    // A holder that died left every entry either written or not yet published (next_sequence
    // is bumped last), so the log is consistent again as it is.
    if (::pthread_mutex_lock(&log_.mutex) == EOWNERDEAD) ::pthread_mutex_consistent(&log_.mutex);
  }
  ~EventLogLock() { ::pthread_mutex_unlock(&log_.mutex); }
  EventLogLock(const EventLogLock&) = delete;
  EventLogLock& operator=(const EventLogLock&) = delete;

 private:
  SharedEventLog& log_;
};

std::uint32_t* FutexWord(SharedMachine& machine) {
  return reinterpret_cast<std::uint32_t*>(&machine.events.signal);
}

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
void Signal(SharedMachine& machine) {
  machine.events.signal.fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, FutexWord(machine), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

void InitialiseEventLog(SharedMachine& machine) {
  pthread_mutexattr_t attributes;
  ::pthread_mutexattr_init(&attributes);
  ::pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  ::pthread_mutex_init(&machine.events.mutex, &attributes);
  ::pthread_mutexattr_destroy(&attributes);
}

void PostDeviceEvent(SharedMachine& machine, int device, std::uint64_t type, std::uint64_t data,
                     std::uint32_t gpu_instance_id, std::uint32_t compute_instance_id) {
  {
    EventLogLock lock(machine.events);
    const std::uint64_t sequence = machine.events.next_sequence;
    SharedEvent& entry = machine.events.entries[sequence % kEventLogSize];
    entry.sequence = sequence;
    entry.type = type;
    entry.data = data;
    entry.device = static_cast<std::uint32_t>(device);
    entry.gpu_instance_id = gpu_instance_id;
    entry.compute_instance_id = compute_instance_id;
    machine.events.next_sequence = sequence + 1;
  }
  Signal(machine);
}

void SetDeviceLost(SharedMachine& machine, int device, bool lost) {
  machine.devices[device].lost.store(lost ? 1 : 0, std::memory_order_release);
  Signal(machine);
}

bool DeviceLost(const SharedMachine& machine, int device) {
  return machine.devices[device].lost.load(std::memory_order_acquire) != 0;
}

std::uint64_t EventLogHead(SharedMachine& machine) {
  EventLogLock lock(machine.events);
  return machine.events.next_sequence;
}

bool NextDeviceEvent(SharedMachine& machine, std::uint64_t* cursor,
                     const std::function<bool(const SharedEvent&)>& accept, SharedEvent* event) {
  EventLogLock lock(machine.events);
  const std::uint64_t head = machine.events.next_sequence;
  if (head - *cursor > static_cast<std::uint64_t>(kEventLogSize)) *cursor = head - kEventLogSize;
  while (*cursor < head) {
    const SharedEvent& entry = machine.events.entries[*cursor % kEventLogSize];
    ++*cursor;
    if (accept(entry)) {
      *event = entry;
      return true;
    }
  }
  return false;
}

std::uint32_t EventSignal(const SharedMachine& machine) {
  return machine.events.signal.load(std::memory_order_acquire);
}

void WaitForEventSignal(SharedMachine& machine, std::uint32_t seen,
                        std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return;
  const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec timeout{};
  timeout.tv_sec = static_cast<time_t>(nanoseconds / 1000000000);
  timeout.tv_nsec = static_cast<long>(nanoseconds % 1000000000);
  // Returns at once (EAGAIN) when the word already moved on; EINTR and ETIMEDOUT are fine too.
  ::syscall(SYS_futex, FutexWord(machine), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

}  // namespace gpufrac::simgpu
