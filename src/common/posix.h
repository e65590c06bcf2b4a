// The small POSIX layer every module but the limiter uses: an owning file descriptor, one rule
// for turning an errno into a Status (so that no caller spells close() or strerror itself), and
// the one check of whether a directory is ours to act in.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>

#include "common/status.h"

namespace gpufrac {

// Owns one file descriptor (-1: none) and closes it when destroyed or reset. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes what it holds and holds `fd` instead.
  void Reset(int fd = -1);
  // Gives the descriptor up without closing it.
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// The Status for a failed call that set `err`: "WHAT: <the system's text>", its code by what a
// caller can do about it (status.h's rule): kNotFound (ENOENT, ESRCH); kPermissionDenied (EACCES,
// EPERM); kResourceExhausted (ENOSPC, EDQUOT, ENOMEM, EMFILE, ENFILE: retry once something is
// freed); kInvalidArgument (EINVAL, ENAMETOOLONG: fix what was asked); kFailedPrecondition
// (EEXIST, ENOTDIR, EISDIR, ELOOP, ENOTEMPTY, EROFS: what is on disk is in the way, change it
// first); kUnavailable (EAGAIN, EINTR, EBUSY, and any other: retry the same call later).
Status ErrnoStatus(const std::string& what, int err);

// Who may own a directory that CheckDirectoryIsOurs accepts.
enum class DirOwner {
  kCaller,        // Only the caller (its effective uid): a directory it acts in.
  kCallerOrRoot,  // Root too: a directory above the caller's own on its path (/, /run, /home).
};

// Whether the directory open as `dir_fd` is ours to act in: a directory, owned as `owner` says,
// that neither its group nor others can write. A sticky directory (/tmp, /dev/shm) is refused
// too: anyone may make names in it, so a name we have yet to make there may already be theirs.
// (A directory of ours inside a sticky one is fine: only we can rename or remove it.) OK, or
// kFailedPrecondition, one line: "<shown> <why>; gpufrac trusts only a directory that ..." where
// `shown` names the directory for the reader.
Status CheckDirectoryIsOurs(int dir_fd, const std::string& shown,
                            DirOwner owner = DirOwner::kCaller);

// Opens `name` in the directory `at` (AT_FDCWD: `name` as a path) as a directory, not through a
// link in its last component, close-on-exec, and returns it if CheckDirectoryIsOurs (kCaller)
// accepts it. A link or something other than a directory there: kFailedPrecondition in the same
// wording; any other failure to open: ErrnoStatus (kNotFound when there is nothing there).
StatusOr<UniqueFd> OpenOurDirectoryAt(int at, const std::string& name, const std::string& shown);

// Opens the absolute `path`, whose every directory from / down must be trusted: each component is
// opened with openat from the one above it (no link followed, no "." or "..") and checked on its
// descriptor, those above `path` as kCallerOrRoot, `path` itself as kCaller. Missing components
// are made on the way, the last with `mode`, those above it with `parent_mode`, whatever the
// umask. Not under /tmp: someone else could make a missing component there first. Refusals are
// kFailedPrecondition, naming the component.
StatusOr<UniqueFd> OpenOurDirectoryPath(const std::string& path, mode_t mode, mode_t parent_mode);

}  // namespace gpufrac
