// The service's side of starting jobs (see job_runner.h): writes JOB_DIR and the budgets, forks
// gpufrac-shim with its go-ahead pipe, and reads back what the shim records.
#include "node/job_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/budgets.h"
#include "launch/cgroup.h"
#include "launch/environment.h"
#include "launch/limit_file.h"
#include "proc/process_group.h"

namespace gpufrac::node {
namespace {

// Private to the runner and the shim (shim_main.cc reads them by the same names).
constexpr const char* kSpecFile = "spec.json";
constexpr const char* kLimitsFile = "limits";
// Where the shim finds its go-ahead pipe.
constexpr int kGoAheadFd = 3;

Status Validate(const LaunchSpec& spec) {
  if (spec.job_dir.empty() || spec.job_dir[0] != '/') {
    return InvalidArgumentError("the job directory must be an absolute path, not '" + spec.job_dir +
                                "'");
  }
  if (spec.command.empty() || spec.command[0].empty()) {
    return InvalidArgumentError("the job has no command to run");
  }
  if (spec.cwd.empty() || spec.cwd[0] != '/') {
    return InvalidArgumentError("the job's working directory must be absolute, not '" + spec.cwd +
                                "'");
  }
  for (const std::vector<std::string>* list : {&spec.env, &spec.extra_env}) {
    for (const std::string& entry : *list) {
      size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0) {
        return InvalidArgumentError("environment entry '" + entry + "' is not NAME=value");
      }
    }
  }
  if (spec.limiter_path.empty() || spec.limiter_path[0] != '/') {
    return InvalidArgumentError("the limiter path must be absolute, not '" + spec.limiter_path +
                                "'");
  }
  if (spec.kill_grace_seconds < 0) {
    return InvalidArgumentError("the kill grace period cannot be negative");
  }
  if (spec.max_log_bytes == 0) {
    return InvalidArgumentError("the job's logs must be allowed at least one byte");
  }
  if (geteuid() != 0 && spec.uid != geteuid()) {
    return PermissionDeniedError("the service runs as uid " + std::to_string(geteuid()) +
                                 " and can start jobs only as that user, not as uid " +
                                 std::to_string(spec.uid));
  }
  return OkStatus();
}

// Writes to a pipe whose reader may be gone without letting SIGPIPE end the service: the signal
// is blocked in this thread and, if the write raised it, taken back off the pending set.
ssize_t WriteWithoutSigpipe(int fd, const void* data, size_t len) {
  sigset_t pipe_set, previous, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &previous);
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t n;
  while ((n = write(fd, data, len)) < 0 && errno == EINTR) {
  }
  int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = err;
  return n;
}

