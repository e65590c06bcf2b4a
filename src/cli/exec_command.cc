// `gpufrac exec`: validates the request against the GPU, writes a read-only limit file, creates the
// workload's shared budget, then runs the command with the limiter preloaded and only that GPU
// visible, and cleans up after it, passing its exit status through. On a share of a GPU the
// command takes turns on the GPU's time with the user's other exec commands there, through
// compute arbiters in a directory the user's exec commands share.
#include "cli/exec_command.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/request_flags.h"
#include "common/paths.h"
#include "common/posix.h"
#include "common/status.h"
#include "common/units.h"
#include "gpu/devices.h"
#include "launch/budgets.h"
#include "launch/environment.h"
#include "launch/grant_limits.h"
#include "launch/limit_file.h"
#include "placement/gpu_share.h"

namespace gpufrac::cli {
namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "gpufrac exec: %s\n", message.c_str());
  return code;
}

// Where the user's exec commands keep their compute arbiters: one directory under /dev/shm per
// user (random name, mode 0700), named by a record in the user's state directory
// ($XDG_STATE_HOME/gpufrac, else ~/.local/state/gpufrac). Commands of the same user on a GPU
// share its arbiter there; other users cannot open it.
StatusOr<launch::BudgetDir> UserArbiterDir() {
  std::string state;
  if (const char* xdg = getenv("XDG_STATE_HOME"); xdg != nullptr && xdg[0] == '/') {
    state = std::string(xdg) + "/gpufrac";
  } else if (const char* home = getenv("HOME"); home != nullptr && home[0] == '/') {
    state = std::string(home) + "/.local/state/gpufrac";
  } else {
    return FailedPreconditionError("neither HOME nor XDG_STATE_HOME is an absolute directory");
  }
  std::error_code ec;
  std::filesystem::create_directories(state, ec);
  if (ec) return UnavailableError("cannot create " + state + ": " + ec.message());
  // Two commands starting at once must not make two directories.
  const std::string lock_path = state + "/exec-arbiters.lock";
  UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.valid() || flock(lock.get(), LOCK_EX) != 0) {
    return ErrnoStatus("cannot lock " + lock_path, errno);
  }
  return launch::BudgetDir::ForService(state + "/exec-arbiters", 0700);
}

std::string RandomSuffix() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

// Creates a private directory holding the limit file `text`, which is written read-only.
StatusOr<std::string> WriteLimitFile(const std::string& text, std::string* dir_out) {
  const char* base = getenv("XDG_RUNTIME_DIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/gpufrac-exec-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    return ErrnoStatus("cannot create a directory for the limit file under " + tmpl, errno);
  }
  std::string path = tmpl + "/limits";
  Status written = launch::WriteNewFile(path, text, 0444);
  if (!written.ok()) {
    rmdir(tmpl.c_str());
    return written;
  }
  *dir_out = tmpl;
  return path;
}

volatile sig_atomic_t g_child = 0;

// Signals meant for gpufrac go to the child, which decides; gpufrac stays to clean up. Ctrl-C and
// Ctrl-\ from the terminal already reach the child (same process group), so only those sent
// with kill(2) are passed on.
void Forward(int sig, siginfo_t* info, void*) {
  if (g_child <= 0) return;
  bool from_terminal = (sig == SIGINT || sig == SIGQUIT) && info->si_code == SI_KERNEL;
  if (!from_terminal) kill(g_child, sig);
}

constexpr int kForwarded[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};

