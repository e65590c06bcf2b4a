// An MPS control daemon for one benchmark run (see mps_daemon.h).
#include "mps_daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
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

bool MpsDaemon::Start(std::string* error) {
  const pid_t child = fork();
  if (child == 0) {
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_.c_str(), 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", log_.c_str(), 1);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(control_.c_str(), control_.c_str(), "-d", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    *error = control_ + " -d failed (status " + std::to_string(status) + ")";
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
  int out[2];
  if (pipe(out) != 0) return "";
  const pid_t child = fork();
  if (child == 0) {
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_.c_str(), 1);
    int in[2];
    if (pipe(in) != 0) _exit(126);
    // The commands are short: they fit in the pipe's buffer before the front end reads them.
    if (write(in[1], commands.data(), commands.size()) < 0) _exit(126);
    close(in[1]);
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(out[0]);
    execl(control_.c_str(), control_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  close(out[0]);
  if (child > 0) waitpid(child, nullptr, 0);
  return text;
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
