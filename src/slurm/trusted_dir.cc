// Walking a state directory's path component by component (trusted_dir.h).
#include "slurm/trusted_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace gpufrac::slurm {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// Why the directory `fd` (`shown`) cannot be trusted, or "" when it can.
std::string WhyUntrusted(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "cannot be examined (" + Errno(errno) + ")";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    return "belongs to uid " + std::to_string(st.st_uid) + ", not root";
  }
  // Not even sticky (as /tmp is): another user could make a missing component there first.
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return "is writable by its group or others (mode " + [&] {
      char octal[8];
      std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return std::string(octal);
    }() + ")";
  }
  return "";
}

Status Refused(const std::string& path, const std::string& component, const std::string& why) {
  return FailedPreconditionError("state directory " + path + ": " + component + " " + why +
                                 "; every directory on its path must be root's and writable by "
                                 "root only (not /tmp: anyone may make names there)");
}

}  // namespace

StatusOr<int> OpenTrustedDir(const std::string& path, mode_t mode, mode_t parent_mode) {
  if (path.empty() || path[0] != '/') {
    return FailedPreconditionError("the state directory must be an absolute path, not \"" + path +
                                   "\"");
  }
  std::vector<std::string> names;
  for (size_t at = 1; at <= path.size();) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    std::string name = path.substr(at, slash - at);
    if (name == "." || name == "..") {
      return FailedPreconditionError("the state directory " + path +
                                     " must not hold \".\" or \"..\"");
    }
    if (!name.empty()) names.push_back(std::move(name));
    at = slash + 1;
  }
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FailedPreconditionError("cannot open /: " + Errno(errno));
  std::string shown = "/";
  if (std::string why = WhyUntrusted(fd); !why.empty()) {
    close(fd);
    return Refused(path, shown, why);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const bool last = i + 1 == names.size();
    shown = shown == "/" ? "/" + names[i] : shown + "/" + names[i];
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int next = openat(fd, names[i].c_str(), flags);
    if (next < 0 && errno == ENOENT) {
      const mode_t made = last ? mode : parent_mode;
      const bool created = mkdirat(fd, names[i].c_str(), made) == 0;
      if (!created && errno != EEXIST) {
        int err = errno;
        close(fd);
        return FailedPreconditionError("cannot create " + shown + ": " + Errno(err));
      }
      next = openat(fd, names[i].c_str(), flags);
      // The mode asked for whatever the umask, on what this call made (one another process made
      // first is checked like any other).
      if (next >= 0 && created) fchmod(next, made);
    }
    int err = errno;
    close(fd);
    if (next < 0) {
      if (err == ELOOP || err == ENOTDIR) {
        struct stat st {};
        const bool link = lstat(shown.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
        return Refused(
            path, shown,
            link ? "is a symbolic link (give the path it points to)" : "is not a directory");
      }
      return FailedPreconditionError("cannot open " + shown + ": " + Errno(err));
    }
    fd = next;
    if (std::string why = WhyUntrusted(fd); !why.empty()) {
      close(fd);
      return Refused(path, shown, why);
    }
  }
  return fd;
}

}  // namespace gpufrac::slurm
