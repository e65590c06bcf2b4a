// The live members of a process group, found by scanning /proc: how a supervisor tells whether
// anything of a job is left, and kills it all. (Not used inside the limiter.)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace gpufrac::proc {

// The processes of group `group` that have not ended and started no earlier than
// `started_at_or_after` (clock ticks after boot; 0 for all). A member that started before the
// group's leader belongs to an older group that had the same number. Processes that /proc does
// not show are not found.
std::vector<pid_t> LiveGroupMembers(pid_t group, uint64_t started_at_or_after = 0);

}  // namespace gpufrac::proc
