// gpufracd, the node service: discovers the GPUs (or simulates them with --sim), recovers its
// state, and serves the API on a unix socket (and optionally TCP with a bearer token) until
// SIGTERM or SIGINT. Jobs keep running when it stops; the next gpufracd re-adopts them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include "CLI/CLI.hpp"
#include "common/log.h"
#include "common/paths.h"
#include "common/posix.h"
#include "common/text.h"
#include "common/units.h"
#include "machine/mps_daemons.h"
#include "mig/nvml_backend.h"
#include "node/api.h"
#include "node/http_server.h"
#include "node/paths.h"
#include "node/queue_config.h"
#include "node/service.h"
#include "placement/policies.h"

namespace {

using namespace gpufrac;
using namespace gpufrac::node;

struct Flags {
  std::string state_dir;
  std::string socket;
  std::string socket_group;
  std::string listen;
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  bool insecure_listen = false;
  size_t max_pending_per_user = 1000;
  std::string max_pending_bytes_per_user = "64M";
  std::string max_job_bytes = "256K";
  std::string max_log_bytes = "1G";
  std::string tcp_users = "1000-60000";
  std::string tcp_group;
  std::string queues;
  std::string sim;
  std::string admin_group;
  std::string policy = std::string(placement::kDefaultPolicy);
  std::vector<int> whole_gpus;
  std::vector<int> mps_gpus;
  std::string mps_control;
  double starvation_seconds = 600;
  int kill_grace_seconds = 10;
  std::string compute_policy = "fair";
  bool compute_enforce = false;
  bool verbose = false;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "gpufracd: %s\n", message.c_str());
  return 1;
}

StatusOr<gid_t> GroupId(const std::string& name, const char* flag) {
  struct group gr, *found = nullptr;
  char buf[8192];
  if (getgrnam_r(name.c_str(), &gr, buf, sizeof(buf), &found) != 0 || !found) {
    return InvalidArgumentError(std::string(flag) + ": no group called " + name);
  }
  return found->gr_gid;
}

StatusOr<std::string> Absolute(const std::string& path, const std::string& what) {
  char resolved[PATH_MAX];
  if (!realpath(path.c_str(), resolved)) {
    return UnavailableError("cannot find " + what + " at " + path + " (build gpufrac first)");
  }
  return std::string(resolved);
}

// Only this machine can reach the address (127.0.0.0/8, ::1).
bool Loopback(const std::string& address) {
  in_addr v4;
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, address.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

// The PEM file `path` named by `flag` (at most 1 MiB). A private key (`secret`) must not be
// readable by every user.
StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path, bool secret) {
  struct stat st {};
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidArgumentError(flag + " " + path + ": cannot read it as a file");
  }
  if (secret && (st.st_mode & 007)) {
    return InvalidArgumentError(flag + " " + path +
                                ": every user may read this private key; chmod o-rwx it");
  }
  std::string text(1 << 20, '\0');
  ssize_t n = read(fd.get(), text.data(), text.size());
  if (n <= 0 || static_cast<size_t>(n) == text.size() ||
      text.find("-----BEGIN ") == std::string::npos) {
    return InvalidArgumentError(flag + " " + path + ": not a PEM file");
  }
  text.resize(static_cast<size_t>(n));
  return text;
}

StatusOr<TcpListen> ParseListen(const Flags& f) {
  TcpListen tcp;
  const std::string& listen = f.listen;
  const std::string& token_file = f.token_file;
  GPUFRAC_ASSIGN_OR_RETURN(HostPort host_port, ParseHostPort(listen, "--listen", "127.0.0.1:7450"));
  tcp.address = std::move(host_port.host);
  tcp.port = host_port.port;
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return InvalidArgumentError("--tls-cert and --tls-key go together: give both");
  }
  if (!f.tls_cert.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(tcp.tls_cert_pem, ReadPem("--tls-cert", f.tls_cert, false));
    GPUFRAC_ASSIGN_OR_RETURN(tcp.tls_key_pem, ReadPem("--tls-key", f.tls_key, true));
  } else if (!Loopback(tcp.address) && !f.insecure_listen) {
    return InvalidArgumentError(
        "--listen " + listen +
        ": other machines would see the token and every job's environment in clear text; "
        "give --tls-cert and --tls-key, or listen on 127.0.0.1 behind an SSH tunnel, or add "
        "--insecure-listen to accept that");
  }
  if (token_file.empty()) {
    return InvalidArgumentError(
        "--listen needs --token-file FILE: TCP callers must present a "
        "bearer token");
  }
  struct stat st {};
  if (stat(token_file.c_str(), &st) != 0) {
    return InvalidArgumentError("--token-file " + token_file + ": cannot read it");
  }
  if (st.st_mode & 077) {
    return InvalidArgumentError(
        "--token-file " + token_file +
        ": others may read it; chmod 600 it (the token grants admin rights)");
  }
  std::ifstream in(token_file);
  if (!in) return InvalidArgumentError("--token-file " + token_file + ": cannot read it");
  std::getline(in, tcp.token);
  while (!tcp.token.empty() && isspace(static_cast<unsigned char>(tcp.token.back()))) {
    tcp.token.pop_back();
  }
  if (tcp.token.size() < 16) {
    return InvalidArgumentError("--token-file " + token_file +
                                ": the token must be at least 16 characters");
  }
  return tcp;
}

