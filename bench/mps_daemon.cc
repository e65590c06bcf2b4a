// An MPS control daemon for one benchmark run (see mps_daemon.h).
#include "mps_daemon.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

namespace gpufrac::bench {
namespace {

std::vector<pid_t> Pids(const std::string& text) {
  std::vector<pid_t> pids;
  std::istringstream in(text);
  for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

// Running: the daemon and its servers are not our children, so a zombie that init has not reaped
// yet counts as ended.
bool Alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream text;
  text << stat.rdbuf();
  const std::string s = text.str();
  const size_t paren = s.rfind(')');
  return paren == std::string::npos || paren + 2 >= s.size() ||
         (s[paren + 2] != 'Z' && s[paren + 2] != 'X');
}

}  // namespace

MpsDaemon::MpsDaemon(std::string control, const std::string& dir)
    : control_(std::move(control)), pipe_(dir + "/mps-pipe"), log_(dir + "/mps-log") {}

machine::MpsControlOptions MpsDaemon::Control() const {
  return {.control = control_, .pipe_dir = pipe_, .log_dir = log_};
}

bool MpsDaemon::Start(std::string* error) {
  if (Status started = machine::StartMpsControlDaemon(Control()); !started.ok()) {
    *error = started.message();
    return false;
  }
  std::ifstream pid_file(pipe_ + "/nvidia-cuda-mps-control.pid");
  long pid = 0;
  if (!(pid_file >> pid) || pid <= 0) {
    *error = "no pid file in " + pipe_;
    return false;
  }
  daemon_ = static_cast<pid_t>(pid);
  return true;
}

std::string MpsDaemon::Ask(const std::string& commands) {
  // A daemon that does not answer counts as one with nothing to say.
  return machine::SendMpsControlCommands(Control(), commands).value_or("");
}

std::vector<pid_t> MpsDaemon::Clients() {
  std::vector<pid_t> clients;
  for (pid_t server : Pids(Ask("get_server_list\n"))) {
    for (pid_t client : Pids(Ask("get_client_list " + std::to_string(server) + "\n"))) {
      clients.push_back(client);
    }
  }
  return clients;
}

void MpsDaemon::Quit() {
  if (daemon_ <= 0) return;
  const std::vector<pid_t> servers = Pids(Ask("get_server_list\n"));
  Ask("quit\n");
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto any_alive = [&] {
    if (Alive(daemon_)) return true;
    for (pid_t server : servers) {
      if (Alive(server)) return true;
    }
    return false;
  };
  while (any_alive() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (Alive(daemon_)) kill(daemon_, SIGKILL);
  for (pid_t server : servers) {
    if (Alive(server)) kill(server, SIGKILL);
  }
  daemon_ = 0;
}

}  // namespace gpufrac::bench
