// Identifies a process across time: a pid alone is reused, so the simulated driver pairs it with
// the process start time (field 22 of /proc/PID/stat) before trusting that an owner is alive.
#pragma once

#include <cstdint>
#include <optional>

namespace gpufrac::simgpu {

struct ProcessIdentity {
  int pid = 0;
  std::uint64_t start_time = 0;  // clock ticks after boot

  bool operator==(const ProcessIdentity&) const = default;
};

// The start time of a running process; nullopt if there is no such process or it has already
// exited (a zombie waiting to be reaped has released its GPU memory on a real driver too).
std::optional<std::uint64_t> ReadProcessStartTime(int pid);

// The calling process.
ProcessIdentity CurrentProcessIdentity();

// Whether `identity` still names a live process (same pid and same start time).
bool IsProcessAlive(const ProcessIdentity& identity);

}  // namespace gpufrac::simgpu
