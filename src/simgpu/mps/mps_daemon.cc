// The simulated MPS control daemon (see mps_daemon.h): one poll() loop over its listening
// socket, the connections of CUDA clients and front ends, and the pipes of its servers.
#include "simgpu/mps/mps_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "abi/cuda_abi.h"
#include "simgpu/core/device_names.h"
#include "simgpu/core/mig_state.h"
#include "simgpu/core/mps_settings.h"
#include "simgpu/core/mps_wire.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/core/visible_devices.h"
#include "simgpu/mps/mps_log.h"

namespace gpufrac::simgpu::mps {
namespace {

int g_signal_pipe = -1;  // written by the SIGTERM / SIGINT handler

void OnSignal(int) {
  const char byte = 'q';
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe, &byte, 1);
}

bool ParseNumber(const std::string& text, std::uint64_t* value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

bool StartsWithIgnoreCase(const std::string& text, const std::string& prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(text[i]) != Lower(prefix[i])) return false;
  }
  return true;
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// A connection to the daemon: a CUDA client asking for a server, or a front end sending
// commands.
struct Connection {
  int fd = -1;
  LineBuffer in;
  enum class Kind { kNew, kClient, kUi } kind = Kind::kNew;
  uid_t uid = 0;
  pid_t pid = 0;
  bool queued = false;  // a client, or a front end waiting for start_server, is in the queue
  bool closed = false;
};

// A server process started by the daemon.
struct Server {
  pid_t pid = 0;
  uid_t uid = 0;
  int to_server = -1;    // its standard input
  int from_server = -1;  // its standard output
  LineBuffer from;
  enum class State { kStarting, kActive, kStopping } state = State::kStarting;
  bool fault = false;  // it is handling a fatal GPU fault (rejecting new clients)
  std::uint32_t thread_percentage = kFullThreadPercentage;
  std::map<std::string, std::uint64_t> limits;  // pinned memory limit by device UUID
  std::vector<pid_t> clients;
};

class ControlDaemon {
 public:
  explicit ControlDaemon(const DaemonOptions& options)
      : options_(options),
        log_(options.log_directory + "/control.log", "Control", options.foreground) {}

  int Run(const std::function<void(const std::string&)>& started);

 private:
  std::string Start();
  void Loop();
  void Accept();
  void OnConnectionInput(Connection& connection);
  // Handles the complete lines a connection has sent, as far as it may go on.
  void ProcessLines(Connection& connection);
  void OnServerOutput(Server& server);
  void ServerExited(Server& server);
  void ProcessQueue();
  void StartServer(uid_t uid);
  void Answer(Connection& client, const Server& server);
  void ReplyUi(Connection& ui, const std::string& text);
  // A front end's command: the reply, or nullopt when it was already given or comes later.
  std::optional<std::string> Command(Connection& ui, const std::string& line);

  // The front end's verbs, one handler each, looked up by name in kVerbs. A handler gets the
  // line's words (the verb first) once their count is right, and replies as Command does.
  using Args = std::vector<std::string>;
  using Handler = std::optional<std::string> (ControlDaemon::*)(Connection& ui, const Args& args);
  struct Verb {
    const char* name;
    std::size_t count;  // arguments after the verb
    const char* usage;  // the arguments' form, shown when their count is wrong
    Handler handler;
  };
  static const Verb kVerbs[];
  std::optional<std::string> OnQuit(Connection& ui, const Args& args);
  std::optional<std::string> OnGetServerList(Connection& ui, const Args& args);
  std::optional<std::string> OnGetServerStatus(Connection& ui, const Args& args);
  std::optional<std::string> OnStartServer(Connection& ui, const Args& args);
  std::optional<std::string> OnGetClientList(Connection& ui, const Args& args);
  std::optional<std::string> OnSetDefaultThreadPercentage(Connection& ui, const Args& args);
  std::optional<std::string> OnGetDefaultThreadPercentage(Connection& ui, const Args& args);
  std::optional<std::string> OnSetThreadPercentage(Connection& ui, const Args& args);
  std::optional<std::string> OnGetThreadPercentage(Connection& ui, const Args& args);
  std::optional<std::string> OnSetDefaultPinnedMemLimit(Connection& ui, const Args& args);
  std::optional<std::string> OnGetDefaultPinnedMemLimit(Connection& ui, const Args& args);
  std::optional<std::string> OnSetPinnedMemLimit(Connection& ui, const Args& args);
  std::optional<std::string> OnGetPinnedMemLimit(Connection& ui, const Args& args);

