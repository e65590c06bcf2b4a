// gpufrac-shim JOB_DIR: the supervisor of one job. Waits for the service's go-ahead on fd 3, runs
// the job as its user, relays its output into its logs, passes cancellation on to the job's
// process group, and records how the job ended in JOB_DIR/outcome (the protocol is described in
// job_runner.h).
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/posix.h"
#include "launch/cgroup.h"
#include "node/job_runner.h"
#include "node/output_relay.h"
#include "proc/process_group.h"
#include "proc/process_identity.h"

extern char** environ;

namespace gpufrac::node {
namespace {

constexpr int kGoAheadFd = 3;
// After the job's main process ends, how long the rest of its group may take to die.
constexpr int kGroupExitWaitMs = 10000;
// After the job is killed, how long its output may take to reach the logs. Only a process that
// escaped both the group and the cgroup (a non-root service has none) can hold a pipe open that
// long; what it writes later is not kept.
constexpr int kOutputDrainMs = 2000;

// What the runner wrote into JOB_DIR/spec.json (job_runner.cc).
struct ShimSpec {
  std::vector<std::string> command;
  std::vector<std::string> env;
  std::string cwd;
  uid_t uid = 0;
  gid_t gid = 0;
  int grace_seconds = 10;
  std::string cgroup;  // The job's cgroup directory; "" when it has none.
  // Kept bytes of output; a spec written before the cap existed has none and gets the default.
  uint64_t max_log_bytes = kDefaultMaxLogBytes;
};

std::string g_dir;
// JOB_DIR, opened once: if the service removes and recreates the directory for a new attempt,
// this shim's late writes land in the old one, never in the new attempt's.
int g_dir_fd = -1;

void Complain(const std::string& message) {
  std::fprintf(stderr, "gpufrac-shim: %s\n", message.c_str());
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Replaces JOB_DIR/name with `text` so that a reader sees the old file or the whole new one, and
// a crash right after leaves the new one on disk.
bool WriteAtomically(const std::string& name, const std::string& text) {
  std::string tmp = name + ".tmp";
  int fd =
      openat(g_dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = WriteAll(fd, text) && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || renameat(g_dir_fd, tmp.c_str(), g_dir_fd, name.c_str()) != 0) return false;
  return fsync(g_dir_fd) == 0;
}

// Records the outcome and exits. A write that fails (a full disk) is retried until it works: the
// shim stays alive meanwhile, so the service sees the job still running rather than ended
// without a word (which it would record as lost). It says so once, and again every 10 minutes.
[[noreturn]] void Finish(const std::string& outcome) {
  int wait_seconds = 1;
  for (int waited = 0;; waited += wait_seconds) {
    if (WriteAtomically(JobRunner::kOutcome, outcome + "\n")) std::exit(0);
    // The service removed the job's directory (a new attempt): nobody will read this outcome.
    struct stat dir;
    if (fstat(g_dir_fd, &dir) == 0 && dir.st_nlink == 0) std::exit(1);
    if (waited % 600 < wait_seconds) {
      Complain("cannot record the outcome '" + outcome + "' in " + g_dir + ": " +
               std::strerror(errno) + "; retrying until it can be written");
    }
    unlinkat(g_dir_fd, (std::string(JobRunner::kOutcome) + ".tmp").c_str(), 0);
    sleep(static_cast<unsigned>(wait_seconds));
    wait_seconds = std::min(wait_seconds * 2, 30);
  }
}

// Reads the spec; on failure returns an errno value for the "exec-failed" outcome.
int ReadSpec(ShimSpec* spec) {
  std::string path = g_dir + "/spec.json";
  std::ifstream in(path);
  if (!in) {
    int err = errno ? errno : EIO;
    Complain("cannot read " + path + ": " + std::strerror(err));
    return err;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto strings = [](const nlohmann::json& value, std::vector<std::string>* out) {
    if (!value.is_array()) return false;
    for (const nlohmann::json& item : value) {
      if (!item.is_string()) return false;
      out->push_back(item.get<std::string>());
    }
    return true;
  };
  bool ok = j.is_object() && j.contains("command") && strings(j["command"], &spec->command) &&
            !spec->command.empty() && j.contains("env") && strings(j["env"], &spec->env) &&
            j.contains("cwd") && j["cwd"].is_string() && j.contains("uid") &&
            j["uid"].is_number_unsigned() && j.contains("gid") && j["gid"].is_number_unsigned() &&
            j.contains("grace") && j["grace"].is_number_integer() &&
            (!j.contains("max_log_bytes") ||
             (j["max_log_bytes"].is_number_unsigned() && j["max_log_bytes"].get<uint64_t>() > 0));
  if (!ok) {
    Complain(path + " is not a job spec this gpufrac-shim understands");
    return EINVAL;
  }
  spec->cwd = j["cwd"].get<std::string>();
  spec->uid = j["uid"].get<uid_t>();
  spec->gid = j["gid"].get<gid_t>();
  spec->grace_seconds = j["grace"].get<int>();
  if (j.contains("cgroup") && j["cgroup"].is_string())
    spec->cgroup = j["cgroup"].get<std::string>();
  if (j.contains("max_log_bytes")) spec->max_log_bytes = j["max_log_bytes"].get<uint64_t>();
  return 0;
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Signals the job's process group; before the job has made its group (it calls setsid right
// after fork) only its main process exists, so that gets the signal instead.
void SignalJob(pid_t job, int sig) {
  if (kill(-job, sig) != 0 && errno == ESRCH) kill(job, sig);
}

// Whether a process of group `pgid` still runs (zombies hold nothing and do not count).
bool GroupHasLiveMember(pid_t pgid) {
  if (kill(-pgid, 0) != 0 && errno == ESRCH) return false;
  return !proc::LiveGroupMembers(pgid).empty();
}

struct Started {
  pid_t pid = -1;
  int error = 0;  // errno of the failed start when pid < 0.
};

// The job's stdout and stderr: pipes of `relay` into the job's logs. 0, or the errno.
int OpenJobOutput(const ShimSpec& spec, OutputRelay* relay, int* out, int* err) {
  auto open_log = [](const char* name) {
    return openat(g_dir_fd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  };
  UniqueFd out_log(open_log(JobRunner::kStdout));
  if (!out_log.valid()) return errno;
  UniqueFd err_log(open_log(JobRunner::kStderr));
  if (!err_log.valid()) return errno;
  // The job gets pipes, never the logs themselves: it could write past any cap through those.
  if (int error = relay->Open(out_log.Release(), err_log.Release(), spec.max_log_bytes);
      error != 0) {
    return error;
  }
  *out = relay->job_end(OutputRelay::kStdout);
  *err = relay->job_end(OutputRelay::kStderr);
  return 0;
}

// What the forked child needs to become the job, all made before the fork.
struct JobExec {
  const ShimSpec* spec = nullptr;
  int in = -1, out = -1, err = -1;  // its standard input, output and error
  int report = -1;                  // where the child writes the errno of a failed start
  bool root = false;
  std::string user;  // the job's user's name (as root), for its supplementary groups
  std::vector<std::string> cgroup_procs;  // the files that join its cgroup
  std::vector<char*> argv, envp;
};

[[noreturn]] void ReportFailure(int report, int e) {
  (void)!write(report, &e, sizeof(e));
  _exit(127);
}

// In the forked child: into its cgroup, session and user, then exec the command.
[[noreturn]] void BecomeJob(JobExec& x) {
  const ShimSpec& spec = *x.spec;
  // Into its cgroup first, while still root: everything it starts is born there.
  for (const std::string& procs : x.cgroup_procs) {
    char self[24];
    int n = std::snprintf(self, sizeof(self), "%d", static_cast<int>(getpid()));
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, self, static_cast<size_t>(n)) != n) ReportFailure(x.report, errno);
    close(fd);
  }
  // Its own session and process group: the group is what cancelling and clean-up signal.
  if (setsid() < 0) ReportFailure(x.report, errno);
  if (x.root) {
    // The user's supplementary groups, never root's.
    int rc = x.user.empty() ? setgroups(1, &spec.gid) : initgroups(x.user.c_str(), spec.gid);
    if (rc != 0 || setgid(spec.gid) != 0 || setuid(spec.uid) != 0) ReportFailure(x.report, errno);
    if (getuid() != spec.uid || geteuid() != spec.uid || getgid() != spec.gid ||
        getegid() != spec.gid) {
      ReportFailure(x.report, EPERM);
    }
  } else if (getuid() != spec.uid || geteuid() != spec.uid) {
    ReportFailure(x.report, EPERM);
  }
  if (chdir(spec.cwd.c_str()) != 0) ReportFailure(x.report, errno);
  if (dup2(x.in, 0) < 0 || dup2(x.out, 1) < 0 || dup2(x.err, 2) < 0) {
    ReportFailure(x.report, errno);
  }
  // The job starts as from a login: default dispositions and nothing blocked (the shim blocks
  // the signals it reads through its signalfd and ignores SIGPIPE).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // execvp searches the PATH of `environ`: the job's, not the shim's.
  environ = x.envp.data();
  execvp(x.argv[0], x.argv.data());
  ReportFailure(x.report, errno);
}

// In the shim, once `pid` is forked: whether its exec succeeded, as the child reported through
// the pipe's read end `report` (closed on exec, so an empty read is success).
Started AwaitExec(pid_t pid, UniqueFd report) {
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(report.get(), &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  report.Reset();
  if (n > 0) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return {-1, exec_errno};
  }
  return {pid, 0};
}

// Runs the job in its own session as its user, its stdout and stderr the pipes of `relay`. Only
// returns success once the command has been exec'd, so a failure is reported with its errno
// rather than as an exit code.
Started StartJob(const ShimSpec& spec, OutputRelay* relay) {
  JobExec x;
  x.spec = &spec;
  if (int error = OpenJobOutput(spec, relay, &x.out, &x.err); error != 0) return {-1, error};
  UniqueFd in(open("/dev/null", O_RDONLY | O_CLOEXEC));
  int report[2] = {-1, -1};
  if (!in.valid() || pipe2(report, O_CLOEXEC) != 0) return {-1, errno};
  UniqueFd report_read(report[0]), report_write(report[1]);
  x.in = in.get();
  x.report = report_write.get();
  x.root = geteuid() == 0;
  if (x.root) {
    if (const passwd* pw = getpwuid(spec.uid)) x.user = pw->pw_name;
  }
  for (const std::string& a : spec.command) x.argv.push_back(const_cast<char*>(a.c_str()));
  x.argv.push_back(nullptr);
  for (const std::string& e : spec.env) x.envp.push_back(const_cast<char*>(e.c_str()));
  x.envp.push_back(nullptr);
  if (!spec.cgroup.empty()) x.cgroup_procs = launch::WorkloadCgroup::At(spec.cgroup).ProcsFiles();

  pid_t pid = fork();
  if (pid == 0) BecomeJob(x);
  int fork_errno = errno;
  report_write.Reset();
  in.Reset();
  relay->CloseJobEnds();
  if (pid < 0) return {-1, fork_errno};
  return AwaitExec(pid, std::move(report_read));
}

// Reads one pending signal from the signalfd (0 if none).
int NextSignal(int sfd) {
  signalfd_siginfo info;
  ssize_t n = read(sfd, &info, sizeof(info));
  return n == static_cast<ssize_t>(sizeof(info)) ? static_cast<int>(info.ssi_signo) : 0;
}

bool IsCancel(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP; }

// Blocks until the go-ahead byte (true) or until the service gave up on the job: its end of
// the pipe closed, or a cancel signal came first (false).
bool WaitForGoAhead(int sfd) {
  for (;;) {
    struct pollfd fds[2] = {{kGoAheadFd, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    // The go-ahead wins over a cancel that arrived with it: the service recorded the job as
    // started, so the cancel is left pending for Supervise to pass on to the job.
    if (fds[0].revents) {
      char go;
      ssize_t n = read(kGoAheadFd, &go, 1);
      if (n < 0 && errno == EINTR) continue;
      return n == 1;
    }
    if (fds[1].revents & POLLIN) {
      for (int sig; (sig = NextSignal(sfd)) != 0;) {
        if (IsCancel(sig)) return false;
      }
    }
  }
}

// Waits for the job's main process to end, relaying its output and passing cancel signals on;
// returns its wait status. The main process is reaped only after the rest of its group is
// killed: until then its PID (and so its group's ID) cannot be reused by an unrelated process.
int Supervise(int sfd, pid_t job, int grace_seconds, OutputRelay* relay) {
  int64_t kill_at = -1;  // When SIGKILL follows a forwarded SIGTERM.
  bool killed = false;
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(job), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == job) {
      break;
    }
    // Checked on every turn: a job that keeps writing keeps poll from ever timing out.
    if (kill_at >= 0 && !killed && NowMs() >= kill_at) {
      SignalJob(job, SIGKILL);
      killed = true;
    }
    int timeout = -1;
    if (kill_at >= 0 && !killed)
      timeout = static_cast<int>(std::max<int64_t>(0, kill_at - NowMs()));
    std::vector<pollfd> fds = {{sfd, POLLIN, 0}};
    relay->AddPollFds(&fds);
    int ready = poll(fds.data(), fds.size(), timeout);
    if (ready < 0 && errno != EINTR) break;
    relay->Pump();
    for (int sig; (sig = NextSignal(sfd)) != 0;) {
      if (!IsCancel(sig)) continue;
      SignalJob(job, SIGTERM);
      if (kill_at < 0) kill_at = NowMs() + int64_t{grace_seconds} * 1000;
    }
  }
  // Whatever the job left behind must not keep using its GPU share.
  kill(-job, SIGKILL);
  int status = 0;
  while (waitpid(job, &status, 0) < 0 && errno == EINTR) {
  }
  for (int64_t deadline = NowMs() + kGroupExitWaitMs;
       GroupHasLiveMember(job) && NowMs() < deadline;) {
    kill(-job, SIGKILL);
    usleep(10000);
  }
  return status;
}

int Main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] != '/') {
    std::fprintf(stderr, "usage: gpufrac-shim /JOB_DIR (started by gpufracd, not by hand)\n");
    return 2;
  }
  g_dir = argv[1];
  g_dir_fd = open(g_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g_dir_fd < 0) {
    std::fprintf(stderr, "gpufrac-shim: cannot open %s: %s\n", g_dir.c_str(), std::strerror(errno));
    return 1;
  }
  if (fcntl(kGoAheadFd, F_GETFD) < 0) {
    Complain("no go-ahead pipe on fd 3 (gpufrac-shim is started by gpufracd, not by hand)");
    return 2;
  }
  // Keep no directory of the service's busy.
  if (chdir("/") != 0) Complain(std::string("cannot change to /: ") + std::strerror(errno));

