// `gpufrac demo`: starts gpufracd on simulated GPUs in a temporary directory, submits a mixed
// workload with the same `gpufrac` commands a user would type (printing each), shows `status`
// while it runs and `ps` at the end, then stops the service and cleans up.
#include "cli/demo_command.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/service_client.h"
#include "common/paths.h"

namespace gpufrac::cli {
namespace {

constexpr const char kQueues[] = R"(version: 1
queues:                      # highest priority first
  - name: interactive
    default: {gpu-fraction: 0.25}
    quota: 0.5               # at most half of the node's GPU capacity
  - name: batch
    default: {gpus: 1}
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "gpufrac demo: %s\n", message.c_str());
  return 1;
}

// Runs `gpufrac ARGS...` (this very executable), echoing the command line first.
int Gpufrac(const std::string& socket, std::vector<std::string> args, bool echo = true) {
  if (echo) {
    std::string line = "$ gpufrac";
    for (const std::string& a : args) line += " " + a;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  pid_t pid = fork();
  if (pid == 0) {
    setenv("GPUFRAC_SOCKET", socket.c_str(), 1);
    std::string self = SiblingProgram("gpufrac");
    std::vector<char*> argv = {const_cast<char*>("gpufrac")};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(self.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// gpufracd on the simulated GPUs `sim`, its state and log in `dir`; its pid.
pid_t StartService(const std::string& dir, const std::string& socket, const std::string& sim) {
  pid_t daemon = fork();
  if (daemon == 0) {
    std::string log = dir + "/gpufracd.log";
    freopen(log.c_str(), "w", stderr);
    std::string exe = SiblingProgram("gpufracd");
    execl(exe.c_str(), "gpufracd", "--sim", sim.c_str(), "--state-dir", (dir + "/state").c_str(),
          "--socket", socket.c_str(), "--queues", (dir + "/queues.yaml").c_str(), "--kill-grace",
          "2", static_cast<char*>(nullptr));
    _exit(127);
  }
  return daemon;
}

// Whether the service answers on `socket` within 10 s; gives up early if it has exited.
bool WaitForService(const std::string& socket, pid_t daemon) {
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    up = ServiceClient::Connect(socket, /*autostart=*/false).ok();
    int status;
    if (!up && waitpid(daemon, &status, WNOHANG) == daemon) break;
  }
  return up;
}

// The last line the service wrote to its log in `dir`: why it did not start.
std::string LastLogLine(const std::string& dir) {
  std::ifstream log(dir + "/gpufracd.log");
  std::string line, last;
  while (std::getline(log, line)) last = line.empty() ? last : line;
  return last;
}

// Jobs of both queues and every kind of request: memory, fraction, a model, whole GPUs, MIG, and
// one ("greedy") that uses more memory than it asked for.
void SubmitWorkload(const std::string& socket, const std::string& probe) {
  const std::string g = "1073741824";  // 1 GiB, as cuda_probe takes bytes
  auto gib = [&](int n) { return std::to_string(static_cast<long long>(n) << 30); };
  std::printf(
      "\n== Submitting a mixed workload (cuda_probe work BYTES SECONDS holds GPU memory)\n");
  Gpufrac(socket, {"submit", "-q", "interactive", "--name", "notebook", "--gpu-memory", "20G", "--",
                   probe, "work", gib(16), "4"});
  Gpufrac(socket, {"submit", "-q", "interactive", "--name", "infer", "--gpu-fraction", "0.25", "--",
                   probe, "work", gib(10), "4"});
  Gpufrac(socket, {"submit", "-q", "interactive", "--name", "small-a30", "--gpu-memory", "10G",
                   "--gpu-model", "A30-24GB", "--", probe, "work", gib(8), "3"});
  Gpufrac(socket, {"submit", "-q", "batch", "--name", "train", "--gpus", "1", "--", probe, "work",
                   gib(60), "4"});
  Gpufrac(socket, {"submit", "-q", "batch", "--name", "greedy", "--gpu-memory", "8G", "--", probe,
                   "work", gib(12), "1"});
  Gpufrac(socket, {"submit", "-q", "batch", "--name", "two-gpus", "--gpus", "2", "--", probe,
                   "work", g, "2"});
  Gpufrac(socket, {"submit", "-q", "batch", "--name", "mig-slice", "--mig-profile", "2g.10gb", "--",
                   probe, "work", gib(8), "3"});
}

// Until the service has no active job (at most a minute), or cannot be reached.
void WaitForJobs(const std::string& socket) {
  for (int i = 0; i < 600; ++i) {
    auto client = ServiceClient::Connect(socket, false);
    if (!client.ok()) break;
    auto jobs = (*client)->Get("/v1/jobs?active=1");
    if (jobs.ok() && (*jobs)["jobs"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Stops the service (its jobs have ended) and removes its directory unless it is to be kept.
void StopService(pid_t daemon, const std::string& dir, bool keep) {
  kill(daemon, SIGTERM);
  waitpid(daemon, nullptr, 0);
  if (!keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

}  // namespace

CLI::App* AddDemoCommand(CLI::App& app, DemoOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "demo", "Show the node service at work on simulated GPUs (temporary; nothing to set up)");
  cmd->add_option("--sim", o.sim,
                  "Simulated GPUs (default 2xH100-80GB,1xA30-24GB,1xA100-40GB:mig)");
  cmd->add_flag("--keep", o.keep, "Keep the demo's directory (state, logs) afterwards");
  return cmd;
}

int RunDemo(const DemoOptions& o) {
  std::string probe = SiblingProgram("cuda_probe");
  if (access(probe.c_str(), X_OK) != 0) {
    return Fail("needs the test program cuda_probe next to gpufrac (" + probe +
                "); build the whole project with scripts/build.sh");
  }
  char tmpl[] = "/tmp/gpufrac-demo-XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("cannot create a temporary directory under /tmp");
  std::string dir = tmpl;
  std::string socket = dir + "/gpufracd.sock";
  std::ofstream(dir + "/queues.yaml") << kQueues;

  std::printf("== Starting gpufracd on simulated GPUs (%s) in %s\n", o.sim.c_str(), dir.c_str());
  std::fflush(stdout);
  const pid_t daemon = StartService(dir, socket, o.sim);
  if (!WaitForService(socket, daemon)) {
    const std::string last = LastLogLine(dir);
    kill(daemon, SIGKILL);
    waitpid(daemon, nullptr, 0);
    return Fail("gpufracd did not start: " + last);
  }
  std::printf(
      "   queues: interactive (default a quarter GPU, quota half the node), then batch\n\n");
  Gpufrac(socket, {"queues"});

  SubmitWorkload(socket, probe);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::printf(
      "\n== While they run: each GPU, the share and memory each job holds; the MIG GPU's"
      " slice map\n");
  Gpufrac(socket, {"status"});
  std::printf("\n");
  Gpufrac(socket, {"ps"});

  std::printf("\n== Waiting for every job to end\n");
  WaitForJobs(socket);
  Gpufrac(socket, {"ps"});
  std::printf(
      "\n== The job that went past its 8 GiB limit got a clean CUDA out-of-memory error:\n");
  Gpufrac(socket, {"logs", "5"});
  std::printf(
      "\n== Done. Try: gpufracd --sim 2xH100-80GB  and  gpufrac run --gpu-fraction 0.5 -- "
      "CMD (see docs/node-service.md)\n");
  StopService(daemon, dir, o.keep);
  return 0;
}

}  // namespace gpufrac::cli
