// Reads process start times from /proc with plain syscalls (no streams, no allocation).
#include "simgpu/process_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace gpufrac::simgpu {

std::optional<std::uint64_t> ReadProcessStartTime(int pid) {
  if (pid <= 0) return std::nullopt;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[1024];
  const ssize_t length = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  if (length <= 0) return std::nullopt;
  buffer[length] = '\0';
  // The command name (field 2) is in parentheses and may itself contain spaces or ')'.
  const char* cursor = std::strrchr(buffer, ')');
  if (cursor == nullptr) return std::nullopt;
  ++cursor;
  // Fields after the name: 3 = state, ..., 22 = starttime.
  for (int field = 3; field <= 22; ++field) {
    while (*cursor == ' ') ++cursor;
    if (*cursor == '\0') return std::nullopt;
    if (field == 3 && (*cursor == 'Z' || *cursor == 'X')) return std::nullopt;
    if (field == 22) {
      std::uint64_t value = 0;
      while (*cursor >= '0' && *cursor <= '9') value = value * 10 + (*cursor++ - '0');
      return value;
    }
    while (*cursor != ' ' && *cursor != '\0') ++cursor;
  }
  return std::nullopt;
}

ProcessIdentity CurrentProcessIdentity() {
  ProcessIdentity identity;
  identity.pid = static_cast<int>(::getpid());
  identity.start_time = ReadProcessStartTime(identity.pid).value_or(0);
  return identity;
}

bool IsProcessAlive(const ProcessIdentity& identity) {
  const std::optional<std::uint64_t> start = ReadProcessStartTime(identity.pid);
  return start.has_value() && *start == identity.start_time;
}

}  // namespace gpufrac::simgpu
