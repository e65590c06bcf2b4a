// The extern step of a job on a node whose GPUs are shared, without NVIDIA devices
// (extern_step.h).
#include "slurm/extern_step.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>

#include "common/posix.h"
#include "launch/cgroup.h"
#include "slurm/job_processes.h"

namespace gpufrac::slurm {
namespace {

// Writes each of `majors` as a denial ("c M:* rwm") to the devices.deny of cgroup `dir`; false
// when `dir` has none (not a devices hierarchy).
StatusOr<bool> Deny(const std::string& dir, const std::vector<unsigned>& majors) {
  UniqueFd dirfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (const int err = errno; !dirfd.valid()) return ErrnoStatus("cannot open " + dir, err);
  UniqueFd fd(openat(dirfd.get(), "devices.deny", O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (const int err = errno; !fd.valid()) {
    if (err == ENOENT) return false;
    return ErrnoStatus("cannot open " + dir + "/devices.deny", err);
  }
  for (unsigned major : majors) {
    // The devices controller takes one rule per write.
    const std::string rule = "c " + std::to_string(major) + ":* rwm";
    const ssize_t written = write(fd.get(), rule.data(), rule.size());
    if (const int err = written < 0 ? errno : EIO; written != static_cast<ssize_t>(rule.size())) {
      return ErrnoStatus("cannot deny " + rule + " in " + dir, err);
    }
  }
  return true;
}

// Whether process `pid` has a character device of `majors` open (false once it is gone).
bool HoldsAny(pid_t pid, const std::vector<unsigned>& majors) {
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = opendir(fds.c_str());
  if (dir == nullptr) return false;
  bool holds = false;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    struct stat st {};
    // The link leads to the open file itself, wherever its name was.
    if (fstatat(dirfd(dir), entry->d_name, &st, 0) != 0 || !S_ISCHR(st.st_mode)) continue;
    if (std::find(majors.begin(), majors.end(), major(st.st_rdev)) != majors.end()) {
      holds = true;
      break;
    }
  }
  closedir(dir);
  return holds;
}

}  // namespace

std::vector<unsigned> NvidiaDeviceMajors(const std::string& proc_devices) {
  std::vector<unsigned> out = {launch::kNvidiaMajor};
  // "Character devices:" then "MAJOR NAME" lines, then "Block devices:".
  std::ifstream devices(proc_devices);
  bool character = false;
  for (std::string line; std::getline(devices, line);) {
    if (line == "Character devices:") {
      character = true;
      continue;
    }
    if (line == "Block devices:") break;
    std::istringstream fields(line);
    unsigned major = 0;
    std::string name;
    if (character && fields >> major >> name && name.rfind("nvidia", 0) == 0 &&
        std::find(out.begin(), out.end(), major) == out.end()) {
      out.push_back(major);
    }
  }
  return out;
}

StatusOr<ExternFence> FenceExternStep(uint32_t job, const std::string& node,
                                      const std::vector<std::string>& mounts,
                                      const std::vector<unsigned>& majors,
                                      std::chrono::milliseconds wait) {
  ExternFence fence;
  const std::vector<std::string> dirs = JobCgroups(job, kExternStep, node, mounts);
  // Denied first, so that no process of the step opens one after the search for holders.
  for (const std::string& dir : dirs) {
    GPUFRAC_ASSIGN_OR_RETURN(bool denied, Deny(dir, majors));
    fence.hierarchies += denied ? 1 : 0;
  }
  if (dirs.empty()) return fence;
  std::set<pid_t> holders;
  Status ended = EndProcessesIn(dirs, getpid(), wait, [&](pid_t pid) {
    if (!HoldsAny(pid, majors)) return false;
    holders.insert(pid);
    return true;
  });
  GPUFRAC_RETURN_IF_ERROR(ended);
  fence.ended = static_cast<int>(holders.size());
  return fence;
}

}  // namespace gpufrac::slurm
