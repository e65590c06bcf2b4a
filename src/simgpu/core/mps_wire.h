// Plumbing of the simulated MPS: where its sockets and logs live (CUDA_MPS_PIPE_DIRECTORY,
// CUDA_MPS_LOG_DIRECTORY), Unix-domain stream sockets, and the line-based messages that the
// control daemon, its servers and the CUDA clients exchange. The messages are internal to
// simgpu; the contract is the nvidia-cuda-mps-control command line (docs/simgpu.md).
//
//   client (cuInit) -> daemon  "CLIENT <uid> <pid>"
//   daemon -> client           "SERVER <pid> <percent tenths> <uuid,...|-> <uuid=bytes,...|->"
//                              or "ERROR <CUresult>"
//   client -> server           "CLIENT <pid>", answered "OK <group>" or "NOT_READY"; the client
//                              keeps the connection open for as long as it lives
//   front end -> daemon        "UI", then one command per line, each answered "<length>\n<text>"
//   daemon -> server (stdin)   "SHUTDOWN" (exit once no client is left)
//   server -> daemon (stdout)  "READY", "CONNECT <pid>", "DISCONNECT <pid>", "STATE <state>"
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace gpufrac::simgpu::mps {

inline constexpr char kDefaultPipeDirectory[] = "/tmp/nvidia-mps";
inline constexpr char kDefaultLogDirectory[] = "/var/log/nvidia-mps";
inline constexpr char kPidFileName[] = "nvidia-cuda-mps-control.pid";

// CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY, or their defaults when unset or empty.
std::string PipeDirectory();
std::string LogDirectory();

// The daemon's socket, "<pipe dir>/control", and a server's, "<pipe dir>/server.<pid>".
std::string ControlSocketPath(const std::string& pipe_directory);
std::string ServerSocketPath(const std::string& pipe_directory, pid_t server);

// A connected stream socket (close-on-exec), or -1 with errno set (ENOENT / ECONNREFUSED when
// nobody listens there).
int ConnectUnix(const std::string& path);
// A listening socket bound to `path` (close-on-exec, non-blocking accepts), or -1 with `error`
// set. A file already at `path` is an error: the caller decides whether it is stale.
int ListenUnix(const std::string& path, std::string* error);

// Writes all of `data`; false if the peer is gone. Never raises SIGPIPE.
bool WriteAll(int fd, std::string_view data);

// Reads one line (without its newline) a byte at a time, for the short handshakes; false on end
// of file, error, or when `timeout_ms` (>= 0) passes first.
bool ReadLine(int fd, std::string* line, int timeout_ms = -1);

// Lines arriving on a non-blocking descriptor watched by poll().
class LineBuffer {
 public:
  // Reads what is there; false once the peer has closed (or on error). Complete lines are then
  // available from Next.
  bool Fill(int fd);
  bool Next(std::string* line);

 private:
  std::string data_;
};

// Splits a line into words separated by spaces or tabs.
std::vector<std::string> Words(std::string_view line);

// mkdir -p with mode 0755; false with `error` set if a component cannot be made.
bool MakeDirectories(const std::string& path, std::string* error);

}  // namespace gpufrac::simgpu::mps