  void Quit();
  void Close(Connection& connection);

  Server* FindServer(const std::string& pid_text);
  // A device of the daemon named by an ordinal or a unique UUID prefix; its UUID, or "".
  std::string ResolveDevice(const std::string& name) const;
  std::map<std::string, std::uint64_t> DefaultLimits() const;

  DaemonOptions options_;
  LogFile log_;
  std::vector<std::string> devices_;  // UUIDs of the devices servers serve, in order
  int listen_fd_ = -1;
  int signal_fds_[2] = {-1, -1};
  bool quitting_ = false;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::deque<Connection*> queue_;    // clients and start_server requests, in arrival order
  std::vector<Connection*> resume_;  // front ends whose start_server was answered
  // What new servers start with: set_default_* commands or the daemon's environment.
  std::uint32_t default_percentage_ = kFullThreadPercentage;
  std::vector<std::pair<std::string, std::uint64_t>> default_limits_;  // by key, oldest first
};

std::string ControlDaemon::Start() {
  std::string error;
  const std::string control = ControlSocketPath(options_.pipe_directory);
  if (const int other = ConnectUnix(control); other >= 0) {
    ::close(other);
    return "An instance of this daemon is already running in " + options_.pipe_directory;
  }
  ::unlink(control.c_str());  // a socket left by a daemon that died
  // The devices: CUDA_VISIBLE_DEVICES of the daemon, resolved on the simulated machine.
  SharedMachine* machine = AttachSharedMachineFromEnv(&error);
  if (machine == nullptr) return error;
  {
    MigLock lock(*machine);
    const MachineDeviceNames known = CollectDeviceNamesLocked(*machine);
    for (const VisibleDeviceRef& ref :
         ParseVisibleDevices(std::getenv("CUDA_VISIBLE_DEVICES"), known.names)) {
      devices_.push_back(VisibleDeviceUuid(known.names, ref));
    }
  }
  if (const char* text = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); text != nullptr) {
    if (const auto tenths = ParseThreadPercentage(text); tenths.has_value()) {
      default_percentage_ = *tenths;
    } else {
      log_.Write(std::string("Ignoring CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=") + text);
    }
  }
  if (const char* text = std::getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); text != nullptr) {
    std::vector<DeviceMemLimit> limits;
    if (ParseDeviceMemLimits(text, &limits, &error)) {
      for (const DeviceMemLimit& limit : limits)
        default_limits_.emplace_back(limit.device, limit.bytes);
    } else {
      log_.Write("Ignoring CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: " + error);
    }
  }
  if (::pipe2(signal_fds_, O_CLOEXEC | O_NONBLOCK) != 0) return std::strerror(errno);
  g_signal_pipe = signal_fds_[1];
  struct sigaction action {};
  action.sa_handler = OnSignal;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  listen_fd_ = ListenUnix(control, &error);
  if (listen_fd_ < 0) return error;
  const std::string pid_file = options_.pipe_directory + "/" + kPidFileName;
  std::FILE* file = std::fopen(pid_file.c_str(), "we");
  if (file == nullptr) return pid_file + ": " + std::strerror(errno);
  std::fprintf(file, "%d\n", static_cast<int>(::getpid()));
  std::fclose(file);
  log_.Write("Starting control daemon using socket " + control);
  log_.Write("To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=" +
             options_.pipe_directory);
  return "";
}

