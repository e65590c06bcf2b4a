// A job's LaunchSpec (job_runner.h): its record, the node's GPUs and the service's settings turned
// into what the job runner starts: the environment, the limit file's GPUs (with an MPS client's
// variables on a GPU in MPS mode), the device nodes of the node's other GPUs it may not open.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "machine/node_gpus.h"
#include "mig/backend.h"
#include "node/job.h"
#include "node/job_runner.h"

namespace gpufrac::node {

// What every job of the node starts with.
struct NodeLaunchSettings {
  // The node's GPUs (context charges, device minors, capability nodes) and the simulated
  // driver's variables for jobs; must outlive the call.
  const machine::Inventory* inventory = nullptr;
  // The driver's MIG operations (which GPU instance a MIG share is); null: none.
  mig::MigBackend* mig_backend = nullptr;
  std::string limiter_path;  // libgpufrac.so, absolute.
  int kill_grace_seconds = 10;
  uint64_t max_log_bytes = kDefaultMaxLogBytes;
};

// Job `job` as the job runner starts it in `job_dir`, its budgets named `workload`;
// `mps_pipes`: the pipe directory of each of its GPUs in MPS mode, by GPU index. Errors: the
// job's grants do not make a limit file (launch::LimitsOfGrants).
StatusOr<LaunchSpec> MakeLaunchSpec(const Job& job, const std::string& job_dir,
                                    const std::string& workload, const NodeLaunchSettings& node,
                                    const std::map<int, std::string>& mps_pipes);

}  // namespace gpufrac::node
