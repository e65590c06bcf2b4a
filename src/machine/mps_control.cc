// nvidia-cuda-mps-control run with a bounded wait (see mps_control.h).
#include "machine/mps_control.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/posix.h"

extern char** environ;

namespace gpufrac::machine {
namespace {

using Clock = std::chrono::steady_clock;

// waitid()'s P_PIDFD (Linux 5.4), which glibc 2.36's <sys/wait.h> does not name.
constexpr idtype_t kPidfdId = static_cast<idtype_t>(3);
// What a call keeps of the program's output: replies are lines, this is far more.
constexpr size_t kMaxOutput = size_t{1} << 20;

// An anonymous file holding `text`, read from its start: the program's standard input, or (empty)
// what it writes. A file, not a pipe: a daemon that keeps what it inherited holds no pipe open
// that its caller would wait on, nor one whose closed end would kill it when it writes.
StatusOr<UniqueFd> MemoryFile(const char* name, const std::string& text) {
  UniqueFd file(memfd_create(name, MFD_CLOEXEC));
  if (!file.valid()) return ErrnoStatus("cannot make a buffer for the MPS control program", errno);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(file.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("cannot write the MPS control commands", errno);
    done += static_cast<size_t>(n);
  }
  if (lseek(file.get(), 0, SEEK_SET) != 0) return ErrnoStatus("cannot rewind a buffer", errno);
  return file;
}

std::string ReadFrom(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0; text.size() < kMaxOutput;) {
    const ssize_t n = pread(fd, buf, sizeof(buf), at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

// `text` on one line, without trailing blanks, at most its last 300 bytes.
std::string OneLineTail(std::string text) {
  if (text.size() > 300) text = text.substr(text.size() - 300);
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// The program's environment: ours without CUDA_* and without what `set` replaces, then `set`.
std::vector<std::string> Environment(const std::vector<std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("CUDA_", 0) == 0) continue;
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const std::string& s : set) replaced = replaced || s.rfind(name, 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// What the supervisor (below) found, written at the start of its report file.
struct Report {
  enum Kind : int { kExited, kSignaled, kTimedOut, kNotStarted } kind = kNotStarted;
  int value = 0;  // The exit code, the signal, or the errno of the failed start.
};

// What the program's process needs, all made before it exists.
struct Spawn {
  char** argv;
  char** envp;
  int in, out, err, report;
  sigset_t mask;  // The caller's signal mask, which the program gets.
  std::chrono::milliseconds timeout;
};

// (In ns: counted in whole milliseconds, the program was killed up to 1 ms before its timeout.)
int64_t MonotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// The supervisor: a child of the caller that starts the program as its own child, waits for it
// at most the timeout (killing it then) and reports how it ended. The program cannot be the
// caller's child: an exec makes a child visible to a process-wide waitpid(-1) (gpufracd's job
// runner reaps that way), which would take its exit status first; the supervisor does not
// exec, and a child that never execs and has no exit signal stays invisible to it. This runs in
// a copy of a multi-threaded process made without fork()'s locks: system calls only.
[[noreturn]] void Supervise(const Spawn& s) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action;
    if (sigaction(sig, nullptr, &action) != 0) continue;
    // A caught signal would run the caller's handler in the program before it execs; an ignored
    // SIGCHLD would have the program reaped before it is waited for.
    const bool caught = action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN;
    if (caught || sig == SIGCHLD) sigaction(sig, &default_action, nullptr);
  }
  Report report;
  const long program = syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (program == 0) {
    // It ends with its supervisor, should that be killed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigprocmask(SIG_SETMASK, &s.mask, nullptr);
    if (dup2(s.in, STDIN_FILENO) < 0 || dup2(s.out, STDOUT_FILENO) < 0 ||
        dup2(s.err, STDERR_FILENO) < 0) {
      _exit(126);
    }
    // A daemon keeps what it inherits: none of the caller's descriptors.
    syscall(SYS_close_range, 3u, ~0u, 0u);
    execve(s.argv[0], s.argv, s.envp);
    _exit(127);
  }
  if (program < 0) {
    report.value = errno;
  } else {
    // SIGCHLD is blocked (as every signal here): sigtimedwait takes it when the program ends.
    sigset_t child_set;
    sigemptyset(&child_set);
    sigaddset(&child_set, SIGCHLD);
    const int64_t deadline = MonotonicNs() + s.timeout.count() * 1'000'000;
    for (;;) {
      int status = 0;
      if (waitpid(static_cast<pid_t>(program), &status, WNOHANG) == program) {
        report.kind = WIFEXITED(status) ? Report::kExited : Report::kSignaled;
        report.value = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
        break;
      }
      const int64_t left = deadline - MonotonicNs();
      if (left <= 0) {
        kill(static_cast<pid_t>(program), SIGKILL);
        waitpid(static_cast<pid_t>(program), &status, 0);
        report.kind = Report::kTimedOut;
        break;
      }
      const timespec wait{.tv_sec = left / 1'000'000'000, .tv_nsec = left % 1'000'000'000};
      sigtimedwait(&child_set, nullptr, &wait);
    }
  }
  (void)!pwrite(s.report, &report, sizeof(report), 0);
  _exit(0);
}

// The control program's argv and envp, with the strings they point into.
struct CommandLine {
  std::vector<std::string> arg_text;
  std::vector<std::string> env_text;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

CommandLine MakeCommandLine(const MpsControlOptions& options,
                            const std::vector<std::string>& args) {
  std::vector<std::string> set = options.env;
  if (!options.pipe_dir.empty()) set.push_back("CUDA_MPS_PIPE_DIRECTORY=" + options.pipe_dir);
  if (!options.log_dir.empty()) set.push_back("CUDA_MPS_LOG_DIRECTORY=" + options.log_dir);
  if (!options.visible_devices.empty()) {
    set.push_back("CUDA_VISIBLE_DEVICES=" + options.visible_devices);
  }
  CommandLine line;
  line.env_text = Environment(set);
  for (std::string& e : line.env_text) line.envp.push_back(e.data());
  line.envp.push_back(nullptr);
  line.arg_text = {options.control};
  line.arg_text.insert(line.arg_text.end(), args.begin(), args.end());
  for (std::string& a : line.arg_text) line.argv.push_back(a.data());
  line.argv.push_back(nullptr);
  return line;
}

// Waits up to `limit` for the supervisor `pidfd` names to end (killing it past that) and reaps
// it.
void AwaitSupervisor(int pidfd, std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{pidfd, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    // (glibc 2.36's <sys/pidfd.h> declares its wrappers without C linkage: the system call.)
    if (ready <= 0) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0u);
    break;
  }
  siginfo_t info{};
  while (waitid(kPidfdId, static_cast<id_t>(pidfd), &info, WEXITED | __WALL) != 0 &&
         errno == EINTR) {
  }
}

// What the supervisor's `report` says of the control program; `stderr_fd`: what it printed
// there.
Status Outcome(const MpsControlOptions& options, const Report& report, int stderr_fd) {
  switch (report.kind) {
    case Report::kTimedOut:
      return UnavailableError(options.control + " did not answer within " +
                              std::to_string(options.timeout.count()) + " ms");
    case Report::kNotStarted:
      return ErrnoStatus("cannot start " + options.control, report.value);
    case Report::kExited:
      if (report.value == 0) break;
      [[fallthrough]];
    case Report::kSignaled: {
      const std::string err = OneLineTail(ReadFrom(stderr_fd));
      return UnavailableError(options.control + " failed (" +
                              (report.kind == Report::kExited ? "exit code " : "signal ") +
                              std::to_string(report.value) + ")" + (err.empty() ? "" : ": " + err));
    }
  }
  return OkStatus();
}

// Runs the control program with `args`, `input` on its standard input, and waits for it up to
// the timeout; what it printed in `out`.
Status Run(const MpsControlOptions& options, const std::vector<std::string>& args,
           const std::string& input, std::string* out) {
  CommandLine line = MakeCommandLine(options, args);
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd in, MemoryFile("mps-control-in", input));
  // With no output wanted (-d), stdout is /dev/null: a daemon may keep what it inherited and
  // write there for as long as it runs.
  UniqueFd stdout_file;
  if (out != nullptr) {
    GPUFRAC_ASSIGN_OR_RETURN(stdout_file, MemoryFile("mps-control-out", ""));
  } else {
    stdout_file.Reset(open("/dev/null", O_WRONLY | O_CLOEXEC));
    if (!stdout_file.valid()) return ErrnoStatus("cannot open /dev/null", errno);
  }
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd stderr_file, MemoryFile("mps-control-err", ""));
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd report_file, MemoryFile("mps-control-report", ""));
  Spawn spawn{.argv = line.argv.data(),
              .envp = line.envp.data(),
              .in = in.get(),
              .out = stdout_file.get(),
              .err = stderr_file.get(),
              .report = report_file.get(),
              .mask = {},
              .timeout = options.timeout};

