// A Slurm job's processes in its cgroups, and their end (job_processes.h).
#include "slurm/job_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpufrac::slurm {
namespace {

// How deep under a mount Slurm's root cgroup is looked for (v1: MOUNT/slurm; v2 under systemd:
// MOUNT/system.slice/slurmstepd.scope), and how deep a job's cgroups go (step_N/task_N/...).
constexpr int kRootDepth = 3;
constexpr int kJobDepth = 6;

// "\040" and the like, as mountinfo escapes a mount point.
std::string Unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size()) {
      int value = 0;
      auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 4, value, 8);
      if (ec == std::errc() && end == text.data() + i + 4) {
        out += static_cast<char>(value);
        i += 3;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

// A directory (root's, with `roots`), opened without following a link; -1 otherwise.
int OpenDir(const std::string& path, bool roots) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || (roots && st.st_uid != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

bool IsDir(const std::string& path, bool roots) {
  int fd = OpenDir(path, roots);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// The subdirectories in `path` (root's, with `roots`). Below a job's cgroup they may be its
// user's: Slurm hands the step and task cgroups to the job's user under cgroup v1.
std::vector<std::string> SubDirs(const std::string& path, bool roots = true) {
  std::vector<std::string> out;
  int fd = OpenDir(path, roots);
  if (fd < 0) return out;
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    close(fd);
    return out;
  }
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (entry->d_type != DT_DIR || name == "." || name == "..") continue;
    if (IsDir(path + "/" + name, roots)) out.push_back(name);
  }
  closedir(dir);
  return out;
}

// Node `node`'s root cgroups of Slurm's under `dir` (at most `depth` below it), each reached
// through root's directories: v1's slurm or slurm_<node>, v2's slurmstepd.scope or
// slurmstepd_<node>.scope.
void FindSlurmRoots(const std::string& dir, int depth, const std::string& node,
                    std::vector<std::string>* out) {
  for (const std::string& name : SubDirs(dir)) {
    if (name == "slurm" || name == "slurm_" + node || name == "slurmstepd.scope" ||
        name == "slurmstepd_" + node + ".scope") {
      out->push_back(dir + "/" + name);
    } else if (depth > 1 && name.rfind("slurm", 0) != 0) {
      FindSlurmRoots(dir + "/" + name, depth - 1, node, out);
    }
  }
}

// The PIDs in `dir`'s cgroup.procs.
std::vector<pid_t> ReadProcs(const std::string& dir) {
  std::vector<pid_t> out;
  std::ifstream procs(dir + "/cgroup.procs");
  for (long pid = 0; procs >> pid;) {
    if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

// `dir` and the cgroups below it.
void WithDescendants(const std::string& dir, int depth, std::vector<std::string>* out) {
  out->push_back(dir);
  if (depth == 0) return;
  for (const std::string& name : SubDirs(dir, /*roots=*/false)) {
    WithDescendants(dir + "/" + name, depth - 1, out);
  }
}

std::vector<std::string> AllCgroups(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const std::string& dir : dirs) WithDescendants(dir, kJobDepth, &out);
  return out;
}

// SIGKILL to `pid`, found in `cgroup`: through a pidfd taken while it is still listed there, so
// that a PID reused by another process in the meantime is not signalled.
void Kill(pid_t pid, const std::string& cgroup) {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    if (errno == ENOSYS) kill(pid, SIGKILL);
    return;  // Gone already (ESRCH).
  }
  std::vector<pid_t> listed = ReadProcs(cgroup);
  if (std::find(listed.begin(), listed.end(), pid) != listed.end()) {
    syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  }
  close(pidfd);
}

// A frozen task gets SIGKILL only when thawed (v1's freezer.state, v2's cgroup.freeze; both
// apply to the cgroups below).
void Thaw(const std::string& dir) {
  if (std::ofstream v1(dir + "/freezer.state"); v1) v1 << "THAWED" << std::flush;
  if (std::ofstream v2(dir + "/cgroup.freeze"); v2) v2 << "0" << std::flush;
}

}  // namespace

