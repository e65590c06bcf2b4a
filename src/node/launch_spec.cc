// A job's LaunchSpec (see launch_spec.h).
#include "node/launch_spec.h"

#include <optional>
#include <vector>

#include "common/log.h"
#include "launch/grant_limits.h"
#include "node/device_fence.h"

namespace gpufrac::node {
namespace {

// The job's environment: the user's, with the simulated driver's variables on top and its
// library directory ahead of the user's LD_LIBRARY_PATH.
std::vector<std::string> MergeEnv(std::vector<std::string> env,
                                  const std::vector<std::string>& extra) {
  for (const std::string& var : extra) {
    const std::string name = var.substr(0, var.find('='));
    const std::string value = var.substr(name.size() + 1);
    bool found = false;
    for (std::string& e : env) {
      if (e.compare(0, name.size() + 1, name + "=") != 0) continue;
      found = true;
      const std::string old = e.substr(name.size() + 1);
      e = name + "=" + (name == "LD_LIBRARY_PATH" && !old.empty() ? value + ":" + old : value);
    }
    if (!found) env.push_back(var);
  }
  return env;
}

// The id of the MIG GPU instance whose UUID `share` holds; nullopt when the driver does not
// list it.
std::optional<unsigned> MigInstanceId(mig::MigBackend* backend, const GpuGrant& share) {
  if (backend == nullptr) return std::nullopt;
  StatusOr<std::vector<mig::MigBackend::InstanceInfo>> instances = backend->List(share.index);
  if (!instances.ok()) return std::nullopt;
  for (const mig::MigBackend::InstanceInfo& instance : *instances) {
    if (instance.uuid == share.uuid) return instance.gi_id;
  }
  return std::nullopt;
}

}  // namespace

StatusOr<LaunchSpec> MakeLaunchSpec(const Job& job, const std::string& job_dir,
                                    const std::string& workload, const NodeLaunchSettings& node,
                                    const std::map<int, std::string>& mps_pipes) {
  const machine::Inventory& inventory = *node.inventory;
  LaunchSpec spec;
  spec.job_dir = job_dir;
  spec.workload = workload;
  spec.command = job.spec.command;
  spec.env = MergeEnv(job.spec.env, inventory.job_env);
  spec.cwd = job.spec.cwd;
  spec.uid = job.spec.uid;
  spec.gid = job.spec.gid;
  // Under MPS the share of the SMs is the compute limit, and MPS holds it: the limiter keeps
  // the memory and the view, and no turns are taken.
  GPUFRAC_ASSIGN_OR_RETURN(launch::GrantLimits limits,
                           launch::LimitsOfGrants(
                               job.gpus,
                               [&inventory](int index) {
                                 for (const machine::NodeGpu& g : inventory.gpus) {
                                   if (g.index == index) return g.context_bytes;
                                 }
                                 return uint64_t{0};
                               },
                               [&mps_pipes](int index) { return mps_pipes.count(index) > 0; },
                               "job " + std::to_string(job.id)));
  spec.gpus = std::move(limits.gpus);
  if (limits.mps) {
    spec.extra_env = launch::MpsClientEnvironment(*limits.mps, mps_pipes.at(limits.mps->index));
  }
  std::vector<FencedGpu> fenced;
  for (const GpuGrant& share : job.gpus) {
    FencedGpu f;
    for (const machine::NodeGpu& g : inventory.gpus) {
      if (g.index == share.index) f.minor = g.minor;
    }
    // Its GPU instance matters only where capability nodes guard instances.
    if (share.uuid.rfind("MIG-", 0) == 0 && f.minor >= 0 && inventory.caps.major >= 0) {
      f.gpu_instance = MigInstanceId(node.mig_backend, share);
      if (!f.gpu_instance) f.minor = -1;
    }
    fenced.push_back(f);
  }
  if (auto denied = DeniedDevices(fenced, inventory.caps)) {
    spec.denied_devices = std::move(*denied);
  } else {
    LogWarning(
        "job %lld: a GPU's device minor or MIG instance is unknown (no "
        "/proc/driver/nvidia/gpus?), so other GPUs' device nodes are not closed to it",
        static_cast<long long>(job.id));
  }
  spec.limiter_path = node.limiter_path;
  spec.kill_grace_seconds = node.kill_grace_seconds;
  spec.max_log_bytes = node.max_log_bytes;
  return spec;
}

}  // namespace gpufrac::node
