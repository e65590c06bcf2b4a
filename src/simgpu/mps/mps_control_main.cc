// nvidia-cuda-mps-control stand-in for the simulated GPUs.
//
//   nvidia-cuda-mps-control -d   start the control daemon in the background; returns once it
//                                listens (status 0), or with status 1 and the reason on stderr
//   nvidia-cuda-mps-control -f   run the control daemon in the foreground, logging to stdout too
//   nvidia-cuda-mps-control      the front end: sends each line of standard input to the daemon
//                                of CUDA_MPS_PIPE_DIRECTORY and prints its replies; status 0 when
//                                the daemon was reached (rejected commands print "Error: ..."),
//                                1 when there is no daemon or it went away
//
// Environment: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), CUDA_MPS_LOG_DIRECTORY (default
// /var/log/nvidia-mps), CUDA_VISIBLE_DEVICES (the devices the servers serve),
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (defaults for new
// servers), and simgpu's SIMGPU_* variables (which simulated machine).
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "simgpu/core/mps_wire.h"
#include "simgpu/mps/mps_daemon.h"

namespace {

namespace mps = gpufrac::simgpu::mps;

void Usage(std::FILE* out) {
  std::fprintf(out,
               "usage: nvidia-cuda-mps-control [-d | -f]\n"
               "  -d  start the MPS control daemon in the background\n"
               "  -f  start the MPS control daemon in the foreground\n"
               "  (no option) send commands from standard input to the running daemon\n");
}

// The directory of this executable, where nvidia-cuda-mps-server lives too.
std::string OwnDirectory() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  const std::string self(path, static_cast<std::size_t>(n));
  return self.substr(0, self.rfind('/'));
}

mps::DaemonOptions Options(bool foreground) {
  return mps::DaemonOptions{.pipe_directory = mps::PipeDirectory(),
                            .log_directory = mps::LogDirectory(),
                            .foreground = foreground,
                            .server_program = OwnDirectory() + "/nvidia-cuda-mps-server"};
}

int Foreground() {
  return mps::RunControlDaemon(Options(true), [](const std::string& error) {
    if (!error.empty()) std::fprintf(stderr, "nvidia-cuda-mps-control: %s\n", error.c_str());
  });
}

// Forks the daemon and returns once it listens: the child reports on a pipe.
int Background() {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    std::perror("nvidia-cuda-mps-control: pipe");
    return 1;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("nvidia-cuda-mps-control: fork");
    return 1;
  }
  if (pid == 0) {
    ::close(report[0]);
    ::setsid();
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (null > 2) ::close(null);
    const int status = mps::RunControlDaemon(Options(false), [&](const std::string& error) {
      mps::WriteAll(report[1], error.empty() ? "OK\n" : error + "\n");
      ::close(report[1]);
    });
    ::_exit(status);
  }
  ::close(report[1]);
  std::string answer;
  mps::ReadLine(report[0], &answer);
  ::close(report[0]);
  if (answer == "OK") return 0;
  std::fprintf(stderr, "nvidia-cuda-mps-control: %s\n",
               answer.empty() ? "the daemon did not start" : answer.c_str());
  return 1;
}

// Reads "<length>\n<text>" from the daemon.
bool ReadReply(int fd, std::string* text) {
  std::string header;
  if (!mps::ReadLine(fd, &header)) return false;
  std::size_t length = 0;
  auto [end, ec] = std::from_chars(header.data(), header.data() + header.size(), length);
  if (ec != std::errc() || end != header.data() + header.size()) return false;
  text->assign(length, '\0');
  std::size_t got = 0;
  while (got < length) {
    const ssize_t n = ::read(fd, text->data() + got, length - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

int FrontEnd() {
  ::signal(SIGPIPE, SIG_IGN);
  const int fd = mps::ConnectUnix(mps::ControlSocketPath(mps::PipeDirectory()));
  if (fd < 0) {
    std::fprintf(stderr, "nvidia-cuda-mps-control: cannot find an MPS control daemon in %s\n",
                 mps::PipeDirectory().c_str());
    return 1;
  }
  if (!mps::WriteAll(fd, "UI\n")) return 1;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (mps::Words(line).empty()) continue;
    std::string reply;
    if (!mps::WriteAll(fd, line + "\n") || !ReadReply(fd, &reply)) {
      std::fprintf(stderr, "nvidia-cuda-mps-control: lost the connection to the daemon\n");
      return 1;
    }
    std::fwrite(reply.data(), 1, reply.size(), stdout);
    std::fflush(stdout);
    if (mps::Words(line)[0] == "quit") break;  // the daemon closes the connection
  }
  ::close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) return FrontEnd();
  if (argc == 2 && std::strcmp(argv[1], "-d") == 0) return Background();
  if (argc == 2 && std::strcmp(argv[1], "-f") == 0) return Foreground();
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    Usage(stdout);
    return 0;
  }
  Usage(stderr);
  return 1;
}
