// The owning descriptor, errno → Status, and the one "is this directory ours" check (posix.h).
#include "common/posix.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

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
      return PermissionDeniedError(std::move(message));
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ResourceExhaustedError(std::move(message));
    case EINVAL:
    case ENAMETOOLONG:
      return InvalidArgumentError(std::move(message));
    case EEXIST:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case ENOTEMPTY:
    case EROFS:
      return FailedPreconditionError(std::move(message));
    default:  // EAGAIN, EINTR, EBUSY, EIO, ...: worth trying the same call again.
      return UnavailableError(std::move(message));
  }
}

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// The one wording of a refusal.
Status NotOurs(const std::string& shown, const std::string& why, DirOwner owner) {
  const uid_t self = geteuid();
  std::string owners = self == 0 ? "root" : "uid " + std::to_string(self);
  if (owner == DirOwner::kCallerOrRoot && self != 0) owners = "root or " + owners;
  return FailedPreconditionError(shown + " " + why + "; gpufrac trusts only a directory that " +
                                 owners +
                                 " owns and no one else can write in (not even a sticky one such "
                                 "as /tmp: anyone may make names there)");
}

// Why `at`'s entry `name`, which would not open as a directory without following a link, is
// refused. Looked at again only to say which: it is refused either way.
std::string WhyNotOpened(int at, const std::string& name) {
  struct stat st {};
  const bool link = fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
  return link ? "is a symbolic link (give the path it points to)" : "is not a directory";
}

}  // namespace

Status CheckDirectoryIsOurs(int dir_fd, const std::string& shown, DirOwner owner) {
  struct stat st {};
  if (fstat(dir_fd, &st) != 0) return ErrnoStatus("cannot examine " + shown, errno);
  if (!S_ISDIR(st.st_mode)) return NotOurs(shown, "is not a directory", owner);
  const bool owned = st.st_uid == geteuid() || (owner == DirOwner::kCallerOrRoot && st.st_uid == 0);
  if (!owned) return NotOurs(shown, "belongs to uid " + std::to_string(st.st_uid), owner);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return NotOurs(shown, std::string("is writable by its group or others (mode ") + mode + ")",
                   owner);
  }
  return OkStatus();
}

StatusOr<UniqueFd> OpenOurDirectoryAt(int at, const std::string& name, const std::string& shown) {
  UniqueFd fd(openat(at, name.c_str(), kDirFlags));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR)
      return NotOurs(shown, WhyNotOpened(at, name), DirOwner::kCaller);
    return ErrnoStatus("cannot open " + shown, err);
  }
  GPUFRAC_RETURN_IF_ERROR(CheckDirectoryIsOurs(fd.get(), shown));
  return fd;
}

StatusOr<UniqueFd> OpenOurDirectoryPath(const std::string& path, mode_t mode, mode_t parent_mode) {
  if (path.empty() || path[0] != '/') {
    return FailedPreconditionError("the directory must be an absolute path, not \"" + path + "\"");
  }
  std::vector<std::string> names;
  for (size_t at = 1; at <= path.size();) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    std::string name = path.substr(at, slash - at);
    if (name == "." || name == "..") {
      return FailedPreconditionError("the directory " + path + " must not hold \".\" or \"..\"");
    }
    if (!name.empty()) names.push_back(std::move(name));
    at = slash + 1;
  }
  UniqueFd fd(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("cannot open /", errno);
  std::string shown = "/";
  GPUFRAC_RETURN_IF_ERROR(CheckDirectoryIsOurs(
      fd.get(), shown, names.empty() ? DirOwner::kCaller : DirOwner::kCallerOrRoot));
  for (size_t i = 0; i < names.size(); ++i) {
    const bool last = i + 1 == names.size();
    const DirOwner owner = last ? DirOwner::kCaller : DirOwner::kCallerOrRoot;
    shown = shown == "/" ? "/" + names[i] : shown + "/" + names[i];
    UniqueFd next(openat(fd.get(), names[i].c_str(), kDirFlags));
    if (!next.valid() && errno == ENOENT) {
      const mode_t made = last ? mode : parent_mode;
      const bool created = mkdirat(fd.get(), names[i].c_str(), made) == 0;
      if (!created && errno != EEXIST) return ErrnoStatus("cannot create " + shown, errno);
      next.Reset(openat(fd.get(), names[i].c_str(), kDirFlags));
      // The mode asked for whatever the umask, on what this call made (one another process made
      // first is checked like any other).
      if (next.valid() && created) fchmod(next.get(), made);
    }
    if (!next.valid()) {
      const int err = errno;
      if (err == ELOOP || err == ENOTDIR)
        return NotOurs(shown, WhyNotOpened(fd.get(), names[i]), owner);
      return ErrnoStatus("cannot open " + shown, err);
    }
    GPUFRAC_RETURN_IF_ERROR(CheckDirectoryIsOurs(next.get(), shown, owner));
    fd = std::move(next);
  }
  return fd;
}

}  // namespace gpufrac