// The service's settings from the flags: state directory, scheduling, limits on what users may
// queue, the queues, and the programs it starts jobs with.
Status ConfigureService(const Flags& f, ServiceConfig* config) {
  // Absolute: jobs' directories are handed to their shims, and the path names this service.
  config->state_dir =
      std::filesystem::absolute(f.state_dir.empty() ? DefaultStateDir() : f.state_dir)
          .lexically_normal()
          .string();
  if (config->state_dir.size() > 1 && config->state_dir.back() == '/') {
    config->state_dir.pop_back();
  }
  config->scheduler.policy = f.policy;
  config->scheduler.starvation_ms = static_cast<int64_t>(f.starvation_seconds * 1000);
  config->kill_grace_seconds = f.kill_grace_seconds;
  if (auto policy = ParseComputePolicy(f.compute_policy)) {
    config->compute_policy = *policy;
  } else {
    return InvalidArgumentError("--gpu-compute-policy " + f.compute_policy +
                                ": expected fair, strict or off");
  }
  config->compute_enforce = f.compute_enforce;
  config->max_pending_per_user = f.max_pending_per_user;
  for (auto [text, flag, out] :
       {std::tuple{&f.max_pending_bytes_per_user, "--max-pending-bytes-per-user",
                   &config->max_pending_bytes_per_user},
        std::tuple{&f.max_job_bytes, "--max-job-bytes", &config->max_job_bytes},
        std::tuple{&f.max_log_bytes, "--max-log-bytes", &config->max_log_bytes}}) {
    StatusOr<uint64_t> bytes = ParseSize(*text);
    if (!bytes.ok() || *bytes == 0) {
      return InvalidArgumentError(std::string(flag) + " " + *text +
                                  ": write a size such as 256K or 64M");
    }
    *out = *bytes;
  }
  if (f.queues.empty()) {
    config->queues = DefaultQueueConfig();
  } else {
    GPUFRAC_ASSIGN_OR_RETURN(config->queues, LoadQueueConfig(f.queues));
  }
  auto shim = Absolute(SiblingProgram("gpufrac-shim"), "gpufrac-shim");
  auto limiter = Absolute(LimiterLibraryPath(), "the limiter library libgpufrac.so");
  if (!shim.ok()) return shim.status();
  if (!limiter.ok()) return limiter.status();
  config->shim_path = *shim;
  config->limiter_path = *limiter;
  return OkStatus();
}

// Where the API listens: the unix socket (and its group), and TCP when --listen is given.
Status ConfigureListeners(const Flags& f, UnixListen* unix_listen, std::optional<TcpListen>* tcp) {
  if (!f.listen.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(*tcp, ParseListen(f));
  }
  unix_listen->path = f.socket.empty() ? DefaultSocketPath() : f.socket;
  if (!f.socket_group.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(unix_listen->group, GroupId(f.socket_group, "--socket-group"));
    unix_listen->mode = 0660;
  }
  return OkStatus();
}

