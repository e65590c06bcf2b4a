// nvidia-cuda-mps-server stand-in: started by the simulated MPS control daemon (never by hand),
// one per active user. It listens on "<pipe dir>/server.<pid>" for the CUDA clients the daemon
// sends it and keeps their connections: a connection that closes is a client that exited (or
// was killed), and a client that sees its connection close knows the server is gone. It tells
// the daemon of clients coming and going on standard output, exits when the daemon asks it to
// and no client is left (or the daemon is gone and no client is left), and handles fatal faults
// as NVIDIA documents for Volta and later: while clients hit by a fault remain it is in the
// FAULT state and turns new clients away; once they have all exited it is ACTIVE again.
//
//   nvidia-cuda-mps-server --uid UID   (standard input and output are pipes to the daemon)
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proc/process_identity.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/core/mps_wire.h"
#include "simgpu/core/shared_machine.h"
#include "simgpu/mps/mps_log.h"

namespace gpufrac::simgpu::mps {
namespace {

// How often fatal faults of the clients are looked for.
constexpr int kFaultCheckMs = 10;

struct Client {
  int fd = -1;
  pid_t pid = 0;
  LineBuffer in;
  bool greeted = false;  // its "CLIENT <pid>" line was read and answered
};

class Server {
 public:
  Server(std::string uid, SharedMachine* machine)
      : uid_(std::move(uid)),
        machine_(machine),
        log_(LogDirectory() + "/server.log", "Server", false) {}

  int Run();

 private:
  void Accept();
  void OnClientInput(Client& client);
  void OnDaemonInput();
  void Drop(Client& client);
  void CheckFaults();
  bool Faulted(pid_t pid) const;
  void Tell(const std::string& line) { WriteAll(1, line + "\n"); }

  std::string uid_;
  SharedMachine* machine_;
  LogFile log_;
  std::string socket_path_;
  int listen_fd_ = -1;
  std::vector<Client> clients_;
  LineBuffer daemon_in_;
  bool daemon_open_ = true;
  bool stopping_ = false;
  std::set<pid_t> faulted_;   // clients hit by the fatal fault being handled, still connected
  bool state_fault_ = false;  // FAULT until the clients hit have all exited
};

int Server::Run() {
  ::signal(SIGPIPE, SIG_IGN);
  ::fcntl(0, F_SETFL, ::fcntl(0, F_GETFL) | O_NONBLOCK);  // the daemon's pipe, read by poll()
  socket_path_ = ServerSocketPath(PipeDirectory(), ::getpid());
  ::unlink(socket_path_.c_str());
  std::string error;
  listen_fd_ = ListenUnix(socket_path_, &error);
  if (listen_fd_ < 0) {
    log_.Write("MPS server failed to start: " + error);
    return 1;
  }
  log_.Write("Server " + std::to_string(::getpid()) + " started for user " + uid_);
  Tell("READY");
  while (!(stopping_ && clients_.empty())) {
    std::vector<pollfd> watch;
    watch.push_back({.fd = listen_fd_, .events = POLLIN, .revents = 0});
    watch.push_back({.fd = daemon_open_ ? 0 : -1, .events = POLLIN, .revents = 0});
    for (const Client& client : clients_) {
      watch.push_back({.fd = client.fd, .events = POLLIN, .revents = 0});
    }
    if (::poll(watch.data(), watch.size(), kFaultCheckMs) < 0 && errno != EINTR) break;
    if (watch[1].revents != 0) OnDaemonInput();
    for (std::size_t i = 2; i < watch.size(); ++i) {
      if (watch[i].revents != 0) OnClientInput(clients_[i - 2]);
    }
    std::erase_if(clients_, [](const Client& c) { return c.fd < 0; });
    if (watch[0].revents != 0) Accept();
    CheckFaults();
  }
  ::close(listen_fd_);
  ::unlink(socket_path_.c_str());
  log_.Write("Server " + std::to_string(::getpid()) + " exited");
  return 0;
}

void Server::Accept() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    Client client;
    client.fd = fd;
    clients_.push_back(std::move(client));
  }
}

