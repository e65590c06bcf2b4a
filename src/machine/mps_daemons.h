// The MPS control daemons of the node's GPUs in MPS mode (NVIDIA's Multi-Process Service): one
// per GPU, serving only that GPU (CUDA_VISIBLE_DEVICES), with a pipe and a log directory of its own
// under the service's state directory (made by the service, root's, writable by nobody else, so
// no user can plant a socket or a pid file there). A daemon is started when a job first needs it
// (`nvidia-cuda-mps-control -d`), watched (one that ended is reported and started again), and
// stopped when its GPU leaves MPS mode or the service stops with nothing running on it. A daemon
// still serving jobs when the service stops is kept, and the next service takes it back: it is
// the process its pid file names, in a pipe directory only the service writes, running the same
// control binary.
//
// Not thread-safe: one caller at a time (gpufracd gives each GPU's daemon a worker thread of its
// own, node/mps_gpus.h; the Kubernetes agent calls it under a lock of its own). Every control
// command is bounded by the timeout (machine/mps_control.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "machine/mps_control.h"
#include "proc/process_identity.h"

namespace gpufrac::machine {

// nvidia-cuda-mps-control, absolute: `given` (the --mps-control flag), else with `simulated`
// GPUs the simulated driver's (simgpu's stand-in), else the first on PATH; "" when there is none.
std::string FindMpsControl(const std::string& given, bool simulated);

struct MpsDaemonOptions {
  // Where the daemons' directories go (<dir>/<gpu index>/pipe and .../log); made (0711) if
  // missing. Its parent must exist and be the service's own.
  std::string dir;
  // nvidia-cuda-mps-control, absolute.
  std::string control;
  // Added to the daemon's and its control commands' environment (the simulated driver's).
  std::vector<std::string> env;
  // How long a daemon may take to start (its pid file to appear), and a command or a quit to be
  // answered (MpsControlOptions::timeout).
  std::chrono::milliseconds timeout{5000};
};

class MpsDaemons {
 public:
  explicit MpsDaemons(MpsDaemonOptions options) : options_(std::move(options)) {}
  // Stops the daemons with no client (StopIdle); the others are kept for the next service.
  ~MpsDaemons();
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // The pipe directory of GPU `index`'s daemon (UUID `uuid`): the running one, one a previous
  // service left there, or a new one, once its pid file is there. kUnavailable with the reason
  // (and the end of the daemon's log) when it does not start.
  StatusOr<std::string> Ensure(int index, const std::string& uuid);
  // Sends one control command (e.g. "get_server_list") to GPU `index`'s daemon and returns its
  // reply without the trailing newline. kFailedPrecondition when none runs.
  StatusOr<std::string> Command(int index, const std::string& command);
  // Stops GPU `index`'s daemon: "quit", then SIGKILL if it has not ended within the timeout.
  void Stop(int index);
  // Sets the limits of GPU `index`'s daemon (Ensure it first) for its clients to come and its
  // servers now: `percentage` of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1 to 100)
  // and `pinned_mib` MiB of pinned device memory (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) on device 0,
  // the only one the daemon serves. A client's environment can only lower its own limits, so
  // callers pass the most any client of theirs on the GPU may have. The daemon's refusal comes
  // back with the command it refused.
  Status SetLimits(int index, int percentage, uint64_t pinned_mib);
  // Whether GPU `index`'s daemon has a client (true when it cannot tell).
  bool Serving(int index);
  // Stops every daemon that serves no client.
  void StopIdle();

  struct Ended {
    int index = 0;
    std::string how;  // "ended", "could not be started again: ..."
  };
  // The daemons that ended since the last call; each is started again at once.
  std::vector<Ended> Watch();
  // GPU index -> its daemon's pid.
  std::map<int, pid_t> Running() const;

 private:
  struct Daemon {
    std::string uuid;
    proc::ProcessId id;
  };
  std::string PipeDir(int index) const;
  std::string LogDir(int index) const;
  // The daemon whose pid file is in GPU `index`'s pipe directory, if it runs our control binary.
  bool Adopt(int index, Daemon* out) const;
  // How to reach GPU `index`'s daemon (UUID `uuid`) with the control client.
  MpsControlOptions ControlOf(int index, const std::string& uuid) const;

  MpsDaemonOptions options_;
  std::map<int, Daemon> daemons_;
};

}  // namespace gpufrac::machine