// Who the API treats as an administrator, and which users may call it over TCP.
Status ConfigureApi(const Flags& f, ApiOptions* api) {
  if (!f.admin_group.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(api->admin_group, GroupId(f.admin_group, "--admin-group"));
  }
  if (!f.tcp_group.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(api->tcp_users.group, GroupId(f.tcp_group, "--tcp-group"));
    api->tcp_users.group_name = f.tcp_group;
  }
  unsigned long low = 0, high = 0;
  char extra = 0;
  if (std::sscanf(f.tcp_users.c_str(), "%lu-%lu%c", &low, &high, &extra) != 2 || low == 0 ||
      low > high || high > 4294967294ul) {
    return InvalidArgumentError(
        "--tcp-users " + f.tcp_users +
        ": write a uid range LOW-HIGH with 0 < LOW <= HIGH, e.g. 1000-60000");
  }
  api->tcp_users.min_uid = static_cast<uid_t>(low);
  api->tcp_users.max_uid = static_cast<uid_t>(high);
  return OkStatus();
}

// The machine's GPUs (discovered, or simulated with --sim) into the service's settings; the
// returned NodeGpus owns the MIG backend the settings point to.
StatusOr<std::unique_ptr<machine::NodeGpus>> OpenGpus(const Flags& f, ServiceConfig* config) {
  // One simulated machine per state directory, so two services never share simulated GPUs.
  std::string warning;
  GPUFRAC_ASSIGN_OR_RETURN(
      std::unique_ptr<machine::NodeGpus> gpus,
      machine::OpenNodeGpus({.sim = f.sim,
                             .sim_namespace = ServiceInstanceName(config->state_dir),
                             .whole_gpus = f.whole_gpus,
                             .mps_gpus = f.mps_gpus},
                            &warning));
  if (!warning.empty()) std::fprintf(stderr, "gpufracd: %s\n", warning.c_str());
  config->inventory = gpus->inventory;
  config->mig_backend = gpus->mig_backend.get();
  config->mig_models = gpus->mig_models;
  config->mps_control = machine::FindMpsControl(f.mps_control, config->inventory.simulated);
  return gpus;
}

// Signals are taken synchronously by this thread; every other thread inherits the mask.
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

// Starts the service and its API, and serves until one of `stop_signals` comes.
int Serve(ServiceConfig config, const UnixListen& unix_listen, const std::optional<TcpListen>& tcp,
          const ApiOptions& api, const sigset_t& stop_signals) {
  size_t gpu_count = config.inventory.gpus.size();
  bool simulated = config.inventory.simulated;
  std::string state_dir = config.state_dir;
  auto service = Service::Start(std::move(config));
  if (!service.ok()) return Fail(service.status().message());
  auto server = HttpServer::Start(unix_listen, tcp, MakeApiHandler(service->get(), api));
  if (!server.ok()) return Fail(server.status().message());
  std::string where = unix_listen.path;
  if (tcp) {
    where += " and " + tcp->address + ":" + std::to_string((*server)->tcp_port()) +
             (tcp->tls_cert_pem.empty() ? "" : " (TLS)");
  }
  // For scripts and for `kill $(cat STATE/gpufracd.pid)`.
  std::ofstream(state_dir + "/gpufracd.pid") << getpid() << "\n";
  std::fprintf(stderr, "gpufracd: serving %zu %sGPU(s) on %s (state in %s)\n", gpu_count,
               simulated ? "simulated " : "", where.c_str(), state_dir.c_str());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "gpufracd: stopping on signal %d; running jobs keep running\n", sig);
  server->reset();
  service->reset();
  unlink((state_dir + "/gpufracd.pid").c_str());
  return 0;
}

