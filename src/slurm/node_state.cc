// The jobs' files on a Slurm node (node_state.h).
#include "slurm/node_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace gpufrac::slurm {
namespace {

constexpr char kLimitsFile[] = "limits";
constexpr char kJobPrefix[] = "job-";
constexpr char kStepPrefix[] = "step-";
constexpr size_t kMaxStateFile = 16384;

std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

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

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Only a directory of ours that no one else can write is ours to act in.
Status CheckOwnDir(int fd, const std::string& shown) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return FailedPreconditionError(Errno("cannot stat " + shown, errno));
  if (!S_ISDIR(st.st_mode)) return FailedPreconditionError(shown + " is not a directory");
  if (st.st_uid != geteuid()) {
    return FailedPreconditionError(shown + " belongs to uid " + std::to_string(st.st_uid) +
                                   ", not to uid " + std::to_string(geteuid()));
  }
  if ((st.st_mode & 022) != 0) {
    return FailedPreconditionError(shown + " is writable by others than its owner");
  }
  return OkStatus();
}

// The entries of the directory `fd` (not "." or "..").
std::vector<std::string> Entries(int fd) {
  std::vector<std::string> out;
  int copy = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return out;
  DIR* dir = fdopendir(copy);
  if (dir == nullptr) {
    close(copy);
    return out;
  }
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
  Fd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
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
  Fd fd(openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (fd.get() < 0) return UnavailableError(Errno("cannot create " + shown, errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      unlinkat(dir, name.c_str(), 0);
      return UnavailableError(Errno("cannot write " + shown, err));
    }
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd.get(), mode) != 0) {
    int err = errno;
    unlinkat(dir, name.c_str(), 0);
    return UnavailableError(Errno("cannot set the mode of " + shown, err));
  }
  return OkStatus();
}

std::string JobDirName(uint32_t job) { return kJobPrefix + std::to_string(job); }

}  // namespace

