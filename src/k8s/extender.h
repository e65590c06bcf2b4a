// The kube-scheduler extender protocol (filter, prioritize, bind over HTTP + JSON) on top of the
// Ledger. The bodies are exactly what kube-scheduler sends and expects (ExtenderArgs,
// ExtenderFilterResult, HostPriorityList, ExtenderBindingArgs, ExtenderBindingResult of
// k8s.io/kube-scheduler/extender/v1; nodeCacheCapable: node names only, or full node lists).
//
// Binding never double-books a GPU share, also with two extenders racing, a pod deleted
// mid-bind, a node that disappears or an extender that restarted: under the node's lock
// (ClusterApi::LockNode) the node's bookings are re-read from the pods bound to it, the GPUs are
// chosen, the assignment is written on the pod (conditional on its resourceVersion) and the pod
// is bound, before the lock is given back. The books are otherwise kept from the pod and node
// watches (OnPod, OnNode, ...), and rebuilt from the pods on start.
//
// With reservations (ExtenderOptions::reservations), every change of a pod's booking is also
// told to Reservations, which keeps one reservation pod per GPU with fractional bookings; it acts
// on the API server on its own schedule, so a reservation never delays or fails a bind.
#pragma once

#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "k8s/cluster_api.h"
#include "k8s/ledger.h"
#include "k8s/object_fields.h"
#include "k8s/reservations.h"

namespace gpufrac::k8s {

struct ExtenderOptions {
  std::string holder = "gpufrac-extender";  // Names this extender in node locks (unique each).
  // A node lock lapses after lock_ttl, so that a crashed extender cannot block a node; a bind
  // writes nothing once less than lock_margin of it is left.
  std::chrono::seconds lock_ttl{60};
  std::chrono::seconds lock_margin{10};
  std::chrono::milliseconds lock_wait{5000};  // How long bind waits for another's lock.
  Reservations* reservations = nullptr;       // Told of every booking when set; must outlive.
};

class Extender {
 public:
  // `ledger` and `api` must outlive the extender.
  Extender(Ledger* ledger, ClusterApi* api, ExtenderOptions options = {});

  // Request body in, response body out (HTTP 200 either way: errors go in the "Error" field,
  // as kube-scheduler expects).
  std::string Filter(const std::string& body);
  std::string Prioritize(const std::string& body);
  std::string Bind(const std::string& body);

  // The watches' view of the cluster. A pod counts while it is bound to the node of its
  // assignment and not finished; a node while it carries a gpufrac inventory.
  void OnPod(const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);
  void OnNode(const nlohmann::json& node);
  void OnNodeDeleted(const nlohmann::json& node);

  // Counters for metrics and tests.
  struct Stats {
    uint64_t filters = 0, prioritizes = 0, binds = 0, bind_failures = 0, lock_conflicts = 0;
  };
  Stats stats() const;

 private:
  // Binds under the node's lock, asked for at `locked`; `assigned` gets the GPUs in words, and
  // `unreserved` whether reservation pods are on but a fraction got no reservation because the
  // node advertises no nvidia.com/gpu. Its
  // steps: read the pod again, stop if it is bound already (AlreadyBound) or another extender is
  // binding it elsewhere (YieldToAnotherBind), choose GPUs on the node's fresh bookings, record
  // them on the pod (WriteAssignment), bind, and book; a failed bind erases the record.
  Status BindLocked(const nlohmann::json& pod, const std::string& node,
                    std::chrono::steady_clock::time_point locked, std::string* assigned,
                    bool* unreserved);
  // The lock expires on its own (so that a crashed extender cannot block a node): every write
  // is made only while it certainly still holds, with a margin for the write itself.
  Status StillLocked(const std::string& node, std::chrono::steady_clock::time_point locked) const;
  // True when `pod` is bound to `node` already with its GPUs (a retried bind: booked again, not
  // chosen again, which would overwrite the record); kFailedPrecondition when bound elsewhere.
  StatusOr<bool> AlreadyBound(const nlohmann::json& pod, const std::string& node);
  // kAborted while `pod` carries another node's assignment younger than the lock's TTL: another
  // extender is binding it there now, and two binds must not both write the record.
  Status YieldToAnotherBind(const nlohmann::json& pod, const std::string& node) const;
  // Writes `assignment` on the pod, conditional on its resourceVersion; an unrelated change
  // meanwhile (status, a label) is read again and the write retried, while the pod is the same,
  // unbound, and its record still `before`.
  Status WriteAssignment(const nlohmann::json& pod, const Assignment& assignment,
                         const std::string& before, const std::string& node,
                         std::chrono::steady_clock::time_point locked);
  // Leaves no record of a booking that did not happen (the pod may be gone already).
  void EraseAssignment(const std::string& ns, const std::string& name);
  Status RefreshNode(const std::string& node);
  // The books change only through these two (mu_ held), so Reservations sees every change.
  void BookLocked(const std::string& pod, const Assignment& assignment);
  void UnbookLocked(const std::string& pod);

  Ledger* ledger_;
  ClusterApi* api_;
  ExtenderOptions options_;
  mutable std::mutex mu_;  // Guards ledger_ and stats_.
  Stats stats_;
  std::set<std::string> warned_;  // UIDs of pods told about an invalid request.
  std::set<std::string> gone_;    // UIDs of deleted pods.
  // Nodes that advertise no nvidia.com/gpu: a reservation pod there would reserve nothing (the
  // kubelet drops a resource its node does not have and admits the pod), so none is made.
  std::set<std::string> without_nvidia_gpu_;
};

}  // namespace gpufrac::k8s
