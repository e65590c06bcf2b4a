// The kube-scheduler extender protocol (filter, prioritize, bind over HTTP + JSON) on top of the
// Ledger. The bodies are exactly what kube-scheduler sends and expects (ExtenderArgs,
// ExtenderFilterResult, HostPriorityList, ExtenderBindingArgs, ExtenderBindingResult of
// k8s.io/kube-scheduler/extender/v1; nodeCacheCapable: node names only, or full node lists).
//
// Binding never double-books a GPU share, also with two extenders racing, a pod deleted
// mid-bind, a node that disappears or an extender that restarted, and takes no lock: the GPUs are
// chosen on the node's bookings as the API server has them (its bound pods, re-read, and its
// pending bookings, pending_bookings.h), and added to the node's pending bookings with the
// node's resourceVersion as precondition; on a conflict (another bind wrote first) they are
// chosen again. Then the assignment is written on the pod (conditional on its resourceVersion)
// and the pod is bound, in parallel with other binds to the node. Binds to one node from one
// extender write the node one at a time (others' writes would only conflict), and those that
// wait meanwhile are chosen in turn and written together in the next write. The books are
// otherwise kept from the pod and node watches (OnPod, OnNode, ...), and rebuilt from the pods
// on start.
//
// With reservations (ExtenderOptions::reservations), every change of a pod's booking is also
// told to Reservations, which keeps one reservation pod per GPU with fractional bookings; it acts
// on the API server on its own schedule, so a reservation never delays or fails a bind.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <string_view>

#include "k8s/agent_pods.h"
#include "k8s/cluster_api.h"
#include "k8s/ledger.h"
#include "k8s/object_fields.h"
#include "k8s/pending_bookings.h"
#include "k8s/reservations.h"

namespace gpufrac::k8s {

// Set on a waiting pod to make kube-scheduler try it again (Extender::RetryWaiting).
inline constexpr std::string_view kAnnotationRetry = "gpufrac.io/retry";

// The reason of the warning event on a pod that may not share a GPU (PodRequest::unenforced).
inline constexpr std::string_view kReasonUnenforced = "GpufracNoSharedGpu";

struct ExtenderOptions {
  // Names this extender in its pending bookings (unique each).
  std::string holder = "gpufrac-extender";
  // A pending booking lapses pending_ttl after it was written, so that a crashed extender's
  // choice does not hold GPUs for ever; a bind writes nothing once less than pending_margin of
  // it is left (which also covers clocks that differ between extenders by less).
  std::chrono::seconds pending_ttl{60};
  std::chrono::seconds pending_margin{10};
  // How long a bind keeps writing the node's pending bookings against other writers (and waits
  // for a live lock of an earlier version) before it fails.
  std::chrono::milliseconds node_wait{10000};
  Reservations* reservations = nullptr;  // Told of every booking when set; must outlive.
  // Lets pods share GPUs although a container of theirs can remove its enforcement
  // (PodRequest::unenforced; --allow-unenforced-sharing). Without it only the pods of namespaces
  // labelled kLabelAllowUnenforced=true may.
  bool allow_unenforced = false;
  // The schedulers (spec.schedulerName) whose pods this extender serves, as deploy/kubernetes
  // configures them (scheduler-config.yaml, second-scheduler/); those whose pods it is asked to
  // filter are added. Only their pods are tried again (Extender::RetryWaiting).
  std::set<std::string> scheduler_names = {"default-scheduler", "gpufrac-scheduler"};
  // The agent's pods (--agent-namespace, --agent-selector): while a node has one and none is
  // Ready, no pod asking for gpufrac's resources is placed or bound there (agent_pods.h).
  AgentPodSelector agent_pods = {};
};

// Why the filter refuses a node whose agent is not Ready (FailedScheduling lists it per node).
inline constexpr std::string_view kReasonAgentNotReady =
    "the gpufrac agent pod on this node is not Ready (a killed or restarting agent: the kubelet "
    "would fail the pod)";

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
  // assignment and not finished; a node while it carries a gpufrac inventory and its agent pod,
  // when it has one, is Ready (AgentPods; when it is Ready again, the waiting pods are tried
  // again as for a changed inventory).
  void OnPod(const nlohmann::json& pod);
  void OnPodDeleted(const nlohmann::json& pod);
  void OnNode(const nlohmann::json& node);
  void OnNodeDeleted(const nlohmann::json& node);

