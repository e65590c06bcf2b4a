// The CUDA driver's MPS client (see mps_client.h).
#include "simgpu/cuda/mps_client.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "simgpu/core/mps_wire.h"

namespace gpufrac::simgpu {
namespace {

bool ParseUnsigned(std::string_view text, std::uint64_t* value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size();
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  if (text == "-") return parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// "SERVER <pid> <percent tenths> <uuids> <limits>" into `attachment`.
bool ParseServerReply(const std::vector<std::string>& words, MpsAttachment* attachment) {
  std::uint64_t pid = 0, tenths = 0;
  if (words.size() != 5 || words[0] != "SERVER" || !ParseUnsigned(words[1], &pid) ||
      !ParseUnsigned(words[2], &tenths) || tenths == 0 || tenths > kFullThreadPercentage) {
    return false;
  }
  attachment->server_pid = static_cast<pid_t>(pid);
  attachment->thread_percentage = static_cast<std::uint32_t>(tenths);
  attachment->devices = SplitCommas(words[3]);
  for (const std::string& entry : SplitCommas(words[4])) {
    const std::size_t equals = entry.find('=');
    std::uint64_t bytes = 0;
    if (equals == std::string::npos || !ParseUnsigned(entry.substr(equals + 1), &bytes)) {
      return false;
    }
    attachment->limits.emplace_back(entry.substr(0, equals), bytes);
  }
  return true;
}

void Warn(const std::string& message) {
  std::fprintf(stderr, "simgpu: cuInit: MPS: %s\n", message.c_str());
}

}  // namespace

uid_t MpsClientUid() {
  const char* text = std::getenv("SIMGPU_UID");
  std::uint64_t uid = 0;
  if (text != nullptr && ParseUnsigned(text, &uid)) return static_cast<uid_t>(uid);
  return ::getuid();
}

abi::CUresult AttachToMps(MpsAttachment* attachment) {
  *attachment = MpsAttachment{};
  const std::string pipe_directory = mps::PipeDirectory();
  const int daemon = mps::ConnectUnix(mps::ControlSocketPath(pipe_directory));
  if (daemon < 0) return abi::CUDA_SUCCESS;  // no daemon: not an MPS client
  std::string reply;
  // The daemon answers once a server of this user is active, however long that takes.
  const bool answered = mps::WriteAll(daemon, "CLIENT " + std::to_string(MpsClientUid()) + " " +
                                                  std::to_string(::getpid()) + "\n") &&
                        mps::ReadLine(daemon, &reply);
  ::close(daemon);
  const std::vector<std::string> words = mps::Words(reply);
  if (!answered || !ParseServerReply(words, attachment)) {
    std::uint64_t code = 0;
    if (answered && words.size() == 2 && words[0] == "ERROR" && ParseUnsigned(words[1], &code)) {
      return static_cast<abi::CUresult>(code);
    }
    Warn("the control daemon in " + pipe_directory + " gave no server");
    return abi::CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  const int server =
      mps::ConnectUnix(mps::ServerSocketPath(pipe_directory, attachment->server_pid));
  if (server < 0) {
    Warn("cannot connect to server " + std::to_string(attachment->server_pid));
    return abi::CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  std::uint64_t group = 0;
  if (!mps::WriteAll(server, "CLIENT " + std::to_string(::getpid()) + "\n") ||
      !mps::ReadLine(server, &reply)) {
    ::close(server);
    return abi::CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  const std::vector<std::string> answer = mps::Words(reply);
  if (answer.size() == 1 && answer[0] == "NOT_READY") {
    ::close(server);
    return abi::CUDA_ERROR_MPS_SERVER_NOT_READY;
  }
  if (answer.size() != 2 || answer[0] != "OK" || !ParseUnsigned(answer[1], &group) || group == 0) {
    ::close(server);
    return abi::CUDA_ERROR_MPS_CONNECTION_FAILED;
  }
  attachment->attached = true;
  attachment->server_fd = server;
  attachment->group = group;
  // The client's environment can only lower what the server allows.
  if (const char* text = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); text != nullptr) {
    if (const auto own = ParseThreadPercentage(text); own.has_value()) {
      if (*own < attachment->thread_percentage) attachment->thread_percentage = *own;
    } else {
      Warn(std::string("ignoring CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=") + text);
    }
  }
  return abi::CUDA_SUCCESS;
}

std::uint64_t MpsClientMemLimit(const MpsAttachment& attachment, int ordinal,
                                const std::string& uuid) {
  std::uint64_t limit = 0;
  for (const auto& [device, bytes] : attachment.limits) {
    if (device == uuid) limit = bytes;
  }
  const char* text = std::getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
  if (text == nullptr) return limit;
  std::vector<DeviceMemLimit> own;
  std::string error;
  if (!ParseDeviceMemLimits(text, &own, &error)) {
    if (ordinal == 0) Warn("ignoring CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: " + error);
    return limit;
  }
  for (const DeviceMemLimit& entry : own) {
    const bool names_it =
        entry.device == std::to_string(ordinal) ||
        (entry.device.size() > 4 && uuid.compare(0, entry.device.size(), entry.device) == 0);
    if (names_it && (limit == 0 || entry.bytes < limit)) limit = entry.bytes;
  }
  return limit;
}

void WatchMpsServer(int server_fd, std::function<void()> lost) {
  std::thread([server_fd, lost = std::move(lost)] {
    char byte;
    while (true) {
      pollfd watch{.fd = server_fd, .events = POLLIN, .revents = 0};
      if (::poll(&watch, 1, -1) < 0 && errno == EINTR) continue;
      const ssize_t n = ::read(server_fd, &byte, 1);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;  // the server never writes after its answer: only the end matters
    }
    lost();
  }).detach();
}

}  // namespace gpufrac::simgpu
