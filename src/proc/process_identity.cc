// Parses /proc/PID/stat with plain system calls (see process_identity.h).
#include "proc/process_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace gpufrac::proc {
namespace {

// Reads field `n` as a number, from the text after the command name (which holds field 3 on).
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

}  // namespace

StatRead ReadProcessStat(pid_t pid, ProcessStat* out) {
  if (pid <= 0) return StatRead::kNoEntry;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? StatRead::kNoEntry : StatRead::kUnreadable;
  char buf[1024];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  close(fd);
  if (n < 0) return err == ESRCH ? StatRead::kNoEntry : StatRead::kUnreadable;
  if (n == 0) return StatRead::kNoEntry;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses; fields resume after the last
  // ')'.
  const char* p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || !p[2] || (p[3] != ' ' && p[3] != '\0')) return StatRead::kUnreadable;
  uint64_t group = 0;
  if (!Field(p + 1, 5, &group) || !Field(p + 1, 20, &out->threads) ||
      !Field(p + 1, 22, &out->start_ticks)) {
    return StatRead::kUnreadable;
  }
  out->state = p[2];
  out->group = static_cast<pid_t>(group);
  return StatRead::kRead;
}

bool ReadProcessId(pid_t pid, ProcessId* out) {
  ProcessStat stat;
  if (ReadProcessStat(pid, &stat) != StatRead::kRead || stat.Ended()) return false;
  out->pid = pid;
  out->start_ticks = stat.start_ticks;
  return true;
}

ProcessId CurrentProcess() {
  ProcessId self{getpid(), 0};
  ReadProcessId(self.pid, &self);
  return self;
}

bool IsRunning(const ProcessId& id) {
  ProcessId now;
  return ReadProcessId(id.pid, &now) && now.start_ticks == id.start_ticks;
}

bool MayBeAlive(const ProcessId& id) {
  ProcessStat now;
  switch (ReadProcessStat(id.pid, &now)) {
    case StatRead::kRead:
      return !now.Ended() && now.start_ticks == id.start_ticks;
    case StatRead::kNoEntry:
      // Hidden from /proc (hidepid) is not gone: only the kernel's "no such process" is.
      return !(id.pid > 0 && kill(id.pid, 0) != 0 && errno == ESRCH);
    case StatRead::kUnreadable:
      return true;
  }
  return true;
}

}  // namespace gpufrac::proc