int ControlDaemon::Run(const std::function<void(const std::string&)>& started) {
  if (!log_.ok()) {
    started("cannot open " + options_.log_directory + "/control.log");
    return 1;
  }
  const std::string error = Start();
  if (!error.empty()) {
    log_.Write("Control daemon failed to start: " + error);
    started(error);
    return 1;
  }
  started("");
  Loop();
  ::unlink((options_.pipe_directory + "/" + kPidFileName).c_str());
  log_.Write("Control daemon exited");
  return 0;
}

void ControlDaemon::Loop() {
  while (!quitting_ || !servers_.empty()) {
    std::vector<pollfd> watch;
    std::vector<std::function<void()>> handlers;
    auto add = [&](int fd, std::function<void()> handler) {
      watch.push_back({.fd = fd, .events = POLLIN, .revents = 0});
      handlers.push_back(std::move(handler));
    };
    if (listen_fd_ >= 0) add(listen_fd_, [this] { Accept(); });
    add(signal_fds_[0], [this] {
      char drain[16];
      while (::read(signal_fds_[0], drain, sizeof(drain)) > 0) {
      }
      log_.Write("Received signal, quitting");
      Quit();
    });
    for (auto& connection : connections_) {
      Connection* c = connection.get();
      if (!c->closed) add(c->fd, [this, c] { OnConnectionInput(*c); });
    }
    for (auto& server : servers_) {
      Server* s = server.get();
      add(s->from_server, [this, s] { OnServerOutput(*s); });
    }
    if (::poll(watch.data(), watch.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log_.Write(std::string("poll: ") + std::strerror(errno));
      return;
    }
    for (std::size_t i = 0; i < watch.size(); ++i) {
      if (watch[i].revents != 0) handlers[i]();
    }
    while (!resume_.empty()) {
      Connection* ui = resume_.back();
      resume_.pop_back();
      ProcessLines(*ui);
    }
    // Drop what the handlers ended.
    std::erase_if(connections_, [](const auto& c) { return c->closed && !c->queued; });
    std::erase_if(servers_, [](const auto& s) { return s->from_server < 0; });
  }
}

void ControlDaemon::Accept() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connections_.push_back(std::move(connection));
  }
}

void ControlDaemon::Close(Connection& connection) {
  if (connection.closed) return;
  ::close(connection.fd);
  connection.closed = true;
}

void ControlDaemon::OnConnectionInput(Connection& connection) {
  if (connection.closed) return;  // closed by an earlier handler of the same round
  const bool open = connection.in.Fill(connection.fd);
  ProcessLines(connection);
  if (!open) {
    if (connection.kind == Connection::Kind::kUi) log_.Write("UI closed");
    Close(connection);
  }
}

void ControlDaemon::ProcessLines(Connection& connection) {
  std::string line;
  // A front end waiting for start_server sends its next commands only after the answer.
  while (!connection.closed && !(connection.kind == Connection::Kind::kUi && connection.queued) &&
         connection.in.Next(&line)) {
    if (connection.kind == Connection::Kind::kNew) {
      const std::vector<std::string> words = Words(line);
      std::uint64_t uid = 0, pid = 0;
      if (words.size() == 1 && words[0] == "UI") {
        connection.kind = Connection::Kind::kUi;
        log_.Write("NEW UI");
      } else if (words.size() == 3 && words[0] == "CLIENT" && ParseNumber(words[1], &uid) &&
                 ParseNumber(words[2], &pid)) {
        connection.kind = Connection::Kind::kClient;
        connection.uid = static_cast<uid_t>(uid);
        connection.pid = static_cast<pid_t>(pid);
        const bool exists = std::any_of(servers_.begin(), servers_.end(), [&](const auto& s) {
          return s->uid == connection.uid && s->state == Server::State::kActive;
        });
        log_.Write("NEW CLIENT " + words[2] + " from user " + words[1] +
                   (exists ? ": Server already exists" : ""));
        if (quitting_) {
          Close(connection);
          return;
        }
        connection.queued = true;
        queue_.push_back(&connection);
        ProcessQueue();
      } else {
        log_.Write("Unable to read new connection type information");
        Close(connection);
      }
    } else if (connection.kind == Connection::Kind::kUi) {
      if (Words(line).empty()) continue;
      log_.Write("Cmd:" + line);
      if (const std::optional<std::string> reply = Command(connection, line); reply.has_value()) {
        ReplyUi(connection, *reply);
      }
    }
  }
}

