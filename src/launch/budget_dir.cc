#include "launch/budget_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/posix.h"
#include "launch/limit_file.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

constexpr const char* kTemplate = "/dev/shm/gpufrac-XXXXXX";
constexpr size_t kMaxRecordBytes = 4096;

// The path recorded in `record`, or "" when there is none that could be a budget directory.
std::string ReadRecord(const std::string& record) {
  UniqueFd fd(open(record.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return "";
  struct stat st;
  std::string text;
  if (fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      static_cast<size_t>(st.st_size) < kMaxRecordBytes) {
    text.resize(static_cast<size_t>(st.st_size));
    if (pread(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      text.clear();
    }
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.rfind("/dev/shm/gpufrac-", 0) != 0 || text.find('\n') != std::string::npos) return "";
  return text;
}

}  // namespace

StatusOr<BudgetDir> BudgetDir::Make(mode_t mode) {
  std::string path = kTemplate;
  if (!mkdtemp(path.data())) {
    return ErrnoStatus("cannot create a budget directory under /dev/shm", errno);
  }
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid() || fchmod(fd.get(), mode) != 0) {
    Status failed = ErrnoStatus("cannot set up the budget directory " + path, errno);
    rmdir(path.c_str());
    return failed;
  }
  return BudgetDir(std::move(path), std::move(fd));
}

StatusOr<BudgetDir> BudgetDir::Open(const std::string& path) {
  if (path.size() > limiter::kMaxBudgetDirLen) {
    return InvalidArgumentError("budget directory " + path + " is too long");
  }
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd fd,
                           OpenOurDirectoryAt(AT_FDCWD, path, "budget directory " + path));
  return BudgetDir(path, std::move(fd));
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
    written = ErrnoStatus("cannot record the budget directory in " + record, errno);
    unlink(next.c_str());
  }
  if (!written.ok()) {
    dir.RemoveAll();
    return written;
  }
  return dir;
}

void BudgetDir::RemoveAll() {
  if (!fd_.valid()) return;
  UniqueFd list_fd(dup(fd_.get()));
  DIR* d = list_fd.valid() ? fdopendir(list_fd.get()) : nullptr;
  if (d != nullptr) {
    list_fd.Release();  // The stream owns it now.
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        unlinkat(fd_.get(), e->d_name, 0);
      }
    }
    closedir(d);
  }
  fd_.Reset();
  rmdir(path_.c_str());
}

}  // namespace gpufrac::launch