  // No handler of the caller's may run in the children.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &spawn.mask);
  // No exit signal (the flags' low byte is 0): see Supervise. Its pidfd names it until it is
  // reaped below, so that no kill can reach a process that reused its pid.
  int pidfd = -1;
  const long pid = syscall(SYS_clone, CLONE_PIDFD, nullptr, &pidfd, nullptr, nullptr);
  if (pid == 0) Supervise(spawn);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &spawn.mask, nullptr);
  if (pid < 0) return ErrnoStatus("cannot start " + options.control, clone_errno);
  UniqueFd supervisor(pidfd);
  // It reports within the timeout; the margin is for a machine too loaded to run it.
  AwaitSupervisor(supervisor.get(), options.timeout + std::chrono::seconds(5));
  Report report;
  report.kind = Report::kTimedOut;  // Unless it says otherwise: killed above.
  (void)!pread(report_file.get(), &report, sizeof(report), 0);
  GPUFRAC_RETURN_IF_ERROR(Outcome(options, report, stderr_file.get()));
  if (out != nullptr) *out = ReadFrom(stdout_file.get());
  return OkStatus();
}

}  // namespace

Status StartMpsControlDaemon(const MpsControlOptions& options) {
  return Run(options, {"-d"}, "", nullptr);
}

StatusOr<std::string> SendMpsControlCommands(const MpsControlOptions& options,
                                             const std::string& commands) {
  std::string reply;
  GPUFRAC_RETURN_IF_ERROR(Run(options, {}, commands, &reply));
  return reply;
}

}  // namespace gpufrac::machine