void ControlDaemon::ReplyUi(Connection& ui, const std::string& text) {
  if (ui.closed) return;
  if (!text.empty()) log_.Write("Result: " + text.substr(0, text.find('\n')));
  if (!WriteAll(ui.fd, std::to_string(text.size()) + "\n" + text)) Close(ui);
}

void ControlDaemon::OnServerOutput(Server& server) {
  if (server.from_server < 0) return;
  const bool open = server.from.Fill(server.from_server);
  std::string line;
  while (server.from.Next(&line)) {
    const std::vector<std::string> words = Words(line);
    std::uint64_t pid = 0;
    if (words.size() == 1 && words[0] == "READY") {
      if (server.state == Server::State::kStarting) server.state = Server::State::kActive;
      log_.Write("NEW SERVER " + std::to_string(server.pid) + ": Ready");
    } else if (words.size() == 2 && words[0] == "CONNECT" && ParseNumber(words[1], &pid)) {
      server.clients.push_back(static_cast<pid_t>(pid));
    } else if (words.size() == 2 && words[0] == "DISCONNECT" && ParseNumber(words[1], &pid)) {
      std::erase(server.clients, static_cast<pid_t>(pid));
    } else if (words.size() == 2 && words[0] == "STATE") {
      server.fault = words[1] == "FAULT";
    }
  }
  if (!open) ServerExited(server);
  ProcessQueue();
}

