// The command line's side of the API: httplib over the unix socket, and the per-user autostart.
#include "cli/service_client.h"

#include <fcntl.h>
#include <grp.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/paths.h"
#include "common/posix.h"
#include "node/paths.h"

namespace gpufrac::cli {
namespace {

using nlohmann::json;

constexpr auto kStartTimeout = std::chrono::seconds(15);

// Connects to the socket at `path` and hangs up: 0 when something answers, else the errno.
int TryConnect(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  return connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
}

bool Answers(const std::string& path) { return TryConnect(path) == 0; }

// "permission denied on /run/gpufrac/gpufracd.sock: ask to be added to group gpufrac".
Status Denied(const std::string& path) {
  std::string advice = "ask to be added to the group that may use it";
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    struct group g, *found = nullptr;
    char buf[4096];
    if (getgrgid_r(st.st_gid, &g, buf, sizeof(buf), &found) == 0 && found) {
      advice = "ask to be added to group " + std::string(found->gr_name);
    }
  }
  return PermissionDeniedError("permission denied on " + path + ": " + advice);
}

// The system service's socket: GPUFRAC_SYSTEM_SOCKET (for tests and unusual installs), else
// node::kSystemSocket.
std::string SystemSocket() {
  const char* env = getenv("GPUFRAC_SYSTEM_SOCKET");
  return env && *env ? env : node::kSystemSocket;
}

// The system service's state directory: GPUFRAC_SYSTEM_STATE_DIR (for tests), else
// /var/lib/gpufrac.
std::string SystemStateDir() {
  const char* env = getenv("GPUFRAC_SYSTEM_STATE_DIR");
  return env && *env ? env : "/var/lib/gpufrac";
}

// A system service is installed here: its socket's directory exists (it outlives the service's
// stops and restarts), or its state directory holds a service's database (a service ran there).
// A state directory with only a log is what root's failed first start leaves (no driver, say):
// that is no service, and must not stop every other user from starting their own.
bool SystemServiceInstalled(const std::string& socket) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(socket).parent_path(), ec)) return true;
  return std::filesystem::exists(SystemStateDir() + "/gpufracd.db", ec);
}

StatusCode CodeFromName(const std::string& name, int http_status) {
  for (StatusCode c :
       {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kFailedPrecondition,
        StatusCode::kResourceExhausted, StatusCode::kUnavailable, StatusCode::kInternal,
        StatusCode::kPermissionDenied, StatusCode::kAborted}) {
    if (StatusCodeName(c) == name) return c;
  }
  if (http_status == 401 || http_status == 403) return StatusCode::kPermissionDenied;
  if (http_status == 404) return StatusCode::kNotFound;
  if (http_status >= 400 && http_status < 500) return StatusCode::kInvalidArgument;
  return StatusCode::kInternal;
}