std::string ThisSlurmNode() {
  if (const char* named = std::getenv("SLURMD_NODENAME"); named != nullptr && *named != '\0') {
    return named;
  }
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    // ID:CONTROLLERS:PATH; a component slurm_<node> or slurmstepd_<node>.scope names the node.
    const size_t controllers = line.find(':');
    const size_t path_at = line.find(':', controllers == std::string::npos ? 0 : controllers + 1);
    if (path_at == std::string::npos) continue;
    std::istringstream path(line.substr(path_at + 1));
    for (std::string part; std::getline(path, part, '/');) {
      if (part.rfind("slurm_", 0) == 0) return part.substr(6);
      const std::string scope = ".scope";
      if (part.rfind("slurmstepd_", 0) == 0 && part.size() > 11 + scope.size() &&
          part.compare(part.size() - scope.size(), scope.size(), scope) == 0) {
        return part.substr(11, part.size() - 11 - scope.size());
      }
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  std::string name = host;
  return name.substr(0, name.find('.'));
}

std::vector<std::string> CgroupMounts() {
  std::vector<std::string> out;
  std::ifstream mountinfo("/proc/self/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount, word;
    fields >> id >> parent >> dev >> root >> mount;
    while (fields >> word && word != "-") {
    }
    std::string type;
    fields >> type;
    if (type == "cgroup" || type == "cgroup2") out.push_back(Unescape(mount));
  }
  return out;
}

std::string StepCgroupName(uint32_t step) {
  switch (step) {
    case kBatchStep:
      return "step_batch";
    case kExternStep:
      return "step_extern";
    case kInteractiveStep:
      return "step_interactive";
    default:
      return "step_" + std::to_string(step);
  }
}

std::vector<std::string> JobCgroups(uint32_t job, std::optional<uint32_t> step,
                                    const std::string& node,
                                    const std::vector<std::string>& mounts) {
  const std::string name = "job_" + std::to_string(job);
  std::vector<std::string> out;
  for (const std::string& mount : mounts) {
    if (!IsDir(mount, /*roots=*/true)) continue;
    std::vector<std::string> roots;
    FindSlurmRoots(mount, kRootDepth, node, &roots);
    for (const std::string& root : roots) {
      // v2: ROOT/job_<id>; v1: ROOT/uid_<uid>/job_<id>.
      std::vector<std::string> parents = {root};
      for (const std::string& sub : SubDirs(root)) {
        if (sub.rfind("uid_", 0) == 0) parents.push_back(root + "/" + sub);
      }
      for (const std::string& parent : parents) {
        // The job's directory is root's; its step's may be the job's user's.
        const std::string dir = parent + "/" + name;
        if (!IsDir(dir, /*roots=*/true)) continue;
        if (!step) {
          out.push_back(dir);
        } else if (IsDir(dir + "/" + StepCgroupName(*step), /*roots=*/false)) {
          out.push_back(dir + "/" + StepCgroupName(*step));
        }
      }
    }
  }
  return out;
}

std::vector<pid_t> ProcessesIn(const std::vector<std::string>& dirs, pid_t except) {
  std::vector<pid_t> out;
  for (const std::string& cgroup : AllCgroups(dirs)) {
    for (pid_t pid : ReadProcs(cgroup)) {
      if (pid != except && std::find(out.begin(), out.end(), pid) == out.end()) {
        out.push_back(pid);
      }
    }
  }
  return out;
}

Status EndProcessesIn(const std::vector<std::string>& dirs, pid_t except,
                      std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    bool any = false;
    for (const std::string& cgroup : AllCgroups(dirs)) {
      for (pid_t pid : ReadProcs(cgroup)) {
        if (pid == except) continue;
        any = true;
        Kill(pid, cgroup);
      }
    }
    if (!any) return OkStatus();
    for (const std::string& dir : dirs) Thaw(dir);
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string left;
  for (pid_t pid : ProcessesIn(dirs, except)) {
    left += (left.empty() ? "" : " ") + std::to_string(pid);
  }
  if (left.empty()) return OkStatus();
  return UnavailableError("processes " + left + " of " + dirs.front() + " outlived SIGKILL for " +
                          std::to_string(wait.count()) + " ms");
}

}  // namespace gpufrac::slurm