  // kube-scheduler keeps a pod it could not place (the extender refused it, or could not be
  // reached) in its unschedulable queue until an event it deems relevant (a change of the pod
  // itself, of a node's allocatable, labels, taints or conditions, a pod deleted) or until
  // podMaxInUnschedulablePodsDuration (5 minutes) has passed. It does not see what changes
  // gpufrac's answer: an extender that was down is back, a node's GPU inventory (an agent that
  // restarted, a GPU healthy again, a new MIG layout). RetryWaiting updates the pods waiting for
  // a node (unbound, unfinished, asking for gpufrac's resources, as the pod watch showed it)
  // that this extender left without one: annotation kAnnotationRetry, the time, conditional on
  // the pod's resourceVersion, which moves it out of that queue at once. Only pods of a
  // scheduler this extender serves (ExtenderOptions::scheduler_names, and those whose pods it was
  // asked to filter) and without spec.schedulingGates (not in that queue), and of those only the
  // ones its last filter call refused (no node fitted; FilterUnanswered), or that were waiting when
  // the extender started (their filter calls found it down). A pod updated less than `min_interval`
  // ago is left alone. Returns how many pods were updated.
  int RetryWaiting(std::chrono::milliseconds min_interval);
  // Whether a node's GPU inventory appeared or changed, a node's agent became Ready again, or a
  // scheduler was first served, since the last RetryWaiting.
  bool retry_wanted() const;
  // A filter call (its body) that was answered with an error before the books were built: its
  // pod counts as refused, and its scheduler as served.
  void FilterUnanswered(const std::string& body);

  // Counters for metrics and tests.
  struct Stats {
    uint64_t filters = 0, prioritizes = 0, binds = 0, bind_failures = 0;
    uint64_t pending_conflicts = 0;  // Writes of a node's pending bookings that lost a race.
  };
  Stats stats() const;

