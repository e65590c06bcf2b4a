// The CUDA driver's side of MPS. At cuInit a process connects to the control daemon found
// through CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) and asks for a server of its user;
// the daemon answers once one is active (starting it, or first waiting for another user's server
// to end), and the process connects to that server and stays connected for as long as it
// lives. When no daemon listens there the process runs without MPS, as NVIDIA documents.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "abi/cuda_abi.h"
#include "simgpu/core/mps_settings.h"

namespace gpufrac::simgpu {

struct MpsAttachment {
  bool attached = false;  // false: no daemon, the process runs without MPS
  int server_fd = -1;     // the connection to the server (close-on-exec)
  pid_t server_pid = 0;
  std::uint64_t group = 0;  // the server's identity, shared by its clients on the engines
  // The server's active thread percentage (tenths), already lowered by the process's
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
  std::uint32_t thread_percentage = kFullThreadPercentage;
  std::vector<std::string> devices;  // the server's devices, as UUIDs, in its order
  // The server's pinned device memory limits by device UUID (devices without one are absent).
  std::vector<std::pair<std::string, std::uint64_t>> limits;
};

// The uid the process presents to the daemon: SIMGPU_UID when set (the simulator's stand-in for
// running as another user), else the real one.
uid_t MpsClientUid();

// Connects to MPS if a daemon is there. CUDA_SUCCESS with `attached` false when none is;
// CUDA_ERROR_MPS_SERVER_NOT_READY when the server is handling a fatal fault;
// CUDA_ERROR_MPS_CONNECTION_FAILED when the daemon or server answered otherwise or broke off.
abi::CUresult AttachToMps(MpsAttachment* attachment);

// The pinned memory limit of the process's device `ordinal` (its UUID `uuid`): the server's for
// that device, lowered by the process's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry for the ordinal
// or UUID (a higher entry has no effect); 0 for no limit.
std::uint64_t MpsClientMemLimit(const MpsAttachment& attachment, int ordinal,
                                const std::string& uuid);

// Runs `lost` on a thread of its own once the server closes the connection (it exited or was
// killed). The thread ends with the process.
void WatchMpsServer(int server_fd, std::function<void()> lost);

}  // namespace gpufrac::simgpu
