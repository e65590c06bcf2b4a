// The control daemon of the simulated MPS (nvidia-cuda-mps-control -d / -f): it listens on
// "<CUDA_MPS_PIPE_DIRECTORY>/control", starts an nvidia-cuda-mps-server stand-in for the user of
// each CUDA client that connects (at most one server at a time: a client of another user waits
// until the running server, asked to exit once its clients are done, has ended), hands clients
// their server with its settings, and answers the front end's commands. The rules follow
// NVIDIA's MPS documentation; docs/simgpu.md lists them and what the documentation leaves open.
#pragma once

#include <functional>
#include <string>

namespace gpufrac::simgpu::mps {

struct DaemonOptions {
  std::string pipe_directory;
  std::string log_directory;
  bool foreground = false;  // -f: log lines are also written to standard output
  // The server executable (nvidia-cuda-mps-server next to the control program).
  std::string server_program;
};

// Runs the daemon until `quit` (or SIGTERM / SIGINT) and its servers have exited. `started` is
// called once, with "" when the daemon listens (its pid file written) or with why it could not
// start. Returns the process's exit status.
int RunControlDaemon(const DaemonOptions& options,
                     const std::function<void(const std::string& error)>& started);

}  // namespace gpufrac::simgpu::mps
