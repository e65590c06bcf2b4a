// What a container on a GPU in MPS mode gets from the node agent: a client's place with the GPU's
// MPS control daemon (one per GPU, the agent's, run by machine::MpsDaemons as gpufracd runs its
// own), that daemon's pipe directory mounted read-only, and the client environment holding it to
// its share of the SMs and of the memory. The agent's daemons live under host_dir/mps/<gpu
// index>/{pipe,log}, root's and writable by nobody else (machine/mps_daemons.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "k8s/device_provider.h"
#include "launch/grant_limits.h"
#include "machine/mps_daemons.h"

namespace gpufrac::k8s {

// Where a container finds its GPU's MPS pipe directory (CUDA_MPS_PIPE_DIRECTORY). NVIDIA's device
// plugin mounts its daemon's at /mps/<resource>/pipe; gpufrac has one daemon per GPU and a
// container on MPS is a client of one GPU's, so one fixed path serves.
inline constexpr std::string_view kContainerMpsPipeDir = "/mps/pipe";

struct ContainerMpsOptions {
  // The daemons: their directory (host_dir/mps), the control binary, the simulated driver's
  // environment.
  machine::MpsDaemonOptions daemons;
  // A host directory mounted read-write as the container's /dev/shm ("" for none): the /dev/shm
  // of the agent's daemons, as NVIDIA's plugin shares one tmpfs between its MPS daemon and every
  // MPS client (--mps-shm-dir; see docs/kubernetes.md).
  std::string shm_dir;
};

class ContainerMps {
 public:
  explicit ContainerMps(ContainerMpsOptions options);
  // The daemons serving nobody are stopped; those with clients are left running (the
  // containers keep their server), as gpufracd leaves them.
  ~ContainerMps() = default;

  // Starts GPU `index`'s daemon (UUID `uuid`), or takes back the one a previous agent left.
  // kUnavailable with the daemon's log when it does not start.
  Status Start(int index, const std::string& uuid);

  // Makes the container `client` (a name unique among live containers on the node; the same
  // name again replaces its earlier record) the MPS client `mps` of its GPU's daemon, held to
  // its percentage of the GPU's SMs (1 to 100) and its pinned MiB of memory: starts the
  // daemon if need be, raises the daemon's limits to the most of any client recorded on the GPU
  // (a client's environment can only lower its own), and adds to `out` the pipe directory
  // mounted read-only at kContainerMpsPipeDir, the /dev/shm mount when there is a shm_dir, and
  // CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
  // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (for the container's device 0, the one GPU it sees through
  // MPS). Thread-safe.
  Status Join(const std::string& client, const launch::MpsClient& mps, ContainerAllocation* out);

  // Forgets every client for which `gone` is true (its pod has ended), so the next Join sets
  // the limits from the clients left.
  void Forget(const std::function<bool(const std::string& client)>& gone);

  // The daemons that ended since the last call, each started again (machine::MpsDaemons::Watch)
  // with the limits of the clients recorded on its GPU.
  std::vector<machine::MpsDaemons::Ended> Watch();
  // Stops the daemons that serve no client.
  void StopIdle();
  // One control command to GPU `index`'s daemon, its reply (machine::MpsDaemons::Command).
  StatusOr<std::string> Command(int index, const std::string& command);
  // GPU index -> its daemon's pid.
  std::map<int, pid_t> Running();

 private:
  struct Limits {
    int percentage = 100;
    uint64_t pinned_mib = 0;
  };

  // Sets GPU `index`'s daemon's limits to the most of its recorded clients'. Under mu_.
  Status ApplyLimits(int index);

  const std::string shm_dir_;
  std::mutex mu_;  // MpsDaemons is not thread-safe; Allocate runs on gRPC threads.
  machine::MpsDaemons daemons_;
  std::map<int, std::map<std::string, Limits>> clients_;  // GPU index -> client -> its limits.
};

}  // namespace gpufrac::k8s
