// The agent pods the extender's watch shows, by node, and the selector that names them.
#include "k8s/agent_pods.h"

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;

// A DaemonSet of apps/v1 is the pod's controller (the one ownerReference with controller true).
bool ControlledByDaemonSet(const json& pod) {
  const json* meta = FieldOf(pod, "metadata");
  const json* owners = meta != nullptr ? FieldOf(*meta, "ownerReferences") : nullptr;
  if (owners == nullptr || !owners->is_array()) return false;
  for (const json& owner : *owners) {
    if (!owner.is_object() || owner.value("controller", false) != true) continue;
    return owner.value("kind", "") == "DaemonSet" && owner.value("apiVersion", "") == "apps/v1";
  }
  return false;
}

}  // namespace

StatusOr<AgentPodSelector> ParseAgentPodSelector(const std::string& ns,
                                                 const std::string& selector) {
  if (Trim(ns).empty()) return InvalidArgumentError("--agent-namespace must not be empty");
  AgentPodSelector out;
  out.ns = Trim(ns);
  out.labels.clear();
  size_t start = 0;
  while (start <= selector.size()) {
    size_t comma = selector.find(',', start);
    if (comma == std::string::npos) comma = selector.size();
    const std::string term = Trim(selector.substr(start, comma - start));
    start = comma + 1;
    if (term.empty()) continue;
    const size_t eq = term.find('=');
    if (eq == std::string::npos || eq == 0 || term[eq - 1] == '!') {
      return InvalidArgumentError("--agent-selector: \"" + term +
                                  "\" is not key=value (only equality selects the agent's pods)");
    }
    const size_t value_at = eq + 1 < term.size() && term[eq + 1] == '=' ? eq + 2 : eq + 1;
    const std::string key = Trim(term.substr(0, eq));
    const std::string value = Trim(term.substr(value_at));
    if (key.empty() || value.empty() || value.find('=') != std::string::npos) {
      return InvalidArgumentError("--agent-selector: \"" + term + "\" is not key=value");
    }
    out.labels[key] = value;
  }
  if (out.labels.empty()) {
    return InvalidArgumentError(
        "--agent-selector must name at least one label, e.g. app.kubernetes.io/name=gpufrac-agent");
  }
  return out;
}

bool IsAgentPod(const AgentPodSelector& selector, const json& pod) {
  if (MetaOf(pod, "namespace") != selector.ns || PodNodeName(pod).empty()) return false;
  for (const auto& [key, value] : selector.labels) {
    if (LabelOf(pod, key) != value) return false;
  }
  return ControlledByDaemonSet(pod);
}

bool PodReady(const json& pod) {
  const json* status = FieldOf(pod, "status");
  const json* conditions = status != nullptr ? FieldOf(*status, "conditions") : nullptr;
  if (conditions == nullptr || !conditions->is_array()) return false;
  for (const json& c : *conditions) {
    if (c.is_object() && c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

std::string AgentPods::OnPod(const json& pod) {
  const std::string uid = MetaOf(pod, "uid");
  if (!IsAgentPod(selector_, pod)) {
    Forget(uid);  // It may have been one (labels are mutable).
    return "";
  }
  const std::string node = PodNodeName(pod);
  const bool ready = !PodFinished(pod) && PodReady(pod);
  const bool was_open = Open(node);
  Forget(uid);
  pods_[uid] = {node, ready};
  ++count_[node];
  if (ready) ready_[node].insert(uid);
  return !was_open && Open(node) ? node : "";
}

void AgentPods::OnPodDeleted(const json& pod) { Forget(MetaOf(pod, "uid")); }

bool AgentPods::Open(const std::string& node) const {
  auto count = count_.find(node);
  if (count == count_.end()) return true;
  auto ready = ready_.find(node);
  return ready != ready_.end() && !ready->second.empty();
}

void AgentPods::Forget(const std::string& uid) {
  auto it = pods_.find(uid);
  if (it == pods_.end()) return;
  const std::string node = it->second.node;
  pods_.erase(it);
  if (--count_[node] == 0) count_.erase(node);
  auto ready = ready_.find(node);
  if (ready != ready_.end()) {
    ready->second.erase(uid);
    if (ready->second.empty()) ready_.erase(ready);
  }
}

}  // namespace gpufrac::k8s
