// The node's nvidia.com/mig.config label applied to its static MIG GPUs (--static-mig-gpus), as
// NVIDIA's MIG manager applies it: the label names a configuration of a mig-parted file (the
// defaults of mig/default_configs.h merged with the operator's), and the agent reports progress
// in nvidia.com/mig.config.state (pending, then success or failed) and in node events.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/api_client.h"
#include "k8s/nvidia_provider.h"
#include "machine/node_gpus.h"
#include "mig/apply.h"
#include "mig/mig_parted.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kLabelMigConfig = "nvidia.com/mig.config";
inline constexpr std::string_view kLabelMigConfigState = "nvidia.com/mig.config.state";

// Event reasons on the node.
inline constexpr std::string_view kReasonMigConfigWaiting = "GpufracMigConfigWaiting";
inline constexpr std::string_view kReasonMigConfigApplied = "GpufracMigConfigApplied";
inline constexpr std::string_view kReasonMigConfigFailed = "GpufracMigConfigFailed";

struct MigConfigLabelOptions {
  std::string node;
  mig::MigPartedFile configs;  // What the label may name.
  // Where the operator's mig-parted file was read from (--mig-parted-config; "" for none), for
  // the events: on Kubernetes it is the ConfigMap mounted there.
  std::string configmap_file;
  NvidiaGpus gpus;  // The static MIG GPUs and the MIG strategy.
};

// Not thread-safe: the agent calls Sync from its resync only.
class MigConfigLabel {
 public:
  // `client` and `gpus` must outlive this object.
  MigConfigLabel(ApiClient* client, machine::NodeGpus* gpus, MigConfigLabelOptions options);

  // One look at the node's label; `pods` are the pods bound to the node now. When the label
  // names a configuration other than the last one handled:
  // - already in place on the GPUs it matches: state success, nothing changed, nothing withdrawn;
  // - else state pending, then failed with a warning event carrying the one-line reason (no
  //   such configuration, a layout that does not fit, a GPU whose MIG mode differs from the
  //   configuration's, which the agent does not change, a layout the single strategy cannot
  //   serve, an error of the driver, after which the GPUs are rolled back);
  // - once those checks pass, the GPUs it matches are withdrawn (Withdrawn) until it is applied,
  //   fails or is given up, so that the kubelet admits no new pod to their instances; it is
  //   applied at a later Sync than the one that withdrew them (the kubelet has then had a resync
  //   period to take the change), never at that one;
  // - while a GPU it matches has an instance in use, or any pod on the node that has not
  //   finished asks for a static MIG resource (nvidia.com/mig-*, or under the single strategy
  //   nvidia.com/gpu; the agent cannot tell which instance a pod holds, so any such pod holds
  //   them all), nothing changes: the state stays pending, and the first look says why in the
  //   log and a node event; a later Sync applies once they are free;
  // - else mig::ApplyConfig to the static MIG GPUs it matches (never any other GPU), state
  //   success and an event.
  // A label that names what was handled last changes nothing (a label set back to it while
  // another configuration waited gets that one's state back); a label that is removed changes
  // no instance (a configuration that waited is given up: the state it replaced comes back, or
  // the state label goes when there was none). A failed configuration is tried again only when
  // the label changes (or the agent restarts). Returns true when the GPUs' instances changed
  // (the caller re-reads them). API errors are logged and retried at the next Sync.
  bool Sync(const std::vector<nlohmann::json>& pods);

  // Whether the devices of static MIG GPU `gpu` are withdrawn now: the agent lists them to the
  // kubelet as unhealthy (still listed, so pods running on them keep them).
  bool Withdrawn(int gpu) const;

 private:
  std::vector<mig::ApplyTarget> Targets() const;
  // Why `config` must wait ("" when it need not): instances in use, pods holding the resources.
  std::string BusyReason(const mig::MigPartedConfig& config,
                         const std::vector<mig::ApplyTarget>& targets,
                         const std::vector<nlohmann::json>& pods) const;
  // Whether the GPUs `config` matches have exactly its layout already.
  bool InPlace(const mig::MigPartedConfig& config,
               const std::vector<mig::ApplyTarget>& targets) const;
  // The layout the single strategy would serve after `config`: an error if not uniform.
  Status CheckSingle(const mig::MigPartedConfig& config,
                     const std::vector<mig::ApplyTarget>& targets) const;
  // Why the label's `name` is none of the configurations known, and where to add it.
  Status UnknownConfig(const std::string& name) const;
  // Why `config` cannot be applied here at all (a MIG mode the agent would have to switch, no
  // MIG control, a layout that does not fit or that the single strategy cannot serve).
  Status CheckApplicable(const mig::MigPartedConfig& config,
                         const std::vector<mig::ApplyTarget>& targets) const;
  // Withdraws the GPUs `config` matches (logging a change); whether they were all withdrawn
  // already, at an earlier Sync.
  bool Withdraw(const std::string& name, const mig::MigPartedConfig& config,
                const std::vector<mig::ApplyTarget>& targets);
  // Sets the state label; "" removes it.
  bool SetState(const std::string& state);
  // Gives up the waiting configuration: its withdrawal ends.
  void Abandon();
  // Ends the handling of `name`: the state, an event and the log.
  void Finish(const std::string& name, const Status& result, const std::string& detail);

  ApiClient* client_;
  machine::NodeGpus* gpus_;
  MigConfigLabelOptions options_;
  std::string handled_;         // The configuration last applied or failed,
  std::string handled_state_;   // and which of the two.
  std::string pending_;         // The configuration waiting for its GPUs.
  bool wait_noted_ = false;     // The wait for `pending_` has been reported.
  std::vector<int> withdrawn_;  // The GPUs withdrawn for `pending_`, sorted.
  std::string owed_state_;      // A final state the API server has not taken yet.
};

}  // namespace gpufrac::k8s
