// The MPS control daemons (see mps_daemons.h).
#include "machine/mps_daemons.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "common/paths.h"
#include "common/posix.h"

namespace gpufrac::machine {
namespace {

constexpr char kPidFile[] = "nvidia-cuda-mps-control.pid";

using Clock = std::chrono::steady_clock;

// Makes `path` a directory of the service's own with `mode`, or checks the one there is
// (posix.h: not a link, the service's, writable by nobody else) and sets its mode.
Status OwnDirectory(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoStatus("cannot create " + path, errno);
  }
  GPUFRAC_ASSIGN_OR_RETURN(UniqueFd dir, OpenOurDirectoryAt(AT_FDCWD, path, path));
  if (fchmod(dir.get(), mode) != 0) return ErrnoStatus("cannot set the mode of " + path, errno);
  return OkStatus();
}

// The last `bytes` of file `path` ("" when unreadable), on one line.
std::string Tail(const std::string& path, size_t bytes = 300) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > bytes) text = text.substr(text.size() - bytes);
  for (char& c : text) {
    if (c == '\n' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// The path process `pid` runs ("" when unknown).
std::string ExeOf(pid_t pid) {
  char buf[PATH_MAX];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

}  // namespace

std::string FindMpsControl(const std::string& given, bool simulated) {
  constexpr char kName[] = "nvidia-cuda-mps-control";
  if (!given.empty()) return std::filesystem::absolute(given).string();
  if (simulated) return SimgpuDir() + "/bin/" + kName;
  const char* path = getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + kName;
    if (access(candidate.c_str(), X_OK) == 0) return std::filesystem::absolute(candidate).string();
  }
  return "";
}

MpsDaemons::~MpsDaemons() { StopIdle(); }

std::string MpsDaemons::PipeDir(int index) const {
  return options_.dir + "/" + std::to_string(index) + "/pipe";
}

std::string MpsDaemons::LogDir(int index) const {
  return options_.dir + "/" + std::to_string(index) + "/log";
}

MpsControlOptions MpsDaemons::ControlOf(int index, const std::string& uuid) const {
  return {.control = options_.control,
          .pipe_dir = PipeDir(index),
          .log_dir = LogDir(index),
          .visible_devices = uuid,
          .env = options_.env,
          .timeout = options_.timeout};
}

bool MpsDaemons::Adopt(int index, Daemon* out) const {
  std::ifstream in(PipeDir(index) + "/" + kPidFile);
  long long pid = 0;
  proc::ProcessId id;
  if (!(in >> pid) || pid <= 0 || !proc::ReadProcessId(static_cast<pid_t>(pid), &id)) return false;
  char real[PATH_MAX];
  if (realpath(options_.control.c_str(), real) == nullptr || ExeOf(id.pid) != real) return false;
  out->id = id;
  return true;
}

StatusOr<std::string> MpsDaemons::Ensure(int index, const std::string& uuid) {
  auto it = daemons_.find(index);
  if (it != daemons_.end() && proc::IsRunning(it->second.id)) return PipeDir(index);
  daemons_.erase(index);
  GPUFRAC_RETURN_IF_ERROR(OwnDirectory(options_.dir, 0711));
  GPUFRAC_RETURN_IF_ERROR(OwnDirectory(options_.dir + "/" + std::to_string(index), 0711));
  // Clients connect to the daemon's sockets here: they may enter it, not write it.
  GPUFRAC_RETURN_IF_ERROR(OwnDirectory(PipeDir(index), 0755));
  GPUFRAC_RETURN_IF_ERROR(OwnDirectory(LogDir(index), 0755));
  Daemon daemon{.uuid = uuid, .id = {}};
  if (Adopt(index, &daemon)) {
    LogInfo("MPS daemon of GPU %d: pid %d, left by the previous service, taken back", index,
            static_cast<int>(daemon.id.pid));
    daemons_[index] = daemon;
    return PipeDir(index);
  }
  unlink((PipeDir(index) + "/" + kPidFile).c_str());
  GPUFRAC_RETURN_IF_ERROR(StartMpsControlDaemon(ControlOf(index, uuid)));
  // -d returns once the daemon runs in the background; its pid file says which process it is.
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  while (!Adopt(index, &daemon)) {
    if (Clock::now() >= deadline) {
      std::string log = Tail(LogDir(index) + "/control.log");
      return UnavailableError("the MPS daemon of GPU " + std::to_string(index) + " did not start" +
                              (log.empty() ? "" : ": " + log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  LogInfo("MPS daemon of GPU %d started: pid %d, pipe directory %s", index,
          static_cast<int>(daemon.id.pid), PipeDir(index).c_str());
  daemons_[index] = daemon;
  return PipeDir(index);
}

StatusOr<std::string> MpsDaemons::Command(int index, const std::string& command) {
  auto it = daemons_.find(index);
  if (it == daemons_.end() || !proc::IsRunning(it->second.id)) {
    return FailedPreconditionError("no MPS daemon runs for GPU " + std::to_string(index));
  }
  GPUFRAC_ASSIGN_OR_RETURN(
      std::string reply, SendMpsControlCommands(ControlOf(index, it->second.uuid), command + "\n"));
  while (!reply.empty() && (reply.back() == '\n' || reply.back() == ' ')) reply.pop_back();
  return reply;
}

void MpsDaemons::Stop(int index) {
  auto it = daemons_.find(index);
  if (it == daemons_.end()) return;
  const Daemon daemon = it->second;
  daemons_.erase(it);
  if (!proc::IsRunning(daemon.id)) return;
  Status quit = SendMpsControlCommands(ControlOf(index, daemon.uuid), "quit\n").status();
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  while (proc::IsRunning(daemon.id) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (proc::IsRunning(daemon.id)) {
    LogWarning("the MPS daemon of GPU %d (pid %d) did not quit (%s); killing it", index,
               static_cast<int>(daemon.id.pid),
               quit.ok() ? "it was asked to" : quit.message().c_str());
    kill(daemon.id.pid, SIGKILL);
  } else {
    LogInfo("MPS daemon of GPU %d stopped", index);
  }
}

Status MpsDaemons::SetLimits(int index, int percentage, uint64_t pinned_mib) {
  std::vector<std::string> commands = {
      "set_default_active_thread_percentage " + std::to_string(percentage),
      "set_default_device_pinned_mem_limit 0 " + std::to_string(pinned_mib) + "M"};
  StatusOr<std::string> servers = Command(index, "get_server_list");
  if (!servers.ok()) return servers.status();
  std::istringstream list(*servers);
  for (std::string pid; list >> pid;) {
    commands.push_back("set_active_thread_percentage " + pid + " " + std::to_string(percentage));
    commands.push_back("set_device_pinned_mem_limit " + pid + " 0 " + std::to_string(pinned_mib) +
                       "M");
  }
  for (const std::string& command : commands) {
    StatusOr<std::string> reply = Command(index, command);
    if (!reply.ok()) {
      return Status(reply.status().code(), "the MPS daemon of GPU " + std::to_string(index) +
                                               " refused '" + command +
                                               "': " + reply.status().message());
    }
  }
  return OkStatus();
}

bool MpsDaemons::Serving(int index) {
  StatusOr<std::string> servers = Command(index, "get_server_list");
  if (!servers.ok()) return true;  // It cannot say: assume it serves someone.
  std::istringstream list(*servers);
  for (std::string pid; list >> pid;) {
    StatusOr<std::string> clients = Command(index, "get_client_list " + pid);
    if (!clients.ok() || !clients->empty()) return true;
  }
  return false;
}

void MpsDaemons::StopIdle() {
  std::vector<int> idle;
  for (const auto& [index, daemon] : daemons_) {
    if (!Serving(index)) idle.push_back(index);
  }
  for (int index : idle) Stop(index);
}

std::vector<MpsDaemons::Ended> MpsDaemons::Watch() {
  std::vector<Ended> ended;
  std::vector<std::pair<int, std::string>> restart;
  for (const auto& [index, daemon] : daemons_) {
    if (!proc::IsRunning(daemon.id)) restart.emplace_back(index, daemon.uuid);
  }
  for (const auto& [index, uuid] : restart) {
    daemons_.erase(index);
    std::string log = Tail(LogDir(index) + "/control.log", 200);
    StatusOr<std::string> again = Ensure(index, uuid);
    ended.push_back(
        {index, again.ok() ? "ended" + (log.empty() ? "" : " (its log: " + log + ")")
                           : "ended and could not be started again: " + again.status().message()});
  }
  return ended;
}

std::map<int, pid_t> MpsDaemons::Running() const {
  std::map<int, pid_t> out;
  for (const auto& [index, daemon] : daemons_) out[index] = daemon.id.pid;
  return out;
}

}  // namespace gpufrac::machine
