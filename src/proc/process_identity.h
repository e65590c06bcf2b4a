// The one reader of /proc/PID/stat: a process's identity across PID reuse (its PID plus its start
// time, field 22) and the few other fields launchers need. Heap-free and exception-free, because
// the limiter (inside other people's processes) and the simulated driver use it as well as the
// launchers and the node service.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace gpufrac::proc {

struct ProcessId {
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // Clock ticks after boot.
  friend bool operator==(const ProcessId&, const ProcessId&) = default;
};

// What /proc/PID/stat says of a process.
struct ProcessStat {
  char state = '?';          // Field 3: R, S, D, Z, ...
  pid_t group = 0;           // Field 5: the process group.
  uint64_t threads = 0;      // Field 20.
  uint64_t start_ticks = 0;  // Field 22.
  // The process has ended: a zombie or dead, and not a leader whose other threads still run.
  bool Ended() const { return (state == 'Z' || state == 'X' || state == 'x') && threads <= 1; }
};

enum class StatRead { kRead, kNoEntry, kUnreadable };

// Reads /proc/PID/stat. kNoEntry: no such process visible in /proc; kUnreadable: the file could
// not be opened or parsed for another reason (out of descriptors, a restricted /proc).
StatRead ReadProcessStat(pid_t pid, ProcessStat* out);

// The identity of process `pid`; false if it does not exist, has ended, or cannot be read.
bool ReadProcessId(pid_t pid, ProcessId* out);

// The calling process (start time 0 if /proc cannot be read).
ProcessId CurrentProcess();

// Strict: `id` names a process that /proc shows running now with the same start time.
bool IsRunning(const ProcessId& id);

// Conservative: true unless the process that `id` names has certainly ended (gone from /proc and
// unknown to kill(2), ended, or its PID now belongs to a process with another start time). When
// it cannot tell it answers true: the limiter reclaims a process's memory only when it is false.
bool MayBeAlive(const ProcessId& id);

}  // namespace gpufrac::proc