void Server::Drop(Client& client) {
  ::close(client.fd);
  client.fd = -1;
  if (!client.greeted) return;
  log_.Write("Client " + std::to_string(client.pid) + " disconnected");
  Tell("DISCONNECT " + std::to_string(client.pid));
  faulted_.erase(client.pid);
}

void Server::OnClientInput(Client& client) {
  const bool open = client.in.Fill(client.fd);
  std::string line;
  if (!client.greeted && client.in.Next(&line)) {
    const std::vector<std::string> words = Words(line);
    long pid = 0;
    if (words.size() != 2 || words[0] != "CLIENT" ||
        std::from_chars(words[1].data(), words[1].data() + words[1].size(), pid).ec !=
            std::errc()) {
      ::close(client.fd);
      client.fd = -1;
      return;
    }
    if (!faulted_.empty() || stopping_) {
      // As NVIDIA documents: while a fatal fault is handled new clients are rejected.
      log_.Write("Rejecting client " + words[1] + ": the server is not ready");
      WriteAll(client.fd, "NOT_READY\n");
      ::close(client.fd);
      client.fd = -1;
      return;
    }
    client.pid = static_cast<pid_t>(pid);
    client.greeted = true;
    // The group word: this server's identity, the same for all of its clients.
    const proc::ProcessId self = proc::CurrentProcess();
    const std::uint64_t group = (self.start_ticks << 23) | static_cast<std::uint64_t>(self.pid);
    Tell("CONNECT " + words[1]);  // before the client can go on, so the daemon lists it
    WriteAll(client.fd, "OK " + std::to_string(group) + "\n");
    log_.Write("New client " + words[1] + " connected");
  }
  if (!open) Drop(client);
}

void Server::OnDaemonInput() {
  daemon_open_ = daemon_in_.Fill(0);
  std::string line;
  while (daemon_in_.Next(&line)) {
    if (line == "SHUTDOWN") {
      log_.Write("Asked to exit once " + std::to_string(clients_.size()) + " client(s) are done");
      stopping_ = true;
    }
  }
  if (!daemon_open_) {
    // No daemon: no new client can find this server; it ends with its last client.
    log_.Write("The control daemon is gone");
    stopping_ = true;
  }
}

bool Server::Faulted(pid_t pid) const {
  for (const ProcessSlot& slot : machine_->slots) {
    const std::optional<proc::ProcessId> owner = SlotOwner(slot);
    if (owner.has_value() && owner->pid == pid) {
      return slot.fault_devices.load(std::memory_order_acquire) != 0;
    }
  }
  return false;
}

void Server::CheckFaults() {
  if (!faulted_.empty()) return;  // waiting for the affected clients to exit (Drop)
  std::set<pid_t> hit;
  for (const Client& client : clients_) {
    if (client.greeted && Faulted(client.pid)) hit.insert(client.pid);
  }
  if (hit.empty()) {
    if (state_fault_) {
      state_fault_ = false;
      log_.Write("Volta MPS: all faulting clients have exited; the server is ACTIVE again");
      Tell("STATE ACTIVE");
    }
    return;
  }
  faulted_ = hit;
  state_fault_ = true;
  log_.Write("Volta MPS: Server is handling a fatal GPU error.");
  for (pid_t pid : hit) {
    log_.Write("Volta MPS: status of client {" + std::to_string(pid) + ", 1} is INACTIVE");
  }
  Tell("STATE FAULT");
}

}  // namespace
}  // namespace gpufrac::simgpu::mps

int main(int argc, char** argv) {
  namespace mps = gpufrac::simgpu::mps;
  if (argc != 3 || std::strcmp(argv[1], "--uid") != 0) {
    std::fprintf(stderr,
                 "nvidia-cuda-mps-server (simgpu): started by nvidia-cuda-mps-control only\n");
    return 2;
  }
  std::string error;
  gpufrac::simgpu::SharedMachine* machine = gpufrac::simgpu::AttachSharedMachineFromEnv(&error);
  if (machine == nullptr) {
    std::fprintf(stderr, "nvidia-cuda-mps-server: %s\n", error.c_str());
    return 1;
  }
  mps::Server server(argv[2], machine);
  return server.Run();
}
