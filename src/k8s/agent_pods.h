// Which pods are the gpufrac agent's (the DaemonSet of deploy/kubernetes/agent-daemonset.yaml),
// and whether the agent of each node is Ready, from the extender's pod watch. A killed agent
// (SIGKILL, an OOM kill: no withdrawal of its inventory) is not Ready within about a second (the
// kubelet's relist), long before the kubelet's node status shows its devices gone (up to 10 s),
// and the kubelet fails every pod it admits meanwhile: the extender keeps new pods off such a
// node (Extender::Filter, Extender::Bind).
//
// Trust: a pod counts as an agent pod only in the agent's namespace, with the selector's labels,
// bound to a node, and with a DaemonSet (apps/v1) as its controller. Whoever may create pods in
// that namespace may already run one as the agent's service account, which may patch any node's
// inventory; a pod author elsewhere cannot open or close a node.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>

#include "common/status.h"

namespace gpufrac::k8s {

struct AgentPodSelector {
  std::string ns = "gpufrac-system";
  // Every one of these labels, with these values.
  std::map<std::string, std::string> labels = {{"app.kubernetes.io/name", "gpufrac-agent"}};
};

// `ns` and an equality selector "key=value,key2=value2" (`=` or `==`), as --agent-namespace and
// --agent-selector give them. kInvalidArgument for an empty namespace or selector, a term without
// a value, or an operator other than equality (!=, in, notin, exists), saying so.
StatusOr<AgentPodSelector> ParseAgentPodSelector(const std::string& ns,
                                                 const std::string& selector);

// Whether `pod` is an agent pod by the rules above (its phase and readiness aside).
bool IsAgentPod(const AgentPodSelector& selector, const nlohmann::json& pod);

// The condition Ready of the pod's status is "True".
bool PodReady(const nlohmann::json& pod);

// The agent pods of every node, as the watch last showed them. Not thread-safe.
class AgentPods {
 public:
  explicit AgentPods(AgentPodSelector selector) : selector_(std::move(selector)) {}

  // A pod added or changed (any pod: the others are ignored) or deleted. Returns the node
  // whose agent became Ready again ("" for none): its waiting pods may fit now.
  std::string OnPod(const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);

  // False while the node has an agent pod and none of its agent pods is Ready (two during a
  // rolling update). A node with no agent pod known is open: its inventory alone decides, as
  // for an agent run outside Kubernetes or under other labels, and an agent pod deleted (a
  // stopping agent) has withdrawn its inventory first.
  bool Open(const std::string& node) const;

 private:
  AgentPodSelector selector_;
  struct Entry {
    std::string node;
    bool ready = false;
  };
  std::map<std::string, Entry> pods_;                   // By UID.
  std::map<std::string, std::set<std::string>> ready_;  // By node: UIDs of its Ready agent pods.
  std::map<std::string, int> count_;                    // By node: its agent pods.
  void Forget(const std::string& uid);
};

}  // namespace gpufrac::k8s
