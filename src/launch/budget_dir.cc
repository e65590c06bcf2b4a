#include "launch/budget_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "launch/limit_file.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

constexpr const char* kTemplate = "/dev/shm/gpufrac-XXXXXX";
constexpr size_t kMaxRecordBytes = 4096;

std::string ErrnoText() { return std::strerror(errno); }

// Why the directory open as `fd` is not one the caller alone controls, or "".
std::string WhyNotOurs(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "cannot stat it: " + ErrnoText();
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != geteuid()) return "it belongs to uid " + std::to_string(st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "others can write in it";
  return "";
}

// The path recorded in `record`, or "" when there is none that could be a budget directory.
std::string ReadRecord(const std::string& record) {
  int fd = open(record.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  std::string text;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      static_cast<size_t>(st.st_size) < kMaxRecordBytes) {
    text.resize(static_cast<size_t>(st.st_size));
    if (pread(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) text.clear();
  }
  close(fd);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.rfind("/dev/shm/gpufrac-", 0) != 0 || text.find('\n') != std::string::npos) return "";
  return text;
}

}  // namespace

StatusOr<BudgetDir> BudgetDir::Make(mode_t mode) {
  std::string path = kTemplate;
  if (!mkdtemp(path.data())) {
    return UnavailableError("cannot create a budget directory under /dev/shm: " + ErrnoText());
  }
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fchmod(fd, mode) != 0) {
    std::string why = ErrnoText();
    if (fd >= 0) close(fd);
    rmdir(path.c_str());
    return UnavailableError("cannot set up the budget directory " + path + ": " + why);
  }
  return BudgetDir(std::move(path), fd);
}

StatusOr<BudgetDir> BudgetDir::Open(const std::string& path) {
  if (path.size() > limiter::kMaxBudgetDirLen) {
    return InvalidArgumentError("budget directory " + path + " is too long");
  }
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return FailedPreconditionError("cannot open budget directory " + path + ": " + ErrnoText());
  if (std::string why = WhyNotOurs(fd); !why.empty()) {
    close(fd);
    return FailedPreconditionError("budget directory " + path + " is not this launcher's: " + why);
  }
  return BudgetDir(path, fd);
}

StatusOr<BudgetDir> BudgetDir::ForService(const std::string& record, mode_t mode) {
  if (std::string path = ReadRecord(record); !path.empty()) {
    if (StatusOr<BudgetDir> dir = Open(path); dir.ok()) return dir;
  }
  GPUFRAC_ASSIGN_OR_RETURN(BudgetDir dir, Make(mode));
  // Replaced whole: a crash leaves the old record or the new one, never half of one.
  std::string next = record + ".new";
  unlink(next.c_str());
  Status written = WriteNewFile(next, dir.path() + "\n", 0600);
  if (written.ok() && rename(next.c_str(), record.c_str()) != 0) {
    written =
        UnavailableError("cannot record the budget directory in " + record + ": " + ErrnoText());
    unlink(next.c_str());
  }
  if (!written.ok()) {
    dir.RemoveAll();
    return written;
  }
  return dir;
}

BudgetDir::BudgetDir(BudgetDir&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

BudgetDir& BudgetDir::operator=(BudgetDir&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

BudgetDir::~BudgetDir() {
  if (fd_ >= 0) close(fd_);
}

void BudgetDir::RemoveAll() {
  if (fd_ < 0) return;
  int list_fd = dup(fd_);
  DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
  if (d != nullptr) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        unlinkat(fd_, e->d_name, 0);
      }
    }
    closedir(d);
  } else if (list_fd >= 0) {
    close(list_fd);
  }
  close(fd_);
  fd_ = -1;
  rmdir(path_.c_str());
}

}  // namespace gpufrac::launch