// What Prepare has made so far, undone unless Commit() is called.
class PrepareUndo {
 public:
  ~PrepareUndo() {
    if (committed_) return;
    if (shim_ > 0) {
      kill(shim_, SIGKILL);
      while (waitpid(shim_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
    if (cgroup_) cgroup_->Remove();
  }
  void SetDir(const std::string& dir) { dir_ = dir; }
  void SetCgroup(const launch::WorkloadCgroup& cgroup) { cgroup_ = cgroup; }
  void SetShim(pid_t pid) { shim_ = pid; }
  pid_t shim() const { return shim_; }
  void Commit() { committed_ = true; }

 private:
  std::string dir_;
  std::optional<launch::WorkloadCgroup> cgroup_;
  pid_t shim_ = -1;
  bool committed_ = false;
};

// Step 1 of Prepare: JOB_DIR with the shim's spec (the job's command and environment), the
// read-only limit file and empty logs.
Status WriteJobDir(const LaunchSpec& spec, const std::string& limits_text,
                   const std::string& cgroup_dir, PrepareUndo* undo) {
  const std::string& dir = spec.job_dir;
  const std::string limit_file = dir + "/" + kLimitsFile;
  if (mkdir(dir.c_str(), 0711) != 0) {
    return ErrnoStatus("cannot create the job directory " + dir, errno);
  }
  undo->SetDir(dir);
  // 0711: the job's user reaches the limit file by name but cannot list or change the directory.
  if (chmod(dir.c_str(), 0711) != 0) {
    return ErrnoStatus("cannot set the mode of " + dir, errno);
  }
  std::vector<std::string> uuids;
  for (const launch::LimitedGpu& gpu : spec.gpus) uuids.push_back(gpu.uuid);
  nlohmann::json shim_spec = {
      {"command", spec.command},
      {"env", launch::WithWorkloadEnvironment(spec.env, {.limiter_path = spec.limiter_path,
                                                         .limit_file = limit_file,
                                                         .visible_uuids = uuids,
                                                         .extra = spec.extra_env})},
      {"cwd", spec.cwd},
      {"uid", spec.uid},
      {"gid", spec.gid},
      {"grace", spec.kill_grace_seconds},
      {"max_log_bytes", spec.max_log_bytes},
      {"cgroup", cgroup_dir},
  };
  // The spec holds the user's environment: only the service (and its shim) may read it.
  GPUFRAC_RETURN_IF_ERROR(
      launch::WriteNewFile(dir + "/" + kSpecFile, shim_spec.dump() + "\n", 0600));
  // Read-only for everyone: the limiter refuses a limit file its workload could rewrite.
  GPUFRAC_RETURN_IF_ERROR(launch::WriteNewFile(limit_file, limits_text, 0444));
  GPUFRAC_RETURN_IF_ERROR(launch::WriteNewFile(dir + "/" + JobRunner::kStdout, "", 0600));
  return launch::WriteNewFile(dir + "/" + JobRunner::kStderr, "", 0600);
}

// Step 3 of Prepare: forks and execs `shim_path JOB_DIR` with its go-ahead pipe on kGoAheadFd,
// /dev/null as stdin and stdout and the job's stderr log as stderr. Returns the write end of the
// go-ahead pipe; the shim's pid is handed to `undo` as soon as it exists.
StatusOr<UniqueFd> ForkShim(const std::string& shim_path, const std::string& dir,
                            PrepareUndo* undo) {
  // Everything the child needs is made before fork: the service is multi-threaded, so the child
  // may only make async-signal-safe calls until it execs.
  std::string shim_arg0 = shim_path, dir_arg = dir;
  char* argv[] = {shim_arg0.data(), dir_arg.data(), nullptr};
  char* envp[] = {nullptr};  // The shim needs none; the service's own must not leak into it.
  int err = 0;
  UniqueFd dev_null(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!dev_null.valid()) err = errno;
  // The shim's own complaints go where the user will look: the job's stderr log.
  UniqueFd err_log(open((dir + "/" + JobRunner::kStderr).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  if (err == 0 && !err_log.valid()) err = errno;
  int fds[4] = {-1, -1, -1, -1};  // the go-ahead pipe, then the exec report's
  if (err == 0 && pipe2(fds, O_CLOEXEC) != 0) err = errno;
  if (err == 0 && pipe2(fds + 2, O_CLOEXEC) != 0) err = errno;
  UniqueFd go_read(fds[0]), go_write(fds[1]), report_read(fds[2]), report_write(fds[3]);
  if (err != 0) return ErrnoStatus("cannot set up the job's supervisor", err);
  struct rlimit files {};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, 1 << 20))
                         : 65536;

  // No handler of the service may run in the child; the shim unblocks what it handles itself.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = fork();
  if (pid == 0) {
    // Copies above fd 10 first, so that placing them on 0..3 cannot overwrite one another.
    int in = fcntl(dev_null.get(), F_DUPFD, 10);
    int log = fcntl(err_log.get(), F_DUPFD, 10);
    int pipe_in = fcntl(go_read.get(), F_DUPFD, 10);
    int report = fcntl(report_write.get(), F_DUPFD_CLOEXEC, 10);
    if (in < 0 || log < 0 || pipe_in < 0 || report < 0 || dup2(in, 0) < 0 || dup2(in, 1) < 0 ||
        dup2(log, 2) < 0 || dup2(pipe_in, kGoAheadFd) < 0 || dup2(report, kGoAheadFd + 1) < 0 ||
        fcntl(kGoAheadFd + 1, F_SETFD, FD_CLOEXEC) < 0) {
      int err = errno;
      if (report >= 0) (void)!write(report, &err, sizeof(err));
      _exit(127);
    }
    // Nothing else of the service's (sockets, database, other shims' pipes) may stay open.
    if (close_range(kGoAheadFd + 2, ~0U, 0) != 0) {
      for (int fd = kGoAheadFd + 2; fd < max_fd; ++fd) close(fd);
    }
    execve(argv[0], argv, envp);
    int err = errno;
    (void)!write(kGoAheadFd + 1, &err, sizeof(err));
    _exit(127);
  }
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  dev_null.Reset();
  err_log.Reset();
  go_read.Reset();
  report_write.Reset();
  if (pid < 0) return ErrnoStatus("cannot fork the job's supervisor", fork_errno);
  undo->SetShim(pid);
  // The report pipe closes on a successful exec; otherwise it carries the child's errno.
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(report_read.get(), &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  if (n > 0) return ErrnoStatus("cannot run the job supervisor " + shim_path, exec_errno);
  return go_write;
}

}  // namespace

std::string Outcome::Describe() const {
  switch (kind) {
    case Kind::kExited:
      return "exit code " + std::to_string(code);
    case Kind::kSignaled: {
      const char* name = sigdescr_np(code);
      return "killed by signal " + std::to_string(code) +
             (name ? std::string(" (") + name + ")" : std::string());
    }
    case Kind::kNotStarted:
      return "never started";
    case Kind::kExecFailed:
      return std::string("could not start the command: ") + std::strerror(code);
  }
  return "unknown outcome";
}

JobRunner::JobRunner(std::string shim_path, launch::BudgetDir budgets)
    : shim_path_(std::move(shim_path)), budgets_(std::move(budgets)) {}

JobRunner::~JobRunner() = default;

StatusOr<proc::ProcessId> JobRunner::Prepare(const LaunchSpec& spec) {
  GPUFRAC_RETURN_IF_ERROR(Validate(spec));
  GPUFRAC_ASSIGN_OR_RETURN(std::string limits_text,
                           launch::LimitFileText(spec.workload, spec.gpus,
                                                 {.budget_dir = budgets_.path(),
                                                  .advisory = geteuid() != 0}));
  std::optional<launch::WorkloadBudgets> budgets;  // Undone after the supervisor is killed.
  PrepareUndo undo;
  // 1. Its cgroup, which the job joins before it runs: it cannot open the node's other GPUs,
  // and every process it starts can be killed. A service not running as root has none.
  std::string cgroup_dir;
  if (std::optional<launch::WorkloadCgroup::Kind> kind = launch::WorkloadCgroup::Available()) {
    GPUFRAC_ASSIGN_OR_RETURN(
        launch::WorkloadCgroup cgroup,
        launch::WorkloadCgroup::Create(*kind, spec.workload, spec.denied_devices));
    undo.SetCgroup(cgroup);
    cgroup_dir = cgroup.dir();
  }
  // 2. The job's directory.
  GPUFRAC_RETURN_IF_ERROR(WriteJobDir(spec, limits_text, cgroup_dir, &undo));
  // 3. Its budgets, handed to the job's user.
  std::optional<launch::WorkloadBudgets::Owner> owner;
  if (geteuid() == 0 && spec.uid != geteuid()) owner = {spec.uid, spec.gid};
  GPUFRAC_ASSIGN_OR_RETURN(budgets, launch::WorkloadBudgets::Create(budgets_, spec.workload,
                                                                    spec.gpus, owner, &budgets_));
  // 4. Its supervisor, waiting for the go-ahead.
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd go, ForkShim(shim_path_, spec.job_dir, &undo));
  proc::ProcessId ref;
  if (!proc::ReadProcessId(undo.shim(), &ref)) {
    return UnavailableError("the job's supervisor (pid " + std::to_string(undo.shim()) +
                            ") ended as soon as it started");
  }
  undo.Commit();
  budgets->Keep();  // Cleanup() removes them when the job has ended.
  go_pipes_[ref.pid] = std::move(go);
  return ref;
}

Status JobRunner::Release(const proc::ProcessId& shim) {
  auto it = go_pipes_.find(shim.pid);
  if (it == go_pipes_.end()) {
    return NotFoundError("no prepared job supervisor with pid " + std::to_string(shim.pid));
  }
  const UniqueFd fd = std::move(it->second);
  go_pipes_.erase(it);
  const char go = 'g';
  if (WriteWithoutSigpipe(fd.get(), &go, 1) != 1) {
    return ErrnoStatus("the job's supervisor (pid " + std::to_string(shim.pid) + ") is gone",
                       errno);
  }
  return OkStatus();
}

void JobRunner::Abandon(const proc::ProcessId& shim) {
  auto it = go_pipes_.find(shim.pid);
  if (it == go_pipes_.end()) return;
  go_pipes_.erase(it);
}

bool JobRunner::KillOrphanedJob(const std::string& job_dir) {
  std::ifstream in(job_dir + "/pid");
  long long pid = 0;
  unsigned long long start_ticks = 0;
  if (!(in >> pid >> start_ticks) || pid <= 0 || start_ticks == 0) return false;
  // Every live member of the job's process group, the leader or not (it may have died first).
  bool killed = false;
  for (pid_t member : proc::LiveGroupMembers(static_cast<pid_t>(pid), start_ticks)) {
    killed = kill(member, SIGKILL) == 0 || killed;
  }
  return killed;
}

void JobRunner::ReapChildren() {
  for (;;) {
    pid_t pid = waitpid(-1, nullptr, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    // A shim that died before its go-ahead: its pipe is of no more use.
    auto it = go_pipes_.find(pid);
    if (it != go_pipes_.end()) go_pipes_.erase(it);
  }
}

Status JobRunner::Signal(const proc::ProcessId& ref, int sig) {
  if (!proc::IsRunning(ref)) {
    return NotFoundError("the job's supervisor (pid " + std::to_string(ref.pid) +
                         ") is no longer running");
  }
  if (kill(ref.pid, sig) != 0) {
    int err = errno;
    std::string what = "cannot signal the job's supervisor (pid " + std::to_string(ref.pid) + ")";
    return ErrnoStatus(what, err);  // ESRCH: kNotFound, EPERM: kPermissionDenied
  }
  return OkStatus();
}

std::optional<Outcome> JobRunner::ReadOutcome(const std::string& job_dir) {
  std::string path = job_dir + "/" + kOutcome;
  const UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[128];
  size_t len = 0;
  ssize_t n;
  while (len < sizeof(buf) &&
         ((n = read(fd.get(), buf + len, sizeof(buf) - len)) > 0 || (n < 0 && errno == EINTR))) {
    if (n > 0) len += static_cast<size_t>(n);
  }
  // The shim writes one whole line; anything else is not (yet) an outcome.
  if (len == 0 || len == sizeof(buf) || buf[len - 1] != '\n') return std::nullopt;
  std::string line(buf, len - 1);
  if (line == "not-started") return Outcome{Outcome::Kind::kNotStarted, 0};
  size_t space = line.find(' ');
  if (space == std::string::npos) return std::nullopt;
  std::string word = line.substr(0, space), number = line.substr(space + 1);
  if (number.empty() || number.size() > 9 ||
      number.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  int code = std::stoi(number);
  if (word == "exited") return Outcome{Outcome::Kind::kExited, code};
  if (word == "signaled") return Outcome{Outcome::Kind::kSignaled, code};
  if (word == "exec-failed") return Outcome{Outcome::Kind::kExecFailed, code};
  return std::nullopt;
}

void JobRunner::Cleanup(const std::string& job_dir, const std::string& workload,
                        const std::vector<std::string>& uuids) const {
  unlink((job_dir + "/" + kLimitsFile).c_str());
  launch::WorkloadBudgets::Remove(budgets_, workload, uuids);
  // Whatever of the job is left, wherever it went (its supervisor kills it first, unless it
  // died).
  if (std::optional<launch::WorkloadCgroup> cgroup = launch::WorkloadCgroup::Find(workload)) {
    if (cgroup->KillAll(std::chrono::milliseconds(500))) cgroup->Remove();
  }
}

uint64_t JobRunner::ComputeTimeUsed(const std::string& workload, const std::string& uuid) const {
  return launch::WorkloadBudgets::ComputeTimeUsed(budgets_, workload, uuid);
}

bool JobRunner::HoldsComputeTurn(const std::string& workload, const std::string& uuid) const {
  return launch::WorkloadBudgets::HoldsComputeTurn(budgets_, workload, uuid);
}

uint64_t JobRunner::MemoryInUse(const std::string& workload, const std::string& uuid) const {
  return launch::WorkloadBudgets::MemoryInUse(budgets_, workload, uuid);
}

}  // namespace gpufrac::node
