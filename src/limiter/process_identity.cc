// Heap-free /proc reader for process identities (see process_identity.h).
#include "limiter/process_identity.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace gpufrac::limiter {

bool ReadProcessId(pid_t pid, ProcessId* out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses; fields resume after the last
  // ')'.
  const char* p = strrchr(buf, ')');
  if (!p) return false;
  ++p;
  // After ')' come field 3 (state) onwards; the start time is field 22.
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return false;
  }
  while (*p == ' ') ++p;
  uint64_t ticks = 0;
  if (*p < '0' || *p > '9') return false;
  for (; *p >= '0' && *p <= '9'; ++p) ticks = ticks * 10 + static_cast<uint64_t>(*p - '0');
  // A zombie has exited: its memory is gone, so it counts as dead.
  const char* state = strrchr(buf, ')') + 2;
  if (*state == 'Z' || *state == 'X') return false;
  out->pid = pid;
  out->start_ticks = ticks;
  return true;
}

bool IsAlive(const ProcessId& id) {
  ProcessId now;
  return ReadProcessId(id.pid, &now) && now.start_ticks == id.start_ticks;
}

}  // namespace gpufrac::limiter
