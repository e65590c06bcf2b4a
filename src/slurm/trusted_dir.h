// Opening a directory that root keeps its state in, through a path no other user can change. Every
// component from / down is opened with openat from the one above it (no link followed) and
// checked on its descriptor: it must belong to root (or to the caller) and be writable by no one
// else. Not even a sticky directory such as /tmp: a user could make a missing component there
// before root does, and every step would then be refused.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace gpufrac::slurm {

// Opens `path` (absolute) as a directory (O_DIRECTORY, close-on-exec) and returns its descriptor,
// which the caller closes. Missing components are made on the way: the last with `mode`, those
// above it with `parent_mode`, whatever the umask. kFailedPrecondition, one line naming the
// component and what to change, when a component is a link, not a directory, another user's, or
// writable by others; the path itself must also not be sticky-and-shared.
StatusOr<int> OpenTrustedDir(const std::string& path, mode_t mode, mode_t parent_mode);

}  // namespace gpufrac::slurm
