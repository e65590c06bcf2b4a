// Heap-free /proc reader for process identities (see process_identity.h).
#include "limiter/process_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace gpufrac::limiter {
namespace {

enum class Stat { kRunning, kZombie, kNoEntry, kUnreadable };

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
  // ')': field 3 is the state, field 22 the start time.
  const char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2]) return Stat::kUnreadable;
  if (p[2] == 'Z' || p[2] == 'X') return Stat::kZombie;
  ++p;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return Stat::kUnreadable;
  }
  while (*p == ' ') ++p;
  if (*p < '0' || *p > '9') return Stat::kUnreadable;
  uint64_t ticks = 0;
  for (; *p >= '0' && *p <= '9'; ++p) ticks = ticks * 10 + static_cast<uint64_t>(*p - '0');
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
    case Stat::kZombie:
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
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace gpufrac::limiter
