// nvidia-cuda-mps-control run with a bounded wait (see mps_control.h).
#include "machine/mps_control.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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

// Runs the control program with `args`, `input` on its standard input, and waits for it up to
// the timeout; what it printed in `out`.
Status Run(const MpsControlOptions& options, const std::vector<std::string>& args,
           const std::string& input, std::string* out) {
  std::vector<std::string> set = options.env;
  if (!options.pipe_dir.empty()) set.push_back("CUDA_MPS_PIPE_DIRECTORY=" + options.pipe_dir);
  if (!options.log_dir.empty()) set.push_back("CUDA_MPS_LOG_DIRECTORY=" + options.log_dir);
  if (!options.visible_devices.empty()) {
    set.push_back("CUDA_VISIBLE_DEVICES=" + options.visible_devices);
  }
  // Everything the child needs is made before it exists: it only dups, execs and exits.
  std::vector<std::string> env_text = Environment(set);
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_text = {options.control};
  arg_text.insert(arg_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : arg_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd in, MemoryFile("mps-control-in", input));
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd stdout_file, MemoryFile("mps-control-out", ""));
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd stderr_file, MemoryFile("mps-control-err", ""));

  // No handler of the caller's may run in the child before it execs.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  // A child with no exit signal (the flags' low byte is 0) is a "clone" child: a process-wide
  // reaper (gpufracd's job runner calls waitpid(-1)) does not take its exit status, which only
  // the waitid() below asks for. Its pidfd names it until then, so that no kill can reach a
  // process that reused its pid.
  int pidfd = -1;
  const long pid = syscall(SYS_clone, CLONE_PIDFD, nullptr, &pidfd, nullptr, nullptr);
  if (pid == 0) {
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction action;
      if (sigaction(sig, nullptr, &action) == 0 && action.sa_handler != SIG_IGN &&
          action.sa_handler != SIG_DFL) {
        action.sa_handler = SIG_DFL;
        sigaction(sig, &action, nullptr);
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    if (dup2(in.get(), STDIN_FILENO) < 0 || dup2(stdout_file.get(), STDOUT_FILENO) < 0 ||
        dup2(stderr_file.get(), STDERR_FILENO) < 0) {
      _exit(126);
    }
    // A daemon keeps what it inherits: none of the caller's descriptors.
    syscall(SYS_close_range, 3u, ~0u, 0u);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) return ErrnoStatus("cannot start " + options.control, clone_errno);
  UniqueFd child(pidfd);

  const Clock::time_point deadline = Clock::now() + options.timeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{child.get(), POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready > 0) break;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) timed_out = true;
    // (glibc 2.36's <sys/pidfd.h> declares its wrappers without C linkage: the system call.)
    syscall(SYS_pidfd_send_signal, child.get(), SIGKILL, nullptr, 0u);
    break;
  }
  siginfo_t info{};
  while (waitid(kPidfdId, static_cast<id_t>(child.get()), &info, WEXITED | __WALL) != 0 &&
         errno == EINTR) {
  }
  if (timed_out) {
    return UnavailableError(options.control + " did not answer within " +
                            std::to_string(options.timeout.count()) + " ms");
  }
  if (info.si_code != CLD_EXITED || info.si_status != 0) {
    const std::string err = OneLineTail(ReadFrom(stderr_file.get()));
    return UnavailableError(options.control + " failed (" +
                            (info.si_code == CLD_EXITED ? "exit code " : "signal ") +
                            std::to_string(info.si_status) + ")" + (err.empty() ? "" : ": " + err));
  }
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
