// Identifies a process across PID reuse: its PID plus its start time (clock ticks after boot, field
// 22 of /proc/PID/stat). Used to tell whether the owner of a budget lane is still alive.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace gpufrac::limiter {

struct ProcessId {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
};

// Reads the identity of process `pid`; false if it does not exist (or /proc is unreadable).
bool ReadProcessId(pid_t pid, ProcessId* out);

// True if the process that `id` names still runs: same PID and same start time.
bool IsAlive(const ProcessId& id);

}  // namespace gpufrac::limiter
