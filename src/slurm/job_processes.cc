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
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/posix.h"

namespace gpufrac::slurm {
namespace {

// How deep under a mount Slurm's root cgroup is looked for (v1: MOUNT/slurm; v2 under systemd:
// MOUNT/system.slice/slurmstepd.scope).
constexpr int kRootDepth = 3;

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

// A directory (root's, with `roots`), opened without following a link; none otherwise.
UniqueFd OpenDir(const std::string& path, bool roots) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return fd;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || (roots && st.st_uid != 0)) return UniqueFd();
  return fd;
}

bool IsDir(const std::string& path, bool roots) { return OpenDir(path, roots).valid(); }

// The subdirectories in `path` (root's, with `roots`). Below a job's cgroup they may be its
// user's: Slurm hands the step and task cgroups to the job's user under cgroup v1.
std::vector<std::string> SubDirs(const std::string& path, bool roots = true) {
  std::vector<std::string> out;
  UniqueFd fd = OpenDir(path, roots);
  if (!fd.valid()) return out;
  DIR* dir = fdopendir(fd.get());
  if (dir == nullptr) return out;
  fd.Release();  // The directory stream owns it now.
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

// A job's (or step's) cgroup directory `dir`, and its path as /proc/<pid>/cgroup names it
// (`rel`: below its hierarchy's root, ROOT of the mount's mountinfo line joined with what follows
// the mount point).
struct Target {
  std::string dir;
  std::string rel;
};

// The cgroup mounts of /proc/self/mountinfo: mount point and the hierarchy's path at it.
std::vector<std::pair<std::string, std::string>> MountRoots() {
  std::vector<std::pair<std::string, std::string>> out;
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
    if (type == "cgroup" || type == "cgroup2") out.emplace_back(Unescape(mount), Unescape(root));
  }
  return out;
}

std::vector<Target> Targets(const std::vector<std::string>& dirs) {
  const std::vector<std::pair<std::string, std::string>> mounts = MountRoots();
  std::vector<Target> out;
  for (const std::string& dir : dirs) {
    // The longest mount point the directory is under.
    const std::pair<std::string, std::string>* best = nullptr;
    for (const auto& mount : mounts) {
      if (dir.rfind(mount.first + "/", 0) == 0 &&
          (!best || mount.first.size() > best->first.size())) {
        best = &mount;
      }
    }
    // Not under a cgroup mount (a caller's own path list): its path from the root as it is.
    std::string rel = best ? dir.substr(best->first.size()) : dir;
    if (best && best->second != "/") rel = best->second + rel;
    out.push_back({dir, rel});
  }
  return out;
}

// The whole of a small /proc file; nullopt when the process is gone, an error otherwise.
StatusOr<std::optional<std::string>> ReadProcFile(const std::string& path) {
  // Any failure but the process's end is kUnavailable (the callers fail closed).
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (const int err = errno; !fd.valid()) {
    if (err == ENOENT || err == ESRCH) return std::optional<std::string>();
    return UnavailableError(ErrnoStatus("cannot read " + path, err).message());
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      if (err == ESRCH) return std::optional<std::string>();
      return UnavailableError(ErrnoStatus("cannot read " + path, err).message());
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(text));
}

// Whether process `pid` has exited and only waits to be reaped (it holds no memory): a zombie
// whose threads are all gone.
bool IsReapable(pid_t pid) {
  StatusOr<std::optional<std::string>> stat =
      ReadProcFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok() || !*stat) return stat.ok();
  const size_t paren = (*stat)->rfind(')');
  if (paren == std::string::npos || paren + 2 >= (*stat)->size()) return false;
  const char state = (**stat)[paren + 2];
  if (state != 'Z' && state != 'X') return false;
  int threads = 0;
  if (DIR* tasks = opendir(("/proc/" + std::to_string(pid) + "/task").c_str())) {
    while (dirent* entry = readdir(tasks)) threads += entry->d_name[0] != '.';
    closedir(tasks);
  }
  return threads <= 1;
}

// A process of the targets: its PID and its cgroup directories under them.
struct Member {
  pid_t pid = 0;
  std::vector<std::string> cgroups;
};

// Whether process `pid`'s cgroup, in some hierarchy, is one of `targets` or below it, as
// /proc/<pid>/cgroup says now (immune to renames and depth below the target). nullopt: not one
// (or gone, or reapable); an error when its cgroups cannot be read.
StatusOr<std::optional<Member>> MemberOf(pid_t pid, const std::vector<Target>& targets) {
  GPUFRAC_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           ReadProcFile("/proc/" + std::to_string(pid) + "/cgroup"));
  if (!text) return std::optional<Member>();
  Member member;
  member.pid = pid;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    // ID:CONTROLLERS:PATH (the path may hold ':').
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string path = line.substr(second + 1);
    for (const Target& target : targets) {
      if (path == target.rel || (path.rfind(target.rel + "/", 0) == 0)) {
        member.cgroups.push_back(target.dir + path.substr(target.rel.size()));
      }
    }
  }
  if (member.cgroups.empty() || IsReapable(pid)) return std::optional<Member>();
  return std::optional<Member>(std::move(member));
}

