// `gpufrac exec`: validates the request against the GPU, writes a read-only limit file, creates the
// workload's shared budget, then runs the command with the limiter preloaded and only that GPU
// visible, and cleans up after it, passing its exit status through.
#include "cli/exec_command.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "common/status.h"
#include "common/units.h"
#include "gpu/devices.h"
#include "limiter/budget.h"
#include "limiter/limit_config.h"
#include "node/paths.h"

namespace gpufrac::cli {
namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "gpufrac exec: %s\n", message.c_str());
  return code;
}

std::string RandomSuffix() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

// Creates a private directory holding the limit file, which is written read-only.
StatusOr<std::string> WriteLimitFile(const limiter::LimitConfig& config, std::string* dir_out) {
  const char* base = getenv("XDG_RUNTIME_DIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/gpufrac-exec-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    return UnavailableError("cannot create a directory for the limit file under " + tmpl + ": " +
                            std::strerror(errno));
  }
  *dir_out = tmpl;
  std::string path = tmpl + "/limits";
  char text[limiter::kMaxLimitFileBytes];
  size_t len = limiter::FormatLimitConfig(config, text, sizeof(text));
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (len == 0 || fd < 0 || write(fd, text, len) != static_cast<ssize_t>(len)) {
    Status error =
        UnavailableError("cannot write limit file " + path + ": " + std::strerror(errno));
    if (fd >= 0) close(fd);
    unlink(path.c_str());
    rmdir(tmpl.c_str());
    return error;
  }
  close(fd);
  return path;
}

