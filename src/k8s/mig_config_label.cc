// Applies the node's nvidia.com/mig.config label to its static MIG GPUs (see mig_config_label.h).
#include "k8s/mig_config_label.h"

#include <algorithm>
#include <map>

#include "common/log.h"
#include "common/text.h"
#include "gpu/catalogue.h"
#include "k8s/kube_cluster_api.h"
#include "k8s/object_fields.h"
#include "machine/mig_targets.h"
#include "mig/apply.h"

namespace gpufrac::k8s {
namespace {

// At most this many pods are named in a wait message.
constexpr size_t kPodsNamed = 3;
// Events carry at most this much of a message (events.k8s.io/v1 allows 1 kB).
constexpr size_t kEventMessageBytes = 1000;

// Whether a container's requests or limits name a resource of the static MIG GPUs.
bool AsksForStaticMig(const nlohmann::json& container, MigStrategy strategy) {
  const nlohmann::json* resources = FieldOf(container, "resources");
  if (resources == nullptr) return false;
  for (const char* kind : {"requests", "limits"}) {
    const nlohmann::json* amounts = FieldOf(*resources, kind);
    if (amounts == nullptr || !amounts->is_object()) continue;
    for (const auto& [name, amount] : amounts->items()) {
      if (name.rfind("nvidia.com/mig-", 0) == 0) return true;
      if (strategy == MigStrategy::kSingle && name == "nvidia.com/gpu") return true;
    }
  }
  return false;
}

bool PodAsksForStaticMig(const nlohmann::json& pod, MigStrategy strategy) {
  const nlohmann::json* spec = FieldOf(pod, "spec");
  if (spec == nullptr) return false;
  for (const char* list : {"containers", "initContainers"}) {
    const nlohmann::json* containers = FieldOf(*spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (const nlohmann::json& c : *containers) {
      if (c.is_object() && AsksForStaticMig(c, strategy)) return true;
    }
  }
  return false;
}

// Profile name -> instances asked for (counts of 0 left out).
std::map<std::string, int> Wanted(const mig::MigPartedEntry& entry) {
  std::map<std::string, int> out;
  for (const auto& [name, count] : entry.mig_devices) {
    if (count > 0) out[name] += count;
  }
  return out;
}

}  // namespace

MigConfigLabel::MigConfigLabel(ApiClient* client, machine::NodeGpus* gpus,
                               MigConfigLabelOptions options)
    : client_(client), gpus_(gpus), options_(std::move(options)) {}

std::vector<mig::ApplyTarget> MigConfigLabel::Targets() const {
  std::vector<mig::ApplyTarget> targets;
  for (const machine::NodeGpu& g : gpus_->inventory.gpus) {
    const std::vector<int>& mine = options_.gpus.static_mig;
    if (std::find(mine.begin(), mine.end(), g.index) == mine.end()) continue;
    // Busy or not is asked of the driver and the pods (BusyReason), not told.
    targets.push_back(machine::MigApplyTarget(g, gpus_->mig_models, /*busy=*/false));
  }
  return targets;
}

std::string MigConfigLabel::BusyReason(const mig::MigPartedConfig& config,
                                       const std::vector<mig::ApplyTarget>& targets,
                                       const std::vector<nlohmann::json>& pods) const {
  for (const mig::ApplyTarget& t : targets) {
    if (!mig::EntryFor(config, t) || !t.mig_enabled) continue;
    auto instances = gpus_->mig_backend->List(t.index);
    if (!instances.ok()) {
      return "GPU " + std::to_string(t.index) +
             "'s instances cannot be listed: " + instances.status().message();
    }
    for (const mig::MigBackend::InstanceInfo& i : *instances) {
      if (i.in_use) {
        return "GPU " + std::to_string(t.index) + " has an instance " + mig::ForeignUseText(i.pids);
      }
    }
  }
  std::vector<std::string> holders;
  for (const nlohmann::json& pod : pods) {
    if (PodNodeName(pod) != options_.node || PodFinished(pod)) continue;
    if (PodAsksForStaticMig(pod, options_.gpus.mig_strategy)) holders.push_back(PodKey(pod));
  }
  if (holders.empty()) return "";
  std::string text;
  for (size_t i = 0; i < holders.size() && i < kPodsNamed; ++i) {
    text += (i ? ", " : "") + Printable(holders[i]);
  }
  if (holders.size() > kPodsNamed) {
    text += " and " + std::to_string(holders.size() - kPodsNamed) + " more";
  }
  return "pods on this node still use the static MIG GPUs' instances (" + text + ")";
}

bool MigConfigLabel::InPlace(const mig::MigPartedConfig& config,
                             const std::vector<mig::ApplyTarget>& targets) const {
  bool matched = false;
  for (const mig::ApplyTarget& t : targets) {
    const mig::MigPartedEntry* entry = mig::EntryFor(config, t);
    if (entry == nullptr) continue;
    matched = true;
    if (entry->mig_enabled != t.mig_enabled) return false;
    if (!t.mig_enabled) continue;
    if (t.mig_model == nullptr) return false;
    auto instances = gpus_->mig_backend->List(t.index);
    if (!instances.ok()) return false;
    std::map<std::string, int> have;
    for (const mig::MigBackend::InstanceInfo& i : *instances) {
      ++have[gpu::MigProfileName(*t.mig_model, t.mig_model->profiles[i.profile])];
    }
    if (have != Wanted(*entry)) return false;
  }
  return matched;
}

Status MigConfigLabel::CheckSingle(const mig::MigPartedConfig& config,
                                   const std::vector<mig::ApplyTarget>& targets) const {
  if (options_.gpus.mig_strategy != MigStrategy::kSingle) return OkStatus();
  std::string profile;
  auto add = [&profile](const std::string& name) {
    if (profile.empty()) profile = name;
    if (name == profile) return OkStatus();
    return FailedPreconditionError(
        "the single MIG strategy serves one profile as nvidia.com/gpu, "
        "and this layout has " +
        profile + " and " + name +
        "; name a uniform configuration or run with --mig-strategy "
        "mixed");
  };
  for (const mig::ApplyTarget& t : targets) {
    if (const mig::MigPartedEntry* entry = mig::EntryFor(config, t)) {
      for (const auto& [name, count] : Wanted(*entry)) GPUFRAC_RETURN_IF_ERROR(add(name));
      continue;
    }
    if (!t.mig_enabled || t.mig_model == nullptr) continue;
    // A GPU the configuration leaves alone keeps its instances.
    auto instances = gpus_->mig_backend->List(t.index);
    if (!instances.ok()) return instances.status();
    for (const mig::MigBackend::InstanceInfo& i : *instances) {
      GPUFRAC_RETURN_IF_ERROR(
          add(gpu::MigProfileName(*t.mig_model, t.mig_model->profiles[i.profile])));
    }
  }
  return OkStatus();
}

bool MigConfigLabel::Withdrawn(int gpu) const {
  return std::binary_search(withdrawn_.begin(), withdrawn_.end(), gpu);
}

void MigConfigLabel::Abandon() {
  if (!withdrawn_.empty()) {
    LogInfo("MIG configuration %s given up: the devices of its GPUs are healthy again",
            pending_.c_str());
  }
  pending_.clear();
  withdrawn_.clear();
}

bool MigConfigLabel::SetState(const std::string& state) {
  nlohmann::json value = state.empty() ? nlohmann::json(nullptr) : nlohmann::json(state);
  nlohmann::json patch = {{"metadata", {{"labels", {{std::string(kLabelMigConfigState), value}}}}}};
  StatusOr<nlohmann::json> done = client_->Patch("/api/v1/nodes/" + options_.node, patch);
  if (!done.ok()) {
    LogWarning("cannot set %s=%s on node %s: %s", std::string(kLabelMigConfigState).c_str(),
               state.c_str(), options_.node.c_str(), done.status().message().c_str());
  }
  return done.ok();
}

void MigConfigLabel::Finish(const std::string& name, const Status& result,
                            const std::string& detail) {
  handled_ = name;
  handled_state_ = result.ok() ? "success" : "failed";
  pending_.clear();
  withdrawn_.clear();  // After success the new instances' devices are served healthy.
  if (!SetState(handled_state_)) owed_state_ = handled_state_;
  std::string message = "MIG configuration " + name +
                        (result.ok() ? " applied" + detail : " failed: " + result.message());
  if (result.ok()) {
    LogInfo("%s", message.c_str());
  } else {
    LogWarning("%s", message.c_str());
  }
  // The log has every instance; an event stays short.
  if (message.size() > kEventMessageBytes) message = message.substr(0, kEventMessageBytes) + "...";
  KubeClusterApi(client_).NodeEvent(
      options_.node, std::string(result.ok() ? kReasonMigConfigApplied : kReasonMigConfigFailed),
      message, !result.ok());
}

Status MigConfigLabel::UnknownConfig(const std::string& name) const {
  std::string names;
  for (const mig::MigPartedConfig& c : options_.configs.configs) {
    names += (names.empty() ? "" : ", ") + c.name;
  }
  const std::string where =
      options_.configmap_file.empty()
          ? " among NVIDIA's default configurations, and the agent has no mig-parted ConfigMap "
            "(create gpufrac-mig-parted from deploy/kubernetes/mig-parted-configmap.yaml, then "
            "restart the agent)"
          : " among NVIDIA's default configurations and the mig-parted ConfigMap the agent "
            "read at start from " +
                options_.configmap_file +
                " (after changing the ConfigMap, restart the agent: kubectl -n gpufrac-system "
                "rollout restart daemonset/gpufrac-agent)";
  return NotFoundError("no configuration " + name + where + " (known: " + names + ")");
}

Status MigConfigLabel::CheckApplicable(const mig::MigPartedConfig& config,
                                       const std::vector<mig::ApplyTarget>& targets) const {
  // The agent never switches MIG mode (mig::CheckConfig would say so in the CLI's words).
  for (const mig::ApplyTarget& t : targets) {
    const mig::MigPartedEntry* entry = mig::EntryFor(config, t);
    if (entry == nullptr || entry->mig_enabled == t.mig_enabled) continue;
    const std::string gpu = std::to_string(t.index);
    return FailedPreconditionError(
        "GPU " + gpu + " (" + std::string(t.model->short_name) + ") is " +
        (t.mig_enabled ? "in" : "not in") + " MIG mode but the configuration has " +
        "mig-enabled: " + (entry->mig_enabled ? "true" : "false") +
        " for it; the agent does not switch MIG mode: label the node with a "
        "configuration of mig-enabled: " +
        (t.mig_enabled ? "true" : "false") +
        ", or switch the mode on the node yourself (nvidia-smi -i " + gpu + " -mig " +
        (entry->mig_enabled ? "1" : "0") + ", with no pod using the GPU)");
  }
  if (!gpus_->mig_backend) return UnavailableError("MIG control is not available on this node");
  Status check = mig::CheckConfig(config, targets);
  if (check.ok()) check = CheckSingle(config, targets);
  return check;
}

bool MigConfigLabel::Withdraw(const std::string& name, const mig::MigPartedConfig& config,
                              const std::vector<mig::ApplyTarget>& targets) {
  // The GPUs it would change are withdrawn from the kubelet first, and changed only at a later
  // Sync: by then the kubelet has taken the unhealthy devices and admits no new pod to them, so
  // every pod that may hold an instance is in `pods`. GPUs withdrawn for a configuration the
  // label named before count, as they have been withdrawn as long.
  std::vector<int> matched;
  for (const mig::ApplyTarget& t : targets) {
    if (mig::EntryFor(config, t) != nullptr) matched.push_back(t.index);
  }
  std::sort(matched.begin(), matched.end());
  const bool settled =
      std::includes(withdrawn_.begin(), withdrawn_.end(), matched.begin(), matched.end());
  if (matched != withdrawn_) {
    std::string list;
    for (int index : matched) list += (list.empty() ? "" : ", ") + std::to_string(index);
    LogInfo(
        "MIG configuration %s: the devices of GPU(s) %s are withdrawn from the kubelet until "
        "it is applied",
        name.c_str(), list.c_str());
    withdrawn_ = std::move(matched);
  }
  return settled;
}

bool MigConfigLabel::Sync(const std::vector<nlohmann::json>& pods) {
  if (!owed_state_.empty() && SetState(owed_state_)) owed_state_.clear();
  StatusOr<nlohmann::json> node = KubeClusterApi(client_).GetNode(options_.node);
  if (!node.ok()) {
    LogWarning("reading node %s for its %s label: %s", options_.node.c_str(),
               std::string(kLabelMigConfig).c_str(), node.status().message().c_str());
    return false;
  }
  const std::string name = LabelOf(*node, kLabelMigConfig);
  if (name.empty() || name == handled_) {
    // Removed, or back to the configuration handled last: one that was waiting is given up,
    // and the state it replaced comes back.
    if (!pending_.empty()) {
      Abandon();
      if (LabelOf(*node, kLabelMigConfigState) != handled_state_ && !SetState(handled_state_) &&
          !handled_state_.empty()) {
        owed_state_ = handled_state_;
      }
    }
    return false;
  }
  if (name != pending_) {
    pending_ = name;
    wait_noted_ = false;
  }
  const mig::MigPartedConfig* config = options_.configs.Find(name);
  std::vector<mig::ApplyTarget> targets = Targets();
  if (config != nullptr && gpus_->mig_backend && InPlace(*config, targets)) {
    Finish(name, OkStatus(), " (already in place)");
    return false;
  }
  if (LabelOf(*node, kLabelMigConfigState) != "pending" && !SetState("pending")) return false;
  if (config == nullptr) {
    Finish(name, UnknownConfig(name), "");
    return false;
  }
  if (Status check = CheckApplicable(*config, targets); !check.ok()) {
    Finish(name, check, "");
    return false;
  }
  const bool settled = Withdraw(name, *config, targets);
  if (std::string busy = BusyReason(*config, targets, pods); !busy.empty()) {
    if (!wait_noted_) {
      wait_noted_ = true;
      std::string message = "MIG configuration " + name + " waits: " + busy;
      LogInfo("%s", message.c_str());
      KubeClusterApi(client_).NodeEvent(options_.node, std::string(kReasonMigConfigWaiting),
                                        message, false);
    }
    return false;
  }
  if (!settled) return false;  // Applied at the next Sync, if nothing holds the GPUs then.
  StatusOr<std::vector<std::string>> applied =
      mig::ApplyConfig(*config, targets, *gpus_->mig_backend);
  if (!applied.ok()) {
    Finish(name, applied.status(), "");
    return false;
  }
  std::string detail;
  for (const std::string& line : *applied) detail += (detail.empty() ? ": " : "; ") + line;
  Finish(name, OkStatus(), detail);
  return true;
}

}  // namespace gpufrac::k8s