// One scan of /proc: the processes in `targets` but `except`. An error (fail closed: processes
// may remain) when /proc or a process's cgroups cannot be read, or `deadline` passes.
StatusOr<std::vector<Member>> Scan(const std::vector<Target>& targets, pid_t except,
                                   std::chrono::steady_clock::time_point deadline) {
  std::vector<Member> out;
  if (targets.empty()) return out;
  DIR* proc = opendir("/proc");
  if (const int err = errno; proc == nullptr) {
    return UnavailableError(ErrnoStatus("cannot list /proc", err).message());
  }
  Status failed = OkStatus();
  for (;;) {
    errno = 0;
    const dirent* entry = readdir(proc);
    if (const int err = errno; entry == nullptr) {
      if (err != 0) failed = UnavailableError(ErrnoStatus("cannot list /proc", err).message());
      break;
    }
    pid_t pid = 0;
    const char* name = entry->d_name;
    auto [end, ec] = std::from_chars(name, name + std::strlen(name), pid);
    if (ec != std::errc() || *end != '\0' || pid <= 0 || pid == except) continue;
    if (std::chrono::steady_clock::now() >= deadline) {
      failed = UnavailableError("the scan of /proc for the job's processes ran out of time");
      break;
    }
    StatusOr<std::optional<Member>> member = MemberOf(pid, targets);
    if (!member.ok()) {
      failed = member.status();
      break;
    }
    if (*member) out.push_back(std::move(**member));
  }
  closedir(proc);
  if (!failed.ok()) return failed;
  return out;
}

// SIGKILL to `member`: through a pidfd, and only if its cgroups, read again once the pidfd is
// open, still put it in `targets` (a PID reused meanwhile by a process elsewhere is left alone;
// one reused and reaped again gets the signal on its dead pidfd, harmlessly).
void Kill(const Member& member, const std::vector<Target>& targets) {
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, member.pid, 0)));
  if (const int err = errno; !pidfd.valid()) {
    // A kernel without pidfds (before 5.3): a plain kill, checked just before.
    StatusOr<std::optional<Member>> still = MemberOf(member.pid, targets);
    if (err == ENOSYS && still.ok() && *still) kill(member.pid, SIGKILL);
    return;  // Else gone already (ESRCH).
  }
  StatusOr<std::optional<Member>> still = MemberOf(member.pid, targets);
  if (still.ok() && *still) syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
}

// Writes `value` to the cgroup file `path` if it exists (never creates it).
void WriteControl(const std::string& path, const char* value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return;
  ssize_t ignored = write(fd.get(), value, std::strlen(value));
  (void)ignored;
}

// A frozen task gets SIGKILL only when thawed, and a cgroup that froze itself (v1's
// freezer.state, v2's cgroup.freeze) stays frozen when its parent thaws: every cgroup from each
// member's own up to its target, deepest first.
void Thaw(const std::vector<Member>& members, const std::vector<Target>& targets) {
  std::set<std::string> dirs;
  for (const Member& member : members) {
    for (std::string dir : member.cgroups) {
      // Each is its target's directory or below it: up to that directory, or to one already met.
      while (dirs.insert(dir).second) {
        const size_t slash = dir.rfind('/');
        if (slash == std::string::npos ||
            std::any_of(targets.begin(), targets.end(),
                        [&](const Target& target) { return target.dir == dir; })) {
          break;
        }
        dir.resize(slash);
      }
    }
  }
  std::vector<std::string> deepest_first(dirs.begin(), dirs.end());
  std::stable_sort(deepest_first.begin(), deepest_first.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& dir : deepest_first) {
    WriteControl(dir + "/freezer.state", "THAWED");
    WriteControl(dir + "/cgroup.freeze", "0");
  }
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
  for (const auto& [mount, root] : MountRoots()) out.push_back(mount);
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

StatusOr<std::vector<pid_t>> ProcessesIn(const std::vector<std::string>& dirs, pid_t except,
                                         std::chrono::milliseconds wait) {
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<Member> members,
                           Scan(Targets(dirs), except, std::chrono::steady_clock::now() + wait));
  std::vector<pid_t> out;
  for (const Member& member : members) out.push_back(member.pid);
  return out;
}

Status EndProcessesIn(const std::vector<std::string>& dirs, pid_t except,
                      std::chrono::milliseconds wait, const std::function<bool(pid_t)>& which) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  const std::vector<Target> targets = Targets(dirs);
  auto kept = [&](const std::string& why) {
    return UnavailableError("processes of " + dirs.front() + " may remain: " + why);
  };
  for (;;) {
    StatusOr<std::vector<Member>> members = Scan(targets, except, deadline);
    if (!members.ok()) return kept(members.status().message());
    if (which) {
      members->erase(std::remove_if(members->begin(), members->end(),
                                    [&](const Member& member) { return !which(member.pid); }),
                     members->end());
    }
    if (members->empty()) return OkStatus();
    std::string left;
    for (const Member& member : *members) {
      left += (left.empty() ? "" : " ") + std::to_string(member.pid);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return kept(left + " outlived SIGKILL for " + std::to_string(wait.count()) + " ms");
    }
    for (const Member& member : *members) Kill(member, targets);
    Thaw(*members, targets);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace gpufrac::slurm
