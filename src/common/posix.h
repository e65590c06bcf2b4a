// The small POSIX layer every module but the limiter uses: an owning file descriptor, and one
// rule for turning an errno into a Status, so that no caller spells close() or strerror itself.
#pragma once

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
// caller can do about it: kNotFound (ENOENT, ESRCH), kPermissionDenied (EACCES, EPERM, EROFS),
// kResourceExhausted (ENOSPC, EDQUOT, ENOMEM, EMFILE, ENFILE: retry after something is freed),
// kAborted (EAGAIN, EINTR, EBUSY: retry the call), kInvalidArgument (EINVAL, ENAMETOOLONG,
// ENOTDIR, ELOOP, EEXIST, EISDIR: fix what was asked), else kUnavailable.
Status ErrnoStatus(const std::string& what, int err);

}  // namespace gpufrac
