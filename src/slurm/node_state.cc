// The jobs' files on a Slurm node (node_state.h).
#include "slurm/node_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>

#include "common/posix.h"
#include "slurm/user_acl.h"

namespace gpufrac::slurm {
namespace {

constexpr char kLimitsFile[] = "limits";
constexpr char kJobPrefix[] = "job-";
constexpr char kStepPrefix[] = "step-";
// "ran-<step>": a step of the job that held its share here (kept when it ends): the last step's
// end ends the leftovers of each.
constexpr char kRanPrefix[] = "ran-";
constexpr size_t kMaxStateFile = 16384;
// What a job's budget tmpfs holds per GPU: one budget (limiter/budget.h's segment, about 80 KiB
// today; creating one fails loudly if it ever outgrows this), and one more of these for slack.
constexpr uint64_t kBudgetBytesPerGpu = uint64_t{1} << 20;
// The node's budget directory's tmpfs: the GPUs' arbiters (a few KiB each) and the jobs' mount
// points.
constexpr uint64_t kNodeBudgetDirBytes = uint64_t{8} << 20;
// How long a job's processes get to die after SIGKILL before its share is kept booked (Slurm's
// own UnkillableStepTimeout is 60 s by default).
constexpr std::chrono::milliseconds kProcessesEndWait{10000};

// Holds an exclusive flock on a directory for its life.
class DirLock {
 public:
  explicit DirLock(int fd) : fd_(fd) {
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~DirLock() { flock(fd_, LOCK_UN); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_;
};

// The entries of the directory `fd` (not "." or "..").
std::vector<std::string> Entries(int fd) {
  std::vector<std::string> out;
  UniqueFd copy(openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* dir = copy.valid() ? fdopendir(copy.get()) : nullptr;
  if (dir == nullptr) return out;
  copy.Release();  // The stream owns it now.
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") out.push_back(std::move(name));
  }
  closedir(dir);
  return out;
}

bool StartsWith(const std::string& text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// The number after `prefix` in `name` ("job-12" -> 12); nullopt when it is not exactly that.
std::optional<uint64_t> NumberAfter(const std::string& name, std::string_view prefix) {
  if (!StartsWith(name, prefix) || name.size() == prefix.size()) return std::nullopt;
  uint64_t value = 0;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// A regular file of ours in `dir`; nullopt when there is none (or it is not one).
std::optional<std::string> ReadOwnFile(int dir, const std::string& name) {
  UniqueFd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      st.st_size > static_cast<off_t>(kMaxStateFile)) {
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

// Creates `name` in `dir` (which must not have it) holding `text`, with exactly `mode`.
Status WriteNewFileAt(int dir, const std::string& name, const std::string& text, mode_t mode,
                      const std::string& shown) {
  UniqueFd fd(
      openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus("cannot create " + shown, errno);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      unlinkat(dir, name.c_str(), 0);
      return ErrnoStatus("cannot write " + shown, err);
    }
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd.get(), mode) != 0) {
    const int err = errno;
    unlinkat(dir, name.c_str(), 0);
    return ErrnoStatus("cannot set the mode of " + shown, err);
  }
  return OkStatus();
}

std::string JobDirName(uint32_t job) { return kJobPrefix + std::to_string(job); }

// A slurmstepd's marker: "step-<step>.<pid>". Each component of a heterogeneous step has its own
// slurmstepd (and the same step id), so each has its own marker.
std::string MarkerName(uint32_t step, const proc::ProcessId& stepd) {
  return kStepPrefix + std::to_string(step) + "." + std::to_string(stepd.pid);
}

// Whether `name` is a step marker ("step-<step>.<pid>", or "step-<step>" as earlier versions
// wrote them).
bool IsMarker(const std::string& name) {
  if (NumberAfter(name, kStepPrefix)) return true;
  const size_t dot = name.find('.');
  return dot != std::string::npos && NumberAfter(name.substr(0, dot), kStepPrefix) &&
         NumberAfter(name.substr(dot), ".");
}

// Whether the limit file `text` limits each of `gpus`.
bool Covers(const std::string& text, const std::vector<launch::LimitedGpu>& gpus) {
  for (const launch::LimitedGpu& gpu : gpus) {
    const std::string line = "gpu " + gpu.uuid + " ";
    if (!StartsWith(text, line) && text.find("\n" + line) == std::string::npos) return false;
  }
  return true;
}

// Whether the job directory `fd` holds a step marker: a step of the job runs.
bool HasMarker(int fd) {
  for (const std::string& entry : Entries(fd)) {
    if (IsMarker(entry)) return true;
  }
  return false;
}

// Why a job's files stay: a process of it outlived SIGKILL (`ended`).
Status KeptBecause(uint32_t job, const Status& ended) {
  return UnavailableError(
      "job " + std::to_string(job) +
      "'s gpufrac files and budgets stay until its processes are gone: " + ended.message());
}

// Whether the directory `fd` is the root of a filesystem mounted on it, not of `parent`'s.
bool IsMountedOn(int fd, int parent) {
  struct stat st {
  }, up{};
  return fstat(fd, &st) == 0 && fstat(parent, &up) == 0 && st.st_dev != up.st_dev;
}

}  // namespace

StatusOr<NodeState> NodeState::Open(const std::string& state_dir, const std::string& node) {
  // Missing directories are made 0755 above it (/run/gpufrac after a reboot: the jobs' users
  // pass through) and 0711 for it, whatever slurmstepd's umask.
  StatusOr<UniqueFd> opened = OpenOurDirectoryPath(state_dir, 0711, 0755);
  if (!opened.ok()) return opened.status().WithContext("state directory " + state_dir);
  UniqueFd fd = std::move(*opened);
  // Exactly 0711: the jobs' users pass through it to their limit files, and no one else may
  // open it, which would let them hold its lock (below) and stop every step on the node.
  fchmod(fd.get(), 0711);
  // The budget directory is made once per node (and again after a reboot empties /dev/shm);
  // concurrent first steps must not make two.
  StatusOr<launch::BudgetDir> budgets = [&]() -> StatusOr<launch::BudgetDir> {
    DirLock lock(fd.get());
    const std::string record = state_dir + "/budget-dir";
    GPUFRAC_ASSIGN_OR_RETURN(launch::BudgetDir made, launch::BudgetDir::ForService(record, 0711));
    // It holds the GPUs' arbiters, which every job may write (0666): on a tmpfs of its own, one
    // grown takes at most that tmpfs, and a user who fills /dev/shm leaves it room. Mounted when
    // new (empty), through its descriptor; then opened again, now the tmpfs.
    UniqueFd parent(openat(made.fd(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (parent.valid() && !IsMountedOn(made.fd(), parent.get()) && Entries(made.fd()).empty()) {
      const std::string options =
          "size=" + std::to_string(kNodeBudgetDirBytes) + ",nr_inodes=4096,mode=0711,uid=0,gid=0";
      const std::string target = "/proc/self/fd/" + std::to_string(made.fd());
      if (mount("gpufrac-arbiters", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                options.c_str()) == 0) {
        return launch::BudgetDir::ForService(record, 0711);
      }
    }
    return made;
  }();
  if (!budgets.ok()) return budgets.status();
  const bool acls = SupportsAcls(fd.get());
  return NodeState(state_dir, std::move(fd), std::move(*budgets), acls, node);
}

std::string NodeState::WorkloadName(uint32_t job) { return "slurm-" + std::to_string(job); }

std::string NodeState::JobBudgetDir(uint32_t job) const {
  return budgets_.path() + "/" + JobDirName(job);
}

StatusOr<std::string> NodeState::StartJobLocked(
    int dir, uint32_t job, const std::string& limits_text,
    const std::vector<launch::LimitedGpu>& gpus,
    const std::optional<launch::WorkloadBudgets::Owner>& owner) {
  const std::string name = JobDirName(job);
  const std::string shown = path_ + "/" + name;
  const mode_t dir_mode = private_limits_ ? 0700 : 0711;
  const mode_t file_mode = private_limits_ ? 0400 : 0444;
  // The job's user may search its directory and read its limit file, no one else (root aside).
  if (fchmod(dir, dir_mode) != 0) {
    return ErrnoStatus("cannot set the mode of " + shown, errno);
  }
  if (private_limits_ && owner) {
    Status granted = GrantUserAccess(dir, owner->uid, 07, 01);
    if (!granted.ok()) return UnavailableError(shown + ": " + granted.message());
  }
  unlinkat(dir, kLimitsFile, 0);
  GPUFRAC_RETURN_IF_ERROR(
      WriteNewFileAt(dir, kLimitsFile, limits_text, file_mode, shown + "/" + kLimitsFile));
  if (private_limits_ && owner) {
    UniqueFd file(openat(dir, kLimitsFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    Status granted = !file.valid() ? ErrnoStatus("cannot open it", errno)
                                   : GrantUserAccess(file.get(), owner->uid, 04, 04);
    if (!granted.ok()) {
      RemoveJobLocked(name, job);
      return UnavailableError(shown + "/" + kLimitsFile + ": " + granted.message());
    }
  }
  StatusOr<std::string> made_dir = MakeJobBudgetDirLocked(job, gpus.size());
  if (!made_dir.ok()) {
    RemoveJobLocked(name, job);
    return made_dir.status();
  }
  std::string warning = *made_dir;
  auto warn = [&warning](const std::string& text) {
    warning += (warning.empty() ? "" : "; ") + text;
  };
  if (!private_limits_ && owner) {
    warn(path_ +
         " keeps no POSIX ACLs, so the job's limit file is readable by every local user (give "
         "state_dir= a directory on tmpfs or another filesystem with ACLs)");
  }
  if (UniqueFd up(openat(budgets_.fd(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      up.valid() && !IsMountedOn(budgets_.fd(), up.get())) {
    warn(budgets_.path() +
         " is not a tmpfs of its own (it held files when first used, or none could be "
         "mounted), so a user who fills /dev/shm stops new gpufrac steps on this node");
  }
  StatusOr<launch::BudgetDir> job_budgets = launch::BudgetDir::Open(JobBudgetDir(job));
  if (!job_budgets.ok()) {
    RemoveJobLocked(name, job);
    return job_budgets.status();
  }
  // The budgets in the job's directory; the compute arbiters in the node's, where every job on
  // the GPU meets.
  StatusOr<launch::WorkloadBudgets> made =
      launch::WorkloadBudgets::Create(*job_budgets, WorkloadName(job), gpus, owner, &budgets_);
  if (!made.ok()) {
    RemoveJobLocked(name, job);
    return made.status();
  }
  made->Keep();  // Removed with the job's last step.
  return warning;
}

Status NodeState::RecordStepLocked(int dir, uint32_t step, const proc::ProcessId& stepd,
                                   const std::string& shown) {
  const std::string marker = MarkerName(step, stepd);
  unlinkat(dir, marker.c_str(), 0);
  Status recorded = WriteNewFileAt(
      dir, marker, std::to_string(stepd.pid) + " " + std::to_string(stepd.start_ticks) + "\n", 0600,
      shown + "/" + marker);
  if (!recorded.ok()) return recorded;
  const std::string ran = kRanPrefix + std::to_string(step);
  struct stat st {};
  if (fstatat(dir, ran.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    Status noted = WriteNewFileAt(dir, ran, "", 0600, shown + "/" + ran);
    if (!noted.ok()) {
      unlinkat(dir, marker.c_str(), 0);
      return noted;
    }
  }
  return OkStatus();
}

StatusOr<BegunStep> NodeState::BeginStep(uint32_t job, uint32_t step, const proc::ProcessId& stepd,
                                         const std::string& limits_text,
                                         const std::vector<launch::LimitedGpu>& gpus,
                                         std::optional<launch::WorkloadBudgets::Owner> owner,
                                         bool join_running) {
  DirLock lock(fd_.get());
  SweepLocked();
  const std::string name = JobDirName(job);
  const std::string shown = path_ + "/" + name;
  // Without ACLs the job's user could not reach a private directory: the old, open modes.
  const mode_t dir_mode = private_limits_ ? 0700 : 0711;
  if (mkdirat(fd_.get(), name.c_str(), dir_mode) != 0 && errno != EEXIST) {
    return ErrnoStatus("cannot create " + shown, errno);
  }
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd dir, OpenOurDirectoryAt(fd_.get(), name, shown));

  BegunStep begun;
  std::optional<std::string> existing = ReadOwnFile(dir.get(), kLimitsFile);
  if (existing && *existing != limits_text && !(join_running && Covers(*existing, gpus))) {
    return FailedPreconditionError(
        "another step of job " + std::to_string(job) +
        " runs on this node with other gpufrac limits (a batch step without gpufrac's options "
        "holds all the job's shards); the steps of a job share its budget, so each must ask for "
        "the same, or leave gpufrac's options off to join the job's");
  }
  if (!existing) {
    // Left without a limit file (a step that failed half-way): start the job afresh.
    GPUFRAC_ASSIGN_OR_RETURN(begun.warning,
                             StartJobLocked(dir.get(), job, limits_text, gpus, owner));
  }
  if (Status recorded = RecordStepLocked(dir.get(), step, stepd, shown); !recorded.ok()) {
    if (!existing) RemoveJobLocked(name, job);
    return recorded;
  }
  begun.limit_file = shown + "/" + kLimitsFile;
  return begun;
}

Status NodeState::EndStep(uint32_t job, uint32_t step, const proc::ProcessId& stepd) {
  const std::string name = JobDirName(job);
  std::vector<std::string> cgroups;
  {
    DirLock lock(fd_.get());
    UniqueFd dir(openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return OkStatus();
    const std::string marker = MarkerName(step, stepd);
    unlinkat(dir.get(), marker.c_str(), 0);
    if (HasMarker(dir.get())) return OkStatus();  // Another step of the job still runs.
    // Every step that held the share may have left a process (one that ended earlier while
    // another still ran among them), in its cgroup or below: the share goes only once all are
    // gone. Steps gpufrac never saw (the extern step, a CPU-only step) are left alone.
    std::vector<uint32_t> steps = {step};
    for (const std::string& entry : Entries(dir.get())) {
      std::optional<uint64_t> ran = NumberAfter(entry, kRanPrefix);
      if (ran && *ran <= UINT32_MAX && *ran != step) steps.push_back(static_cast<uint32_t>(*ran));
    }
    for (uint32_t each : steps) {
      for (std::string& cgroup : JobCgroups(job, each, node_, cgroup_mounts_)) {
        cgroups.push_back(std::move(cgroup));
      }
    }
  }
  // Outside the lock: a process slow to die must not hold up the other steps on the node.
  Status ended = EndProcessesIn(cgroups, stepd.pid, kProcessesEndWait);
  if (!ended.ok()) return KeptBecause(job, ended);
  DirLock lock(fd_.get());
  UniqueFd dir(openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  // A step of the job that started meanwhile shares the files.
  if (!dir.valid() || HasMarker(dir.get())) return OkStatus();
  RemoveJobLocked(name, job);
  return OkStatus();
}

Status NodeState::EndJob(uint32_t job) {
  // Whatever gpufrac holds of the job: a process of a step whose share was freed may have
  // escaped that step's end, and the job is over.
  Status ended = EndProcessesIn(JobCgroups(job, std::nullopt, node_, cgroup_mounts_), getpid(),
                                kProcessesEndWait);
  if (!ended.ok()) return KeptBecause(job, ended);
  DirLock lock(fd_.get());
  RemoveJobLocked(JobDirName(job), job);
  return OkStatus();
}

void NodeState::SweepLocked() {
  for (const std::string& name : Entries(fd_.get())) {
    std::optional<uint64_t> job = NumberAfter(name, kJobPrefix);
    if (!job || *job > UINT32_MAX) continue;
    UniqueFd dir(openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) continue;
    bool live = false;
    for (const std::string& entry : Entries(dir.get())) {
      if (!IsMarker(entry)) continue;
      std::optional<std::string> text = ReadOwnFile(dir.get(), entry);
      proc::ProcessId stepd;
      unsigned long long pid = 0, ticks = 0;
      bool parsed = text && std::sscanf(text->c_str(), "%llu %llu", &pid, &ticks) == 2;
      stepd.pid = static_cast<pid_t>(pid);
      stepd.start_ticks = ticks;
      // Kept unless its slurmstepd has certainly ended (an unreadable marker is not evidence).
      if (parsed && !proc::MayBeAlive(stepd)) {
        unlinkat(dir.get(), entry.c_str(), 0);
      } else {
        live = true;
      }
    }
    // A task whose slurmstepd was killed still runs, holding its GPU memory: the job's files stay
    // (and its budgets, which count that memory) until the epilog ends it.
    // Not when the job's processes cannot be found for certain either (ProcessesIn fails closed).
    if (live) continue;
    StatusOr<std::vector<pid_t>> left =
        ProcessesIn(JobCgroups(static_cast<uint32_t>(*job), std::nullopt, node_, cgroup_mounts_),
                    getpid(), kProcessesEndWait);
    if (left.ok() && left->empty()) RemoveJobLocked(name, static_cast<uint32_t>(*job));
  }
  // Budget directories of jobs whose state is gone (a step that died half-way through).
  for (const std::string& name : Entries(budgets_.fd())) {
    std::optional<uint64_t> job = NumberAfter(name, kJobPrefix);
    if (!job || *job > UINT32_MAX) continue;
    struct stat st {};
    if (fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
      RemoveJobBudgetDirLocked(static_cast<uint32_t>(*job));
    }
  }
}

void NodeState::RemoveJobLocked(const std::string& job_dir_name, uint32_t job) {
  // The job's budgets: its own directory, and any an earlier version made in the node's (found
  // by name, "gpufrac.<workload>.<uuid>", so that none is left even when the limit file is gone).
  RemoveJobBudgetDirLocked(job);
  const std::string prefix = "gpufrac." + WorkloadName(job) + ".";
  std::vector<std::string> uuids;
  for (const std::string& entry : Entries(budgets_.fd())) {
    if (StartsWith(entry, prefix)) uuids.push_back(entry.substr(prefix.size()));
  }
  launch::WorkloadBudgets::Remove(budgets_, WorkloadName(job), uuids);
  UniqueFd dir(
      openat(fd_.get(), job_dir_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.valid()) {
    for (const std::string& entry : Entries(dir.get())) unlinkat(dir.get(), entry.c_str(), 0);
  }
  unlinkat(fd_.get(), job_dir_name.c_str(), AT_REMOVEDIR);
}

StatusOr<std::string> NodeState::MakeJobBudgetDirLocked(uint32_t job, size_t gpus) {
  RemoveJobBudgetDirLocked(job);  // A leftover would hold an old limit.
  const std::string name = JobDirName(job);
  const std::string shown = JobBudgetDir(job);
  if (mkdirat(budgets_.fd(), name.c_str(), 0711) != 0) {
    return ErrnoStatus("cannot create " + shown, errno);
  }
  UniqueFd dir(
      openat(budgets_.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return ErrnoStatus("cannot open " + shown, errno);
  fchmod(dir.get(), 0711);
  GPUFRAC_RETURN_IF_ERROR(CheckDirectoryIsOurs(dir.get(), shown));
  // The budget files are the job's user's (its processes map them read-write), so it can grow
  // them: a tmpfs of their size bounds what that takes from the node's memory. Mounted on the
  // directory just checked, through its descriptor, not its path.
  const uint64_t size = (gpus + 1) * kBudgetBytesPerGpu;
  const std::string options = "size=" + std::to_string(size) +
                              ",nr_inodes=" + std::to_string(gpus + 8) + ",mode=0711,uid=0,gid=0";
  const std::string target = "/proc/self/fd/" + std::to_string(dir.get());
  if (mount("gpufrac-budgets", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            options.c_str()) != 0) {
    return ErrnoStatus("cannot mount a tmpfs on " + shown, errno).message() +
           "; the job's user can grow its budget files until /dev/shm is full";
  }
  return std::string();
}

void NodeState::RemoveJobBudgetDirLocked(uint32_t job) {
  const std::string name = JobDirName(job);
  const std::string path = JobBudgetDir(job);
  // Its tmpfs (any stacked on it too), then the directory under it. Only root makes names in
  // the node's budget directory, so the path is the one it made.
  for (int i = 0; i < 8; ++i) {
    UniqueFd dir(
        openat(budgets_.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) return;
    if (!IsMountedOn(dir.get(), budgets_.fd())) {
      for (const std::string& entry : Entries(dir.get())) unlinkat(dir.get(), entry.c_str(), 0);
      break;
    }
    if (umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) break;
  }
  unlinkat(budgets_.fd(), name.c_str(), AT_REMOVEDIR);
}

}  // namespace gpufrac::slurm