void ControlDaemon::ServerExited(Server& server) {
  int status = 0;
  while (::waitpid(server.pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  log_.Write("Server " + std::to_string(server.pid) + " exited with status " +
             std::to_string(code));
  if (server.state == Server::State::kStarting && !queue_.empty()) {
    // It never got ready: the request that started it fails rather than start it again.
    Connection* head = queue_.front();
    queue_.pop_front();
    head->queued = false;
    if (head->kind == Connection::Kind::kClient) {
      WriteAll(head->fd, "ERROR " + std::to_string(abi::CUDA_ERROR_MPS_CONNECTION_FAILED) + "\n");
      Close(*head);
    } else {
      ReplyUi(*head, "Error: the server failed to start\n");
    }
  }
  ::close(server.to_server);
  ::close(server.from_server);
  server.from_server = -1;  // dropped by the loop
  server.to_server = -1;
  // The server's socket file, should it have died without removing it.
  ::unlink(ServerSocketPath(options_.pipe_directory, server.pid).c_str());
}

void ControlDaemon::ProcessQueue() {
  while (!queue_.empty()) {
    Connection* request = queue_.front();
    if (request->closed) {  // a client that gave up waiting
      queue_.pop_front();
      request->queued = false;
      continue;
    }
    Server* current = nullptr;
    for (auto& server : servers_) {
      if (server->from_server >= 0) current = server.get();
    }
    if (current == nullptr) {
      if (quitting_) return;
      StartServer(request->uid);
      return;
    }
    if (current->uid != request->uid) {
      // One server at a time: another user's waits until this one has exited, which it does
      // once its clients are done.
      if (current->state != Server::State::kStopping) {
        current->state = Server::State::kStopping;
        WriteAll(current->to_server, "SHUTDOWN\n");
        log_.Write("Server " + std::to_string(current->pid) + " of user " +
                   std::to_string(current->uid) + " asked to exit for user " +
                   std::to_string(request->uid));
      }
      return;
    }
    if (current->state != Server::State::kActive) return;  // starting, or on its way out
    queue_.pop_front();
    request->queued = false;
    if (request->kind == Connection::Kind::kClient) {
      Answer(*request, *current);
    } else {
      ReplyUi(*request, "");  // start_server: the server is there
      resume_.push_back(request);
    }
  }
}

std::map<std::string, std::uint64_t> ControlDaemon::DefaultLimits() const {
  // Applied oldest first, so that of two keys naming one device the later one wins; keys that
  // name no device are ignored.
  std::map<std::string, std::uint64_t> limits;
  for (const auto& [key, bytes] : default_limits_) {
    const std::string uuid = ResolveDevice(key);
    if (!uuid.empty()) limits[uuid] = bytes;
  }
  return limits;
}

void ControlDaemon::StartServer(uid_t uid) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) return;
  if (::pipe2(from, O_CLOEXEC) != 0) {
    ::close(to[0]);
    ::close(to[1]);
    return;
  }
  std::string devices;
  for (const std::string& uuid : devices_) devices += (devices.empty() ? "" : ",") + uuid;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    // The server serves the daemon's devices, named unambiguously.
    ::setenv("CUDA_VISIBLE_DEVICES", devices.c_str(), 1);
    ::setenv("CUDA_MPS_PIPE_DIRECTORY", options_.pipe_directory.c_str(), 1);
    ::setenv("CUDA_MPS_LOG_DIRECTORY", options_.log_directory.c_str(), 1);
    const std::string uid_text = std::to_string(uid);
    ::execl(options_.server_program.c_str(), "nvidia-cuda-mps-server", "--uid", uid_text.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  if (pid < 0) {
    ::close(to[1]);
    ::close(from[0]);
    return;
  }
  SetNonBlocking(from[0]);
  auto server = std::make_unique<Server>();
  server->pid = pid;
  server->uid = uid;
  server->to_server = to[1];
  server->from_server = from[0];
  server->thread_percentage = default_percentage_;
  server->limits = DefaultLimits();
  servers_.push_back(std::move(server));
  log_.Write("Starting new server " + std::to_string(pid) + " for user " + std::to_string(uid));
}

void ControlDaemon::Answer(Connection& client, const Server& server) {
  std::string devices, limits;
  for (const std::string& uuid : devices_) devices += (devices.empty() ? "" : ",") + uuid;
  for (const auto& [uuid, bytes] : server.limits) {
    limits += (limits.empty() ? "" : ",") + uuid + "=" + std::to_string(bytes);
  }
  WriteAll(client.fd, "SERVER " + std::to_string(server.pid) + " " +
                          std::to_string(server.thread_percentage) + " " +
                          (devices.empty() ? "-" : devices) + " " +
                          (limits.empty() ? "-" : limits) + "\n");
  Close(client);
}

Server* ControlDaemon::FindServer(const std::string& pid_text) {
  std::uint64_t pid = 0;
  if (!ParseNumber(pid_text, &pid)) return nullptr;
  for (auto& server : servers_) {
    if (server->from_server >= 0 && server->pid == static_cast<pid_t>(pid)) return server.get();
  }
  return nullptr;
}

std::string ControlDaemon::ResolveDevice(const std::string& name) const {
  std::uint64_t ordinal = 0;
  if (ParseNumber(name, &ordinal)) return ordinal < devices_.size() ? devices_[ordinal] : "";
  if (name.size() <= 4) return "";
  std::string match;
  for (const std::string& uuid : devices_) {
    if (!StartsWithIgnoreCase(uuid, name)) continue;
    if (!match.empty()) return "";  // not unique
    match = uuid;
  }
  return match;
}

void ControlDaemon::Quit() {
  if (quitting_) return;
  quitting_ = true;
  log_.Write("Quitting: servers exit once their clients are done");
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(ControlSocketPath(options_.pipe_directory).c_str());
  }
  while (!queue_.empty()) {
    Connection* waiting = queue_.front();
    queue_.pop_front();
    waiting->queued = false;
    if (waiting->kind == Connection::Kind::kUi)
      ReplyUi(*waiting, "Error: the daemon is quitting\n");
    Close(*waiting);
  }
  for (auto& server : servers_) {
    if (server->from_server >= 0 && server->state != Server::State::kStopping) {
      server->state = Server::State::kStopping;
      WriteAll(server->to_server, "SHUTDOWN\n");
    }
  }
}

// The replies to a front end that is wrong, worded as the real daemon words them.
std::string Usage(const std::string& verb, const char* form) {
  return "Error: usage: " + verb + " " + form + "\n";
}

