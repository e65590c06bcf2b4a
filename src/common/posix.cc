// The owning descriptor and errno → Status (posix.h).
#include "common/posix.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpufrac {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

Status ErrnoStatus(const std::string& what, int err) {
  std::string message = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ESRCH:
      return NotFoundError(std::move(message));
    case EACCES:
    case EPERM:
    case EROFS:
      return PermissionDeniedError(std::move(message));
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ResourceExhaustedError(std::move(message));
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return AbortedError(std::move(message));
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case ELOOP:
    case EEXIST:
    case EISDIR:
      return InvalidArgumentError(std::move(message));
    default:
      return UnavailableError(std::move(message));
  }
}

}  // namespace gpufrac
