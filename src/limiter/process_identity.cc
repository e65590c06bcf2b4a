// Heap-free /proc reader for process identities (see process_identity.h).
#include "limiter/process_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "limiter/file_stat.h"

namespace gpufrac::limiter {
namespace {

enum class Stat { kRunning, kEnded, kNoEntry, kUnreadable };

// Reads field `n` (1-based, counting after the command name as /proc/PID/stat does) as a number.
bool Field(const char* after_name, int n, uint64_t* out) {
  const char* p = after_name;
  for (int field = 3; field < n; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return false;
  }
  while (*p == ' ') ++p;
  if (*p < '0' || *p > '9') return false;
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
  *out = v;
  return true;
}

Stat ReadStat(pid_t pid, ProcessId* out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? Stat::kNoEntry : Stat::kUnreadable;
  char buf[1024];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n < 0) return errno == ESRCH ? Stat::kNoEntry : Stat::kUnreadable;
  if (n == 0) return Stat::kNoEntry;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses; fields resume after the last
  // ')': 3 state, 20 threads, 22 start time.
  const char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return Stat::kUnreadable;
  const char state = p[2];
  uint64_t threads = 0, ticks = 0;
  if (!Field(p + 1, 20, &threads) || !Field(p + 1, 22, &ticks)) return Stat::kUnreadable;
  // A zombie leader with other threads still running is a process whose main thread merely
  // exited: alive.
  if ((state == 'Z' || state == 'X') && threads <= 1) return Stat::kEnded;
  out->pid = pid;
  out->start_ticks = ticks;
  return Stat::kRunning;
}

}  // namespace

bool ReadProcessId(pid_t pid, ProcessId* out) { return ReadStat(pid, out) == Stat::kRunning; }

bool IsAlive(const ProcessId& id) {
  ProcessId now;
  switch (ReadStat(id.pid, &now)) {
    case Stat::kRunning:
      return now.start_ticks == id.start_ticks;
    case Stat::kEnded:
      return false;
    case Stat::kNoEntry:
      // Hidden from /proc (hidepid) is not gone: only the kernel's "no such process" is.
      return !(kill(id.pid, 0) != 0 && errno == ESRCH);
    case Stat::kUnreadable:
      return true;
  }
  return true;
}

uint64_t PidNamespace() {
  struct stat st;
  return StatPath("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace gpufrac::limiter
