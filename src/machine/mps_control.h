// The one client of NVIDIA's MPS control program, nvidia-cuda-mps-control: it starts a control
// daemon (`-d`) and sends commands to a running one (its front end, one command per line on its
// standard input), for gpufracd and the Kubernetes agent (through machine::MpsDaemons), the MPS
// benchmark and the tests alike.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::machine {

// Which daemon, and how long it may take.
struct MpsControlOptions {
  // nvidia-cuda-mps-control, absolute.
  std::string control;
  // The daemon's pipe and log directories (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY;
  // "" leaves the variable out: the program's default).
  std::string pipe_dir = {};
  std::string log_dir = {};
  // CUDA_VISIBLE_DEVICES for a daemon being started: the devices its servers serve ("": not set).
  std::string visible_devices = {};
  // NAME=value entries set on top of the caller's environment, whose CUDA_* variables are left
  // out (they would configure the daemon instead of the ones above).
  std::vector<std::string> env = {};
  // The longest a call waits for the program to exit. Then it is killed and the call fails: a
  // daemon that stops answering cannot hold its caller for longer.
  std::chrono::milliseconds timeout{5000};
};

// Runs `control -d`, which returns once the daemon runs in the background (its pid file is
// then in the pipe directory). kUnavailable when the program fails ("... failed (exit code N):
// <the end of what it wrote on stderr>") or is not done within the timeout ("... did not answer
// within N ms"); when it cannot be started at all, the system's error (ErrnoStatus). Thread-safe
// (nothing is shared between calls), and a reaper of the caller's (waitpid(-1)) cannot take the
// program's exit status: it runs as the child of a supervising child that never execs. Needs
// Linux 5.4 (pidfds).
Status StartMpsControlDaemon(const MpsControlOptions& options);

// Sends `commands` (one per line, e.g. "get_server_list\n") to the daemon of the pipe
// directory and returns what the front end printed, as printed (a reply per command, each line
// ending in a newline; a command the daemon rejects gets an "Error: ..." reply and is no
// failure). Errors as StartMpsControlDaemon's; with no daemon there the program fails.
StatusOr<std::string> SendMpsControlCommands(const MpsControlOptions& options,
                                             const std::string& commands);

}  // namespace gpufrac::machine