void PrependEnv(const char* name, const std::string& value, char sep) {
  const char* old = getenv(name);
  std::string v = value;
  if (old && *old) v += std::string(1, sep) + old;
  setenv(name, v.c_str(), 1);
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
int RunChild(const ExecOptions& o, const std::string& limiter, const std::string& limit_file,
             const std::string& uuid) {
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
    PrependEnv("LD_PRELOAD", limiter, ':');
    setenv("GPUFRAC_LIMIT_FILE", limit_file.c_str(), 1);
    setenv("CUDA_VISIBLE_DEVICES", uuid.c_str(), 1);
    if (o.quiet) setenv("GPUFRAC_QUIET", "1", 1);
    std::vector<char*> argv;
    for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    int err = errno;
    std::fprintf(stderr, "gpufrac exec: cannot run %s: %s\n", argv[0], std::strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  g_child = pid > 0 ? pid : 0;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) return Fail(kExitFailure, std::string("fork failed: ") + std::strerror(errno));
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
    return Fail(kExitFailure, std::string("lost track of the command: ") + std::strerror(errno));
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
  cmd->add_option("--gpu-memory", o.request.gpu_memory,
                  "Memory limit, binary units: 4G, 4GiB, 1536Mi, 4096M (bare number = bytes)");
  cmd->add_option("--gpu-fraction", o.request.gpu_fraction,
                  "Memory limit as a share of the GPU's memory, 0 < F < 1 (e.g. 0.25)");
  cmd->add_option("--gpus", o.request.gpus, "1: the whole GPU (exec runs on one GPU)");
  cmd->add_option("--mig-profile", o.request.mig_profile,
                  "Not served by exec (MIG slices need the node service)");
  cmd->add_option("--gpu-model", o.request.gpu_model,
                  "Refuse to run unless the GPU is this model (e.g. H100-80GB)");
  cmd->add_option("--gpu", o.gpu, "GPU index or UUID (default 0)");
  cmd->add_flag("--quiet", o.quiet, "Do not print a line when the command hits its limit");
  cmd->add_option("command", o.command, "The command and its arguments, after --");
  cmd->footer("Example: gpufrac exec --gpu-memory 4G -- python train.py");
  return cmd;
}

int RunExec(const ExecOptions& o) {
  StatusOr<GpuRequest> request = ParseGpuRequest(o.request);
  if (!request.ok()) return Fail(kExitBadInput, request.status().message());
  if (request->kind == GpuRequest::Kind::kMigProfile) {
    return Fail(kExitBadInput,
                "exec does not create MIG slices; run a command in an existing "
                "MIG instance with --gpu MIG-UUID, or use the node service");
  }
  if (request->kind == GpuRequest::Kind::kWholeGpus && request->gpus != 1) {
    return Fail(kExitBadInput, "exec runs a command on one GPU; write --gpus 1");
  }
  if (o.command.empty()) {
    return Fail(kExitBadInput,
                "missing the command to run, e.g. gpufrac exec --gpu-memory 4G -- python x.py");
  }
  auto devices = gpu::ListDevices();
  if (!devices.ok()) return Fail(kExitFailure, devices.status().message());
  auto device = gpu::FindDevice(*devices, o.gpu);
  if (!device.ok()) return Fail(kExitBadInput, "--gpu: " + device.status().message());

  if (!request->gpu_model.empty() &&
      !(device->model && device->model->short_name == request->gpu_model)) {
    return Fail(kExitBadInput, "GPU " + std::to_string(device->index) + " is " + device->name +
                                   ", not " + request->gpu_model);
  }
  uint64_t limit = device->memory_total;  // --gpus 1
  if (request->kind == GpuRequest::Kind::kMemory) limit = request->memory_bytes;
  if (request->kind == GpuRequest::Kind::kFraction) {
    limit = BytesOfShare(device->memory_total, request->fraction_milli);
  }
  if (limit > device->memory_total) {
    return Fail(kExitBadInput, FormatSize(limit) + " is more than GPU " +
                                   std::to_string(device->index) + " (" + device->name +
                                   ") has: " + FormatSize(device->memory_total));
  }
  uint64_t context = gpu::ContextChargeBytes(device->model);
  if (limit <= context) {
    return Fail(kExitBadInput, FormatSize(limit) + " cannot hold even the CUDA context on " +
                                   device->name + " (about " + FormatSize(context) +
                                   "); ask for more");
  }

  // An absolute path: the command may change directory before it loads CUDA.
  char resolved[PATH_MAX];
  const std::string wanted = node::LimiterLibraryPath();
  if (!realpath(wanted.c_str(), resolved) || access(resolved, R_OK) != 0) {
    return Fail(kExitFailure, "cannot find the limiter library " + wanted +
                                  " (build it, or point GPUFRAC_LIBRARY at libgpufrac.so)");
  }
  const std::string limiter_path = resolved;

  limiter::LimitConfig config{};
  std::snprintf(config.workload, sizeof(config.workload), "exec-%d-%s", static_cast<int>(getpid()),
                RandomSuffix().c_str());
  config.quiet = o.quiet;
  config.gpu_count = 1;
  limiter::GpuLimit& g = config.gpus[0];
  std::snprintf(g.uuid, sizeof(g.uuid), "%s", device->uuid.c_str());
  if (!limiter::ParseUuid(g.uuid, g.uuid_bytes)) {
    return Fail(kExitFailure, "the driver reported an unreadable UUID " + device->uuid);
  }
  g.limit_bytes = limit;
  g.context_bytes = context;

  std::string dir;
  auto file = WriteLimitFile(config, &dir);
  if (!file.ok()) return Fail(kExitFailure, file.status().message());
  char budget_name[160], err[400];
  limiter::BudgetName(config.workload, g.uuid, budget_name, sizeof(budget_name));
  limiter::Budget budget;
  int rc;
  if (!budget.Open(budget_name, limit, context, err, sizeof(err))) {
    rc = Fail(kExitFailure, err);
  } else {
    rc = RunChild(o, limiter_path, *file, device->uuid);
    limiter::Budget::Unlink(budget_name);
  }
  unlink(file->c_str());
  rmdir(dir.c_str());
  return PassThrough(rc);
}

}  // namespace gpufrac::cli