  // The runner starts the shim with every signal blocked. The ones that matter are read through
  // a signalfd; SIGCHLD must not be ignored, or the job's status would be lost.
  sigset_t watched;
  sigemptyset(&watched);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&watched, sig);
  sigprocmask(SIG_SETMASK, &watched, nullptr);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) {
    Complain(std::string("cannot create a signalfd: ") + std::strerror(errno));
    return 1;
  }

  ShimSpec spec;
  int spec_error = ReadSpec(&spec);
  if (!WaitForGoAhead(sfd)) Finish("not-started");
  close(kGoAheadFd);
  // From here on the job is the shim's alone: leave the service's session, so that signals
  // meant for the service's terminal or group do not reach it.
  setsid();
  if (spec_error != 0) Finish("exec-failed " + std::to_string(spec_error));

  OutputRelay relay;
  Started job = StartJob(spec, &relay);
  if (job.pid < 0) {
    Complain("cannot run " + spec.command[0] + ": " + std::strerror(job.error));
    Finish("exec-failed " + std::to_string(job.error));
  }
  // With its start time, so that whoever reads it later can tell the job from a reused PID.
  proc::ProcessId ref;
  if (!proc::ReadProcessId(job.pid, &ref)) ref.start_ticks = 0;
  if (!WriteAtomically("pid",
                       std::to_string(job.pid) + " " + std::to_string(ref.start_ticks) + "\n")) {
    Complain("cannot record the job's pid in " + g_dir + ": " + std::strerror(errno));
  }
  int status = Supervise(sfd, job.pid, spec.grace_seconds, &relay);
  // And what left the job's session (setsid, daemons): all of its cgroup.
  if (!spec.cgroup.empty() && !launch::WorkloadCgroup::At(spec.cgroup)
                                   .KillAll(std::chrono::milliseconds(kGroupExitWaitMs))) {
    Complain("some of the job's processes in " + spec.cgroup + " would not die");
  }
  // Before the outcome: a client that stops reading the logs at the job's end misses nothing.
  relay.Finish(std::chrono::milliseconds(kOutputDrainMs));
  if (WIFSIGNALED(status)) Finish("signaled " + std::to_string(WTERMSIG(status)));
  Finish("exited " + std::to_string(WEXITSTATUS(status)));
}

}  // namespace
}  // namespace gpufrac::node

int main(int argc, char** argv) { return gpufrac::node::Main(argc, argv); }
