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

// Reads the identity of process `pid`; false if it does not exist, has ended (a zombie), or
// cannot be read.
bool ReadProcessId(pid_t pid, ProcessId* out);

// True unless the process that `id` names has certainly ended: gone from /proc and unknown to
// kill(2), a zombie, or its PID now belongs to a process with another start time. When it cannot
// tell (out of file descriptors, /proc hidden or unreadable) it answers true: reclaiming a live
// process's memory would break the limit, keeping a dead one's only delays its release.
bool IsAlive(const ProcessId& id);

// The inode of this process's PID namespace (0 if /proc does not say). PIDs only identify
// processes within one namespace.
uint64_t PidNamespace();

}  // namespace gpufrac::limiter
