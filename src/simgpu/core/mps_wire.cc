// Sockets, paths and line messages of the simulated MPS (see mps_wire.h).
#include "simgpu/core/mps_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gpufrac::simgpu::mps {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

bool Address(const std::string& path, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  if (path.size() >= sizeof(address->sun_path)) {
    errno = ENAMETOOLONG;
    return false;
  }
  std::memcpy(address->sun_path, path.c_str(), path.size() + 1);
  return true;
}

}  // namespace

std::string PipeDirectory() { return EnvOr("CUDA_MPS_PIPE_DIRECTORY", kDefaultPipeDirectory); }
std::string LogDirectory() { return EnvOr("CUDA_MPS_LOG_DIRECTORY", kDefaultLogDirectory); }

std::string ControlSocketPath(const std::string& pipe_directory) {
  return pipe_directory + "/control";
}

std::string ServerSocketPath(const std::string& pipe_directory, pid_t server) {
  return pipe_directory + "/server." + std::to_string(server);
}

int ConnectUnix(const std::string& path) {
  sockaddr_un address;
  if (!Address(path, &address)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  while (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno == EINTR) continue;
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int ListenUnix(const std::string& path, std::string* error) {
  sockaddr_un address;
  if (!Address(path, &address)) {
    *error = path + ": path too long for a socket";
    return -1;
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, 64) != 0) {
    *error = path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) {
      // A pipe (the daemon's link to a server): the processes ignore SIGPIPE.
      const ssize_t w = ::write(fd, data.data(), data.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(w));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd watch{.fd = fd, .events = POLLOUT, .revents = 0};
      ::poll(&watch, 1, 100);
      continue;
    }
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool ReadLine(int fd, std::string* line, int timeout_ms) {
  line->clear();
  while (true) {
    if (timeout_ms >= 0) {
      pollfd watch{.fd = fd, .events = POLLIN, .revents = 0};
      const int ready = ::poll(&watch, 1, timeout_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
    }
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

bool LineBuffer::Fill(int fd) {
  char chunk[4096];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n > 0) {
      data_.append(chunk, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof(chunk)) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;
  }
}

bool LineBuffer::Next(std::string* line) {
  const std::size_t end = data_.find('\n');
  if (end == std::string::npos) return false;
  *line = data_.substr(0, end);
  data_.erase(0, end + 1);
  return true;
}

std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) words.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}

bool MakeDirectories(const std::string& path, std::string* error) {
  std::size_t slash = 0;
  while (true) {
    slash = path.find('/', slash + 1);
    const std::string part = path.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = part + ": " + std::strerror(errno);
      return false;
    }
    if (slash == std::string::npos) return true;
  }
}

}  // namespace gpufrac::simgpu::mps
