// The MIG control the node service and the Kubernetes agent drive: the interface to the driver's
// GPU instances, and how a workload gpufrac did not start is named.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/mig_catalogue.h"

namespace gpufrac::mig {

// What MIG scheduling needs of the driver: list, create and destroy GPU instances, switch MIG mode.
// NvmlMigBackend (nvml_backend.h) is the driver's; tests use fakes.
class MigBackend {
 public:
  struct InstanceInfo {
    unsigned gi_id = 0;
    int profile = 0;  // Index into the GPU's MigModel::profiles.
    gpu::MigPlacement placement;
    std::string uuid;  // "MIG-..."
    // Processes with a CUDA context run in it (gpufrac's jobs or anyone's), as far as the driver
    // can tell; `pids` names them when it can (host pids, ascending).
    bool in_use = false;
    std::vector<unsigned> pids;
  };
  virtual ~MigBackend() = default;
  virtual StatusOr<std::vector<InstanceInfo>> List(int gpu) = 0;
  virtual StatusOr<InstanceInfo> Create(int gpu, int profile, gpu::MigPlacement placement) = 0;
  virtual Status Destroy(int gpu, unsigned gi_id) = 0;
  // Turns MIG mode on or off (the GPU must be idle). True when the change waits for a GPU reset.
  virtual StatusOr<bool> SetMode(int gpu, bool enabled) = 0;
};

// "in use by pid 4242 (not gpufrac)", "in use by pids 1, 2 (not gpufrac)", or without pids
// "in use by a process gpufrac did not start": how status and wait reasons name a foreign
// workload.
std::string ForeignUseText(const std::vector<unsigned>& pids);

}  // namespace gpufrac::mig