std::string NoServer(const std::string& pid) {
  return "Error: no MPS server with PID " + pid + "\n";
}

std::string BadPercentage(const std::string& text) {
  return "Error: invalid percentage \"" + text +
         "\" (a number above 0 and at most 100, at most one decimal)\n";
}

std::string BadLimit(const std::string& text) {
  return "Error: invalid memory limit \"" + text + "\" (an integer followed by G or M)\n";
}

std::string NoDevice(const std::string& device) {
  return "Error: no device \"" + device + "\" (an ordinal or UUID of the daemon's devices)\n";
}

std::string LimitText(std::optional<std::uint64_t> bytes) {
  return (bytes.has_value() ? FormatMemLimit(*bytes) : std::string("unlimited")) + "\n";
}

const ControlDaemon::Verb ControlDaemon::kVerbs[] = {
    {"quit", 0, "", &ControlDaemon::OnQuit},
    {"get_server_list", 0, "", &ControlDaemon::OnGetServerList},
    {"get_server_status", 1, "<PID>", &ControlDaemon::OnGetServerStatus},
    {"start_server", 2, "-uid <user id>", &ControlDaemon::OnStartServer},
    {"get_client_list", 1, "<PID>", &ControlDaemon::OnGetClientList},
    {"set_default_active_thread_percentage", 1, "<percentage>",
     &ControlDaemon::OnSetDefaultThreadPercentage},
    {"get_default_active_thread_percentage", 0, "", &ControlDaemon::OnGetDefaultThreadPercentage},
    {"set_active_thread_percentage", 2, "<PID> <percentage>",
     &ControlDaemon::OnSetThreadPercentage},
    {"get_active_thread_percentage", 1, "<PID>", &ControlDaemon::OnGetThreadPercentage},
    {"set_default_device_pinned_mem_limit", 2, "<dev> <value>",
     &ControlDaemon::OnSetDefaultPinnedMemLimit},
    {"get_default_device_pinned_mem_limit", 1, "<dev>", &ControlDaemon::OnGetDefaultPinnedMemLimit},
    {"set_device_pinned_mem_limit", 3, "<PID> <dev> <value>", &ControlDaemon::OnSetPinnedMemLimit},
    {"get_device_pinned_mem_limit", 2, "<PID> <dev>", &ControlDaemon::OnGetPinnedMemLimit},
};

std::optional<std::string> ControlDaemon::Command(Connection& ui, const std::string& line) {
  const Args args = Words(line);
  for (const Verb& verb : kVerbs) {
    if (args[0] != verb.name) continue;
    if (args.size() - 1 != verb.count) return Usage(args[0], verb.usage);
    return (this->*verb.handler)(ui, args);
  }
  return "Error: unknown command \"" + args[0] + "\"\n";
}

std::optional<std::string> ControlDaemon::OnQuit(Connection& ui, const Args&) {
  ReplyUi(ui, "");
  Quit();
  Close(ui);
  return std::nullopt;
}

std::optional<std::string> ControlDaemon::OnGetServerList(Connection&, const Args&) {
  std::string text;
  for (const auto& server : servers_) {
    if (server->from_server >= 0) text += std::to_string(server->pid) + "\n";
  }
  return text;
}

std::optional<std::string> ControlDaemon::OnGetServerStatus(Connection&, const Args& args) {
  const Server* server = FindServer(args[1]);
  if (server == nullptr) return NoServer(args[1]);
  if (server->state == Server::State::kStarting) return "INITIALIZING\n";
  return server->fault ? "FAULT\n" : "ACTIVE\n";
}

std::optional<std::string> ControlDaemon::OnStartServer(Connection& ui, const Args& args) {
  std::uint64_t uid = 0;
  if (args[1] != "-uid" || !ParseNumber(args[2], &uid)) return Usage(args[0], "-uid <user id>");
  ui.uid = static_cast<uid_t>(uid);
  ui.queued = true;
  queue_.push_back(&ui);
  ProcessQueue();
  return std::nullopt;  // answered once the server is ready
}

