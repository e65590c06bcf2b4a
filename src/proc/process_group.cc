// Scans /proc for the members of a process group (see process_group.h).
#include "proc/process_group.h"

#include <dirent.h>

#include <cstdlib>

#include "proc/process_identity.h"

namespace gpufrac::proc {

std::vector<pid_t> LiveGroupMembers(pid_t group, uint64_t started_at_or_after) {
  std::vector<pid_t> members;
  if (group <= 0) return members;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return members;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || end == entry->d_name || *end != '\0') continue;
    ProcessStat stat;
    if (ReadProcessStat(static_cast<pid_t>(pid), &stat) != StatRead::kRead || stat.Ended() ||
        stat.group != group || stat.start_ticks < started_at_or_after) {
      continue;
    }
    members.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
  return members;
}

}  // namespace gpufrac::proc