StatusOr<NodeState> NodeState::Open(const std::string& state_dir) {
  if (state_dir.empty() || state_dir[0] != '/') {
    return FailedPreconditionError("the state directory must be an absolute path, not \"" +
                                   state_dir + "\"");
  }
  // Its parent too (/run/gpufrac after a reboot), root's and not writable by others.
  const std::string parent = state_dir.substr(0, state_dir.find_last_of('/'));
  if (!parent.empty()) {
    if (mkdir(parent.c_str(), 0755) == 0) {
      chmod(parent.c_str(), 0755);  // Whatever slurmstepd's umask: the jobs' users pass through.
    } else if (errno != EEXIST) {
      return FailedPreconditionError(Errno("cannot create " + parent, errno));
    }
  }
  if (mkdir(state_dir.c_str(), 0711) != 0 && errno != EEXIST) {
    return FailedPreconditionError(Errno("cannot create " + state_dir, errno));
  }
  Fd fd(open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return FailedPreconditionError(Errno("cannot open " + state_dir, errno));
  GPUFRAC_RETURN_IF_ERROR(CheckOwnDir(fd.get(), state_dir));
  // The jobs' users must pass through it to their limit files, whatever the umask made.
  struct stat st {};
  if (fstat(fd.get(), &st) == 0 && (st.st_mode & 0111) != 0111) {
    fchmod(fd.get(), (st.st_mode & 0777) | 0111);
  }
  // The budget directory is made once per node (and again after a reboot empties /dev/shm);
  // concurrent first steps must not make two.
  StatusOr<launch::BudgetDir> budgets = [&] {
    DirLock lock(fd.get());
    return launch::BudgetDir::ForService(state_dir + "/budget-dir", 0711);
  }();
  if (!budgets.ok()) return budgets.status();
  return NodeState(state_dir, fd.release(), std::move(*budgets));
}

NodeState::NodeState(NodeState&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      budgets_(std::move(other.budgets_)) {}

NodeState& NodeState::operator=(NodeState&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    budgets_ = std::move(other.budgets_);
  }
  return *this;
}

NodeState::~NodeState() {
  if (fd_ >= 0) close(fd_);
}

std::string NodeState::WorkloadName(uint32_t job) { return "slurm-" + std::to_string(job); }

StatusOr<std::string> NodeState::BeginStep(uint32_t job, uint32_t step,
                                           const proc::ProcessId& stepd,
                                           const std::string& limits_text,
                                           const std::vector<launch::LimitedGpu>& gpus,
                                           std::optional<launch::WorkloadBudgets::Owner> owner) {
  DirLock lock(fd_);
  SweepLocked();
  const std::string name = JobDirName(job);
  const std::string shown = path_ + "/" + name;
  if (mkdirat(fd_, name.c_str(), 0711) != 0 && errno != EEXIST) {
    return UnavailableError(Errno("cannot create " + shown, errno));
  }
  Fd dir(openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) return UnavailableError(Errno("cannot open " + shown, errno));
  // 0711 whatever the umask: the job's user reaches its limit file by name, lists nothing.
  if (fchmod(dir.get(), 0711) != 0) {
    return UnavailableError(Errno("cannot set the mode of " + shown, errno));
  }
  GPUFRAC_RETURN_IF_ERROR(CheckOwnDir(dir.get(), shown));

  std::optional<std::string> existing = ReadOwnFile(dir.get(), kLimitsFile);
  if (existing && *existing != limits_text) {
    return FailedPreconditionError(
        "another step of job " + std::to_string(job) +
        " runs on this node with other gpufrac limits; the steps of a job share its budget, so "
        "each must ask for the same");
  }
  if (!existing) {
    // Left without a limit file (a step that failed half-way): start the job afresh.
    unlinkat(dir.get(), kLimitsFile, 0);
    GPUFRAC_RETURN_IF_ERROR(
        WriteNewFileAt(dir.get(), kLimitsFile, limits_text, 0444, shown + "/" + kLimitsFile));
    StatusOr<launch::WorkloadBudgets> made =
        launch::WorkloadBudgets::Create(budgets_, WorkloadName(job), gpus, owner);
    if (!made.ok()) {
      RemoveJobLocked(name, job);
      return made.status();
    }
    made->Keep();  // Removed with the job's last step.
  }
  const std::string marker = kStepPrefix + std::to_string(step);
  unlinkat(dir.get(), marker.c_str(), 0);
  Status recorded = WriteNewFileAt(
      dir.get(), marker, std::to_string(stepd.pid) + " " + std::to_string(stepd.start_ticks) + "\n",
      0600, shown + "/" + marker);
  if (!recorded.ok()) {
    if (!existing) RemoveJobLocked(name, job);
    return recorded;
  }
  return shown + "/" + kLimitsFile;
}

void NodeState::EndStep(uint32_t job, uint32_t step) {
  DirLock lock(fd_);
  const std::string name = JobDirName(job);
  Fd dir(openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() < 0) return;
  const std::string marker = kStepPrefix + std::to_string(step);
  unlinkat(dir.get(), marker.c_str(), 0);
  for (const std::string& entry : Entries(dir.get())) {
    if (NumberAfter(entry, kStepPrefix)) return;  // Another step of the job still runs.
  }
  RemoveJobLocked(name, job);
}

void NodeState::EndJob(uint32_t job) {
  DirLock lock(fd_);
  RemoveJobLocked(JobDirName(job), job);
}

void NodeState::Sweep() {
  DirLock lock(fd_);
  SweepLocked();
}

void NodeState::SweepLocked() {
  for (const std::string& name : Entries(fd_)) {
    std::optional<uint64_t> job = NumberAfter(name, kJobPrefix);
    if (!job || *job > UINT32_MAX) continue;
    Fd dir(openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.get() < 0) continue;
    bool live = false;
    for (const std::string& entry : Entries(dir.get())) {
      if (!NumberAfter(entry, kStepPrefix)) continue;
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
    if (!live) RemoveJobLocked(name, static_cast<uint32_t>(*job));
  }
}

void NodeState::RemoveJobLocked(const std::string& job_dir_name, uint32_t job) {
  // The job's budgets, found by name in the budget directory (so that none is left even when its
  // limit file is gone): "gpufrac.<workload>.<uuid>".
  const std::string prefix = "gpufrac." + WorkloadName(job) + ".";
  std::vector<std::string> uuids;
  for (const std::string& entry : Entries(budgets_.fd())) {
    if (StartsWith(entry, prefix)) uuids.push_back(entry.substr(prefix.size()));
  }
  launch::WorkloadBudgets::Remove(budgets_, WorkloadName(job), uuids);
  Fd dir(openat(fd_, job_dir_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dir.get() >= 0) {
    for (const std::string& entry : Entries(dir.get())) unlinkat(dir.get(), entry.c_str(), 0);
  }
  unlinkat(fd_, job_dir_name.c_str(), AT_REMOVEDIR);
}

}  // namespace gpufrac::slurm