std::optional<std::string> ControlDaemon::OnGetClientList(Connection&, const Args& args) {
  const Server* server = FindServer(args[1]);
  if (server == nullptr) return NoServer(args[1]);
  std::string text;
  for (pid_t client : server->clients) text += std::to_string(client) + "\n";
  return text;
}

std::optional<std::string> ControlDaemon::OnSetDefaultThreadPercentage(Connection&,
                                                                       const Args& args) {
  const auto tenths = ParseThreadPercentage(args[1]);
  if (!tenths.has_value()) return BadPercentage(args[1]);
  default_percentage_ = *tenths;
  return FormatThreadPercentage(default_percentage_) + "\n";
}

std::optional<std::string> ControlDaemon::OnGetDefaultThreadPercentage(Connection&, const Args&) {
  return FormatThreadPercentage(default_percentage_) + "\n";
}

std::optional<std::string> ControlDaemon::OnSetThreadPercentage(Connection&, const Args& args) {
  Server* server = FindServer(args[1]);
  if (server == nullptr) return NoServer(args[1]);
  const auto tenths = ParseThreadPercentage(args[2]);
  if (!tenths.has_value()) return BadPercentage(args[2]);
  server->thread_percentage = *tenths;  // for clients that connect from now on
  return FormatThreadPercentage(*tenths) + "\n";
}

std::optional<std::string> ControlDaemon::OnGetThreadPercentage(Connection&, const Args& args) {
  const Server* server = FindServer(args[1]);
  if (server == nullptr) return NoServer(args[1]);
  return FormatThreadPercentage(server->thread_percentage) + "\n";
}

std::optional<std::string> ControlDaemon::OnSetDefaultPinnedMemLimit(Connection&,
                                                                     const Args& args) {
  const auto bytes = ParseMemLimit(args[2], /*allow_byte_suffix=*/false);
  if (!bytes.has_value()) return BadLimit(args[2]);
  // As documented, the device is not checked here; the latest setting of a key counts last.
  std::erase_if(default_limits_, [&](const auto& entry) { return entry.first == args[1]; });
  default_limits_.emplace_back(args[1], *bytes);
  return "";
}

std::optional<std::string> ControlDaemon::OnGetDefaultPinnedMemLimit(Connection&,
                                                                     const Args& args) {
  for (const auto& [key, bytes] : default_limits_) {
    if (key == args[1]) return LimitText(bytes);  // no translation between ordinal and UUID
  }
  return LimitText(std::nullopt);
}

std::optional<std::string> ControlDaemon::OnSetPinnedMemLimit(Connection&, const Args& args) {
  Server* server = FindServer(args[1]);
  if (server == nullptr) return NoServer(args[1]);
  const std::string uuid = ResolveDevice(args[2]);
  if (uuid.empty()) return NoDevice(args[2]);
  const auto bytes = ParseMemLimit(args[3], /*allow_byte_suffix=*/false);
  if (!bytes.has_value()) return BadLimit(args[3]);
  server->limits[uuid] = *bytes;  // for clients that connect from now on
  return "";
}

std::optional<std::string> ControlDaemon::OnGetPinnedMemLimit(Connection&, const Args& args) {
  const Server* server = FindServer(args[1]);
  if (server == nullptr) return NoServer(args[1]);
  const std::string uuid = ResolveDevice(args[2]);
  if (uuid.empty()) return NoDevice(args[2]);
  const auto found = server->limits.find(uuid);
  return LimitText(found == server->limits.end() ? std::nullopt
                                                 : std::optional<std::uint64_t>(found->second));
}

}  // namespace

int RunControlDaemon(const DaemonOptions& options,
                     const std::function<void(const std::string& error)>& started) {
  // The log directory first: the log is the daemon's first file.
  std::string error;
  if (!MakeDirectories(options.pipe_directory, &error) ||
      !MakeDirectories(options.log_directory, &error)) {
    started(error);
    return 1;
  }
  ControlDaemon daemon(options);
  return daemon.Run(started);
}

}  // namespace gpufrac::simgpu::mps