// Starts `gpufracd` for this user in the background and waits until it answers.
Status StartService(const std::string& socket) {
  std::string state_dir = node::DefaultStateDir();
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  std::string log = state_dir + "/gpufracd.log";
  std::string daemon = SiblingProgram("gpufracd");
  if (access(daemon.c_str(), X_OK) != 0) {
    return UnavailableError("no gpufracd next to gpufrac (" + daemon + "); build or install it");
  }
  // The service holds the write end for its life: end of file here means it has died.
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) != 0) return UnavailableError("cannot start gpufracd: no pipe");
  UniqueFd read_end(alive[0]), write_end(alive[1]);
  pid_t pid = fork();
  if (pid < 0) return UnavailableError("cannot start gpufracd: fork failed");
  if (pid == 0) {
    // Detached: its own session, no terminal, output to its log, no directory kept busy.
    setsid();
    if (chdir("/") != 0) _exit(127);
    read_end.Reset();
    fcntl(write_end.get(), F_SETFD, 0);
    int null_fd = open("/dev/null", O_RDONLY);
    int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    if (fork() != 0) _exit(0);  // The service is not our child: nobody has to reap it.
    // GPUFRAC_SIM asks for simulated GPUs (e.g. to try gpufrac on a laptop); never implied.
    const char* sim = getenv("GPUFRAC_SIM");
    if (sim && *sim) {
      execl(daemon.c_str(), "gpufracd", "--state-dir", state_dir.c_str(), "--socket",
            socket.c_str(), "--sim", sim, static_cast<char*>(nullptr));
    } else {
      execl(daemon.c_str(), "gpufracd", "--state-dir", state_dir.c_str(), "--socket",
            socket.c_str(), static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  write_end.Reset();
  int status = 0;
  waitpid(pid, &status, 0);
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  bool died = false;
  while (std::chrono::steady_clock::now() < deadline && !died) {
    if (Answers(socket)) {
      std::fprintf(stderr, "gpufrac: started gpufracd for you (socket %s, state and log in %s)\n",
                   socket.c_str(), state_dir.c_str());
      return OkStatus();
    }
    struct pollfd p = {read_end.get(), POLLIN, 0};
    died = poll(&p, 1, 50) > 0;
  }
  read_end.Reset();
  // Its last words say why (no GPU, a bad state directory, ...).
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return UnavailableError("could not start gpufracd" + (last.empty() ? "" : ": " + last) +
                          " (log: " + log + ")");
}

}  // namespace

int ExitCodeFor(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

ServiceClient::ServiceClient(std::string socket)
    : socket_(std::move(socket)), http_(std::make_unique<httplib::Client>(socket_)) {
  http_->set_address_family(AF_UNIX);
  http_->set_connection_timeout(5);
  http_->set_read_timeout(60);
  http_->set_keep_alive(true);
}

ServiceClient::~ServiceClient() = default;

StatusOr<std::unique_ptr<ServiceClient>> ServiceClient::Connect(const std::string& socket_flag,
                                                                bool autostart) {
  std::string named = socket_flag;
  if (named.empty()) {
    if (const char* env = getenv("GPUFRAC_SOCKET"); env && *env) named = env;
  }
  if (!named.empty()) {
    int error = TryConnect(named);
    if (error == EACCES) return Denied(named);
    if (error != 0) {
      return UnavailableError("no gpufracd answers on " + named +
                              " (start one with: gpufracd --socket " + named + ")");
    }
    return std::unique_ptr<ServiceClient>(new ServiceClient(named));
  }
  // Never a second scheduler over the same GPUs: where a system service is installed, the
  // command uses it or says why it cannot.
  const std::string system = SystemSocket();
  int error = TryConnect(system);
  if (error == 0) return std::unique_ptr<ServiceClient>(new ServiceClient(system));
  if (error == EACCES) return Denied(system);
  if (SystemServiceInstalled(system) && (getuid() != 0 || system != node::DefaultSocketPath())) {
    return UnavailableError("the system service is not running (nothing answers on " + system +
                            "); ask an administrator to start it (systemctl start gpufracd)");
  }
  std::string own = node::DefaultSocketPath();
  if (!Answers(own)) {
    if (!autostart) return UnavailableError("no gpufracd is running (looked at " + own + ")");
    GPUFRAC_RETURN_IF_ERROR(StartService(own));
  }
  return std::unique_ptr<ServiceClient>(new ServiceClient(own));
}

static StatusOr<json> Parse(const httplib::Result& res, const std::string& socket) {
  if (!res) {
    return UnavailableError("lost the connection to gpufracd on " + socket + " (" +
                            httplib::to_string(res.error()) + ")");
  }
  json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (res->status >= 200 && res->status < 300) {
    if (body.is_discarded()) return InternalError("gpufracd sent a reply that is not JSON");
    return body;
  }
  std::string message = body.is_object() && body.contains("error") && body["error"].is_string()
                            ? body["error"].get<std::string>()
                            : "HTTP " + std::to_string(res->status);
  std::string code = body.is_object() && body.contains("code") && body["code"].is_string()
                         ? body["code"].get<std::string>()
                         : "";
  return Status(CodeFromName(code, res->status), message);
}

StatusOr<json> ServiceClient::Get(const std::string& path) {
  return Parse(http_->Get(path.c_str()), socket_);
}

StatusOr<std::string> ServiceClient::GetText(const std::string& path) {
  auto res = http_->Get(path.c_str());
  if (res && res->status >= 200 && res->status < 300) return res->body;
  auto parsed = Parse(res, socket_);
  return parsed.ok() ? InternalError("unexpected reply to " + path) : parsed.status();
}

StatusOr<json> ServiceClient::Post(const std::string& path, const json& body) {
  return Parse(http_->Post(path.c_str(), body.dump(-1, ' ', false, json::error_handler_t::replace),
                           "application/json"),
               socket_);
}

StatusOr<ServiceClient::Output> ServiceClient::ReadOutput(int64_t id, uint64_t out_offset,
                                                          uint64_t err_offset, int wait_seconds) {
  std::string path =
      "/v1/jobs/" + std::to_string(id) + "/output?stdout=" + std::to_string(out_offset) +
      "&stderr=" + std::to_string(err_offset) + "&wait=" + std::to_string(wait_seconds);
  auto res = http_->Get(path.c_str());
  if (!res || res->status != 200) {
    auto parsed = Parse(res, socket_);
    return parsed.ok() ? InternalError("unexpected reply to " + path) : parsed.status();
  }
  size_t out_bytes =
      std::strtoull(res->get_header_value("X-Gpufrac-Stdout-Bytes").c_str(), nullptr, 10);
  if (out_bytes > res->body.size()) return InternalError("gpufracd sent a malformed output reply");
  Output o;
  o.out = res->body.substr(0, out_bytes);
  o.err = res->body.substr(out_bytes);
  o.state = res->get_header_value("X-Gpufrac-State");
  return o;
}

}  // namespace gpufrac::cli