// Runs the command with the limiter's environment and waits for it. Returns its exit status, or
// the negated signal number that ended it.
int RunChild(const ExecOptions& o, const std::vector<std::string>& env) {
  // Everything the child needs is made before the fork.
  std::vector<char*> argv, envp;
  for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Handlers go in before the fork, with the signals blocked across it, so that no signal can
  // end gpufrac between starting the child and being ready to clean up after it.
  sigset_t block, previous;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  sigprocmask(SIG_BLOCK, &block, &previous);
  struct sigaction forward {
  }, saved[4];
  forward.sa_sigaction = Forward;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  for (int i = 0; i < 4; ++i) sigaction(kForwarded[i], &forward, &saved[i]);
  // An inherited "ignore SIGCHLD" would make the child unwaitable and its status unknown.
  struct sigaction child_default {
  }, saved_child;
  child_default.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &child_default, &saved_child);
  pid_t pid = fork();
  if (pid == 0) {
    sigaction(SIGCHLD, &saved_child, nullptr);
    for (int i = 0; i < 4; ++i) sigaction(kForwarded[i], &saved[i], nullptr);
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    // PATH is searched in gpufrac's own environment, which the command's shares.
    execvpe(argv[0], argv.data(), envp.data());
    // No Status here: between fork and _exit nothing is allocated (another thread may have held
    // the allocator's lock at the fork). %m is the system's text for errno.
    const int err = errno;
    std::fprintf(stderr, "gpufrac exec: cannot run %s: %m\n", argv[0]);
    _exit(err == ENOENT ? 127 : 126);
  }
  g_child = pid > 0 ? pid : 0;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) return Fail(kExitFailure, ErrnoStatus("fork failed", errno).message());
  // Once the child is gone its PID may be reused: stop forwarding before reaping it. The
  // handlers stay until gpufrac has cleaned up (PassThrough restores the defaults).
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  sigprocmask(SIG_BLOCK, &block, nullptr);
  g_child = 0;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  int status = 0;
  pid_t reaped;
  while ((reaped = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (reaped != pid) {
    return Fail(kExitFailure, ErrnoStatus("lost track of the command", errno).message());
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return kExitFailure;
}

// Ends gpufrac the way the command ended: its exit status, or the same signal (so that a shell
// sees 128+N and, for Ctrl-C, stops a loop of gpufrac runs as it would for the command itself).
int PassThrough(int child_status) {
  for (int sig : kForwarded) signal(sig, SIG_DFL);
  if (child_status >= 0) return child_status;
  int sig = -child_status;
  // The command's crash is not gpufrac's: no core file or crash report from us.
  prctl(PR_SET_DUMPABLE, 0);
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  raise(sig);
  return 128 + sig;  // for signals whose default is not to terminate
}

}  // namespace

CLI::App* AddExecCommand(CLI::App& app, ExecOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "exec", "Run a command under a GPU memory limit on one GPU (no service needed)");
  AddGpuRequestFlags(cmd, &o.request);
  cmd->add_option("--gpu", o.gpu, "GPU index or UUID (default 0)");
  cmd->add_flag("--quiet", o.quiet, "Do not print a line when the command hits its limit");
  cmd->add_option("command", o.command, "The command and its arguments, after --");
  cmd->footer(
      "exec runs the command on one GPU (--gpus 1 is all of it) and refuses to run on another\n"
      "model than --gpu-model; MIG profiles need the node service. On a share of a GPU, the\n"
      "command takes turns on the GPU's time with your other exec commands there: it gets its\n"
      "--gpu-compute (default: its memory's share) when they compete, and up to\n"
      "--gpu-compute-limit (default 1) when they are idle.\n"
      "Example: gpufrac exec --gpu-memory 4G -- python train.py");
  return cmd;
}