int Run(const Flags& f) {
  ServiceConfig config;
  if (Status status = ConfigureService(f, &config); !status.ok()) return Fail(status.message());
  UnixListen unix_listen;
  std::optional<TcpListen> tcp;
  if (Status status = ConfigureListeners(f, &unix_listen, &tcp); !status.ok()) {
    return Fail(status.message());
  }
  ApiOptions api;
  if (Status status = ConfigureApi(f, &api); !status.ok()) return Fail(status.message());
  auto gpus = OpenGpus(f, &config);
  if (!gpus.ok()) return Fail(gpus.status().message());
  const sigset_t stop_signals = BlockStopSignals();
  return Serve(std::move(config), unix_listen, tcp, api, stop_signals);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpufracd: the gpufrac node service (queues, GPU shares, jobs)"};
  Flags f;
  app.add_option("--state-dir", f.state_dir,
                 "Database and job logs (default /var/lib/gpufrac for root, else "
                 "~/.local/state/gpufrac)");
  app.add_option("--socket", f.socket,
                 "Unix socket of the API (default /run/gpufrac/gpufracd.sock for root, else "
                 "$XDG_RUNTIME_DIR/gpufrac/gpufracd.sock)");
  app.add_option("--socket-group", f.socket_group,
                 "Members of this group may connect (socket mode 0660); default: owner only");
  app.add_option("--listen", f.listen, "Also serve on TCP ADDRESS:PORT (needs --token-file)");
  app.add_option("--token-file", f.token_file, "File holding the bearer token for TCP callers");
  app.add_option("--tls-cert", f.tls_cert,
                 "Serve --listen over HTTPS with this certificate (chain), PEM");
  app.add_option("--tls-key", f.tls_key, "The private key of --tls-cert, PEM");
  app.add_flag("--insecure-listen", f.insecure_listen,
               "Allow --listen on an address other machines can reach (plain HTTP: the token "
               "and jobs' environments cross the network in clear text)");
  app.add_option("--tcp-users", f.tcp_users,
                 "uids TCP callers may run jobs as, LOW-HIGH (default 1000-60000)");
  app.add_option("--tcp-group", f.tcp_group,
                 "TCP callers may run jobs only as members of this group (instead of "
                 "--tcp-users)");
  app.add_option("--queues", f.queues, "Queue file (YAML, see docs/node-service.md)");
  app.add_option("--gpu-compute-policy", f.compute_policy,
                 "How a shared GPU's time is divided: fair (a job may use idle time up to its "
                 "--gpu-compute-limit, default 1), strict (the limit defaults to its request) or "
                 "off (the GPU's own equal time-slicing); queues may override it (default fair)");
  app.add_flag("--gpu-compute-enforce", f.compute_enforce,
               "Hold a job whose processes take more of a shared GPU's time than its share (as "
               "the driver measures it: one that removed the limiter, for example) by freezing "
               "its cgroup part of the time; without it such jobs are only flagged in status, "
               "metrics and the log");
  app.add_option("--sim", f.sim,
                 "Simulated GPUs instead of this machine's, e.g. 2xH100-80GB,1xA30-24GB");
  app.add_option("--admin-group", f.admin_group, "Members see and cancel every user's jobs");
  app.add_option("--whole-gpus", f.whole_gpus,
                 "GPUs (indexes, e.g. 2,3) that serve whole-GPU jobs only, never shares")
      ->delimiter(',');
  app.add_option("--mps-gpus", f.mps_gpus,
                 "GPUs (indexes) whose shares run side by side under NVIDIA MPS, at the first "
                 "start; later, gpufrac mps enable|disable decides (kept in the state directory)")
      ->delimiter(',');
  app.add_option("--mps-control", f.mps_control,
                 "NVIDIA's nvidia-cuda-mps-control (default: found on PATH; the simulated one "
                 "with --sim)");
  app.add_option("--policy", f.policy, "Placement policy for choosing GPUs (default gpufrac)");
  app.add_option("--starvation-seconds", f.starvation_seconds,
                 "A job waiting longer than this goes ahead of every queue (default 600)")
      ->check(CLI::PositiveNumber);
  app.add_option("--kill-grace", f.kill_grace_seconds,
                 "Seconds between SIGTERM and SIGKILL when a job is cancelled (default 10)")
      ->check(CLI::Range(0, 3600));
  app.add_option("--max-pending-per-user", f.max_pending_per_user,
                 "Jobs one user may have waiting (default 1000; root is not limited)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-pending-bytes-per-user", f.max_pending_bytes_per_user,
                 "Bytes of command and environment one user may have waiting (default 64M)");
  app.add_option("--max-job-bytes", f.max_job_bytes,
                 "Bytes of command, environment, cwd and name one job may take (default 256K)");
  app.add_option("--max-log-bytes", f.max_log_bytes,
                 "Bytes of output (stdout and stderr together) one job's logs keep; the rest is "
                 "dropped (default 1G)");
  app.add_flag("--verbose", f.verbose, "Log every job start and end");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "gpufracd: %s (see gpufracd --help)\n", e.what());
    return 2;
  }
  if (f.verbose) gpufrac::SetLogLevel(gpufrac::LogLevel::kDebug);
  // The database holds every job's environment: nothing the service creates is for others
  // unless it says so (job directories, limit files and the socket set their modes).
  umask(077);
  return Run(f);
}