 private:
  // ParsePodRequest, with `unenforced` cleared where the operator allows it: the option, or the
  // label on the pod's namespace (read from the API server; not allowed when it cannot be read).
  StatusOr<PodRequest> RequestOf(const nlohmann::json& pod);
  // Binds `pod` (as read just now) to `node`; `assigned` gets the GPUs in words, and
  // `unreserved` whether reservation pods are on but a fraction got no reservation because the
  // node advertises no nvidia.com/gpu. Its steps: stop if the pod is bound already
  // (AlreadyBound) or another extender is binding it elsewhere (YieldToAnotherBind), choose GPUs
  // and add them to the node's pending bookings (BookPending), record them on the pod
  // (WriteAssignment), bind, and book; a failure leaves neither the record nor the pending
  // booking behind.
  Status BindOnNode(const nlohmann::json& pod, const std::string& node, std::string* assigned,
                    bool* unreserved);
  // Chooses the GPUs for `request` on the node's bound pods and pending bookings, read afresh,
  // and adds them to the pending bookings with the node's resourceVersion as precondition,
  // again after each conflict until options_.node_wait has passed. `written` gets when the
  // successful write was asked for: the booking's lifetime counts from there. Binds to one node
  // that wait while this extender writes it are written together, in one write (WriteBatch).
  StatusOr<PendingBooking> BookPending(const nlohmann::json& pod, const PodRequest& request,
                                       const std::string& node,
                                       std::chrono::steady_clock::time_point* written);
  // One bind's part in a write of the node's pending bookings.
  struct PendingWrite {
    const PodRequest* request = nullptr;
    PendingBooking booking;  // Its id, pod and uid set before; the rest by WriteBatch.
    Status result;           // Why it got no booking.
    std::chrono::steady_clock::time_point written;
    bool taken = false;  // In a batch being written (NodeWrites::mu held).
    bool done = false;   // That batch was written or failed (NodeWrites::mu held).
  };
  // The binds of this extender waiting to write a node's pending bookings.
  struct NodeWrites {
    std::mutex mu;
    std::condition_variable changed;
    bool busy = false;  // A batch is being written.
    std::vector<PendingWrite*> waiting;
  };
  // Chooses GPUs for every bind of `batch` in turn (each counting those before it) and writes
  // those that fit in one write of the node's pending bookings, again after each conflict until
  // `deadline`; sets each one's result.
  void WriteBatch(const std::string& node, const std::vector<PendingWrite*>& batch,
                  std::chrono::steady_clock::time_point deadline);
  // Removes the pending booking `id` from the node (best effort: it expires anyway).
  void DropPending(const std::string& node, const std::string& id);
  // Every write after BookPending is made only while its booking certainly still counts, with a
  // margin for the write itself.
  Status StillPending(const std::string& node, std::chrono::steady_clock::time_point written) const;
  // True when `pod` is bound to `node` already with its GPUs (a retried bind: booked again, not
  // chosen again, which would overwrite the record); kFailedPrecondition when bound elsewhere.
  StatusOr<bool> AlreadyBound(const nlohmann::json& pod, const std::string& node);
  // kAborted while `pod` carries another node's assignment younger than pending_ttl: another
  // extender is binding it there now, and two binds must not both write the record.
  Status YieldToAnotherBind(const nlohmann::json& pod, const std::string& node) const;
  // Writes `assignment` on the pod, conditional on its resourceVersion; an unrelated change
  // meanwhile (status, a label) is read again and the write retried, while the pod is the same,
  // unbound, and its record still `before`.
  Status WriteAssignment(const nlohmann::json& pod, const Assignment& assignment,
                         const std::string& before, const std::string& node,
                         std::chrono::steady_clock::time_point written);
  // Leaves no record of a booking that did not happen (the pod may be gone already).
  void EraseAssignment(const std::string& ns, const std::string& name);
  // Makes the books of `node` those of its bound pods `pods` (mu_ held).
  void RefreshNodeLocked(const std::string& node, const std::vector<nlohmann::json>& pods);
  NodeWrites* WritesOf(const std::string& node);
  // The books change only through these two (mu_ held), so Reservations sees every change.
  void BookLocked(const std::string& pod, const Assignment& assignment);
  void UnbookLocked(const std::string& pod);

  Ledger* ledger_;
  ClusterApi* api_;
  ExtenderOptions options_;
  mutable std::mutex mu_;  // Guards everything below.
  Stats stats_;
  std::set<std::string> warned_;  // UIDs of pods told about an invalid request.
  std::set<std::string> gone_;    // UIDs of deleted pods.
  uint64_t attempts_ = 0;         // Numbers this extender's pending bookings.
  std::map<std::string, std::unique_ptr<NodeWrites>> node_writes_;
  // Nodes that advertise no nvidia.com/gpu: a reservation pod there would reserve nothing (the
  // kubelet drops a resource its node does not have and admits the pod), so none is made.
  std::set<std::string> without_nvidia_gpu_;
  // A filter call's pod was refused (`refused`), or found fitting nodes: RetryWaiting tries again
  // only refused pods, of schedulers seen here.
  void FilterAnswered(const nlohmann::json& pod, bool refused);
  struct Waiting {
    std::string ns, name, resource_version, scheduler;
    bool gated = false;     // Has spec.schedulingGates: kube-scheduler does not try it yet.
    bool at_start = false;  // Waiting before the first RetryWaiting, not yet tried again.
    std::chrono::steady_clock::time_point retried{};
  };
  std::map<std::string, Waiting> waiting_;  // By UID: pods waiting for a node.
  std::set<std::string> refused_;           // UIDs of pods the last filter call refused.
  std::set<std::string> schedulers_;        // Served: options_.scheduler_names and those seen.
  bool started_ = false;                    // RetryWaiting ran once.
  std::map<std::string, std::string> inventories_;  // By node: its inventory annotation.
  AgentPods agent_pods_;                            // Nodes whose agent is not Ready are closed.
  bool retry_wanted_ = false;
};

}  // namespace gpufrac::k8s