namespace {

// RunExec's steps. Each returns 0 to go on, or the exit code once it has said what is wrong.

// What exec can run: a share of one GPU, or one whole GPU, and a command.
int CheckRequest(const ExecOptions& o, const GpuRequest& request) {
  if (request.kind == GpuRequest::Kind::kMigProfile) {
    return Fail(kExitBadInput,
                "exec does not create MIG slices; run a command in an existing "
                "MIG instance with --gpu MIG-UUID, or use the node service");
  }
  if (request.kind == GpuRequest::Kind::kWholeGpus && request.gpus != 1) {
    return Fail(kExitBadInput, "exec runs a command on one GPU; write --gpus 1");
  }
  if (o.command.empty()) {
    return Fail(kExitBadInput,
                "missing the command to run, e.g. gpufrac exec --gpu-memory 4G -- python x.py");
  }
  if (geteuid() != 0 && launch::SystemServiceRunsGpus()) {
    return Fail(kExitFailure,
                "gpufrac's system service runs this machine's GPUs, and a limit set by exec "
                "would be your own to change: use gpufrac run instead");
  }
  return 0;
}

// The GPU --gpu names, if it is the model the request asks for.
int ChooseDevice(const ExecOptions& o, const GpuRequest& request, gpu::DeviceInfo* device) {
  auto devices = gpu::ListDevices();
  if (!devices.ok()) return Fail(kExitFailure, devices.status().message());
  auto found = gpu::FindDevice(*devices, o.gpu);
  if (!found.ok()) return Fail(kExitBadInput, "--gpu: " + found.status().message());
  if (!request.gpu_model.empty() &&
      !(found->model && found->model->short_name == request.gpu_model)) {
    return Fail(kExitBadInput, "GPU " + std::to_string(found->index) + " is " + found->name +
                                   ", not " + request.gpu_model);
  }
  *device = std::move(*found);
  return 0;
}

// The command's limits on `device`: its memory and, on a share of the GPU, its time too (see
// LimitsOnOneGpu), arbitrated with the user's other exec commands there through `arbiters`.
int LimitOnDevice(const GpuRequest& request, const gpu::DeviceInfo& device,
                  launch::LimitedGpu* limited, std::optional<launch::BudgetDir>* arbiters) {
  const uint64_t context = gpu::ContextChargeBytes(device.model);
  StatusOr<placement::OneGpuLimits> limits =
      placement::LimitsOnOneGpu(request, device.memory_total, context,
                                "GPU " + std::to_string(device.index) + " (" + device.name + ")");
  if (!limits.ok()) return Fail(kExitBadInput, limits.status().message());
  const bool asked_compute = request.compute_milli || request.compute_limit_milli;
  // From the grant, by the step every launcher takes (no MPS: exec runs no MPS client).
  const launch::GpuGrant grant{.index = static_cast<int>(device.index),
                               .uuid = device.uuid,
                               .milli = limits->share_milli,
                               .memory_bytes = limits->memory_bytes,
                               .compute = limits->compute};
  StatusOr<launch::GrantLimits> granted = launch::LimitsOfGrants(
      {grant}, [context](int) { return context; }, [](int) { return false; }, "the command");
  if (!granted.ok()) return Fail(kExitFailure, granted.status().message());
  *limited = granted->gpus.at(0);
  if (limited->compute) {
    StatusOr<launch::BudgetDir> dir = UserArbiterDir();
    Status made = dir.ok() ? launch::EnsureComputeArbiter(*dir, device.uuid) : dir.status();
    if (made.ok()) {
      *arbiters = std::move(*dir);
    } else if (asked_compute) {
      return Fail(kExitFailure, "cannot share the GPU's time: " + made.message());
    } else {
      // Its memory is still limited; its time is what the GPU gives every process.
      std::fprintf(stderr, "gpufrac exec: %s; the command's GPU time is not arbitrated\n",
                   made.message().c_str());
      limited->compute = std::nullopt;
    }
  }
  return 0;
}

// An absolute path: the command may change directory before it loads CUDA.
int FindLimiter(std::string* limiter_path) {
  char resolved[PATH_MAX];
  const std::string wanted = LimiterLibraryPath();
  if (!realpath(wanted.c_str(), resolved) || access(resolved, R_OK) != 0) {
    return Fail(kExitFailure, "cannot find the limiter library " + wanted +
                                  " (build it, or point GPUFRAC_LIBRARY at libgpufrac.so)");
  }
  *limiter_path = resolved;
  return 0;
}

// Writes the command's limit file and budget, runs it under the limiter, and removes both after
// it; the command's exit status, passed through.
int RunLimited(const ExecOptions& o, const launch::LimitedGpu& limited,
               const std::optional<launch::BudgetDir>& arbiters, const std::string& limiter_path) {
  char workload[64];
  std::snprintf(workload, sizeof(workload), "exec-%d-%s", static_cast<int>(getpid()),
                RandomSuffix().c_str());
  // The budget goes in a directory of this command's own, not by a guessable name in /dev/shm;
  // the arbiter (LimitOnDevice) is in the one the user's commands share.
  auto budget_dir = launch::BudgetDir::Make(0700);
  if (!budget_dir.ok()) return Fail(kExitFailure, budget_dir.status().message());
  auto text = launch::LimitFileText(workload, {limited},
                                    {.budget_dir = budget_dir->path(),
                                     .arbiter_dir = arbiters ? arbiters->path() : "",
                                     .quiet = o.quiet,
                                     .advisory = geteuid() != 0});
  if (!text.ok()) {
    budget_dir->RemoveAll();
    return Fail(kExitFailure, text.status().message());
  }
  std::string dir;
  auto file = WriteLimitFile(*text, &dir);
  if (!file.ok()) {
    budget_dir->RemoveAll();
    return Fail(kExitFailure, file.status().message());
  }
  int rc;
  {
    // Its arbiter is in the directory the user's commands share (LimitOnDevice).
    auto budgets =
        launch::WorkloadBudgets::Create(*budget_dir, workload, {limited}, std::nullopt, nullptr);
    if (!budgets.ok()) {
      rc = Fail(kExitFailure, budgets.status().message());
    } else {
      std::vector<std::string> extra;
      if (o.quiet) extra.push_back("GPUFRAC_QUIET=1");
      rc = RunChild(o, launch::WithWorkloadEnvironment(launch::CurrentEnvironment(),
                                                       {.limiter_path = limiter_path,
                                                        .limit_file = *file,
                                                        .visible_uuids = {limited.uuid},
                                                        .extra = extra}));
    }
  }  // The budget goes with the command.
  budget_dir->RemoveAll();
  unlink(file->c_str());
  rmdir(dir.c_str());
  return PassThrough(rc);
}

}  // namespace

int RunExec(const ExecOptions& o) {
  StatusOr<GpuRequest> request = ParseGpuRequest(o.request);
  if (!request.ok()) return Fail(kExitBadInput, request.status().message());
  if (int rc = CheckRequest(o, *request); rc != 0) return rc;
  gpu::DeviceInfo device;
  if (int rc = ChooseDevice(o, *request, &device); rc != 0) return rc;
  launch::LimitedGpu limited;
  std::optional<launch::BudgetDir> arbiters;
  if (int rc = LimitOnDevice(*request, device, &limited, &arbiters); rc != 0) return rc;
  std::string limiter_path;
  if (int rc = FindLimiter(&limiter_path); rc != 0) return rc;
  return RunLimited(o, limited, arbiters, limiter_path);
}

}  // namespace gpufrac::cli
