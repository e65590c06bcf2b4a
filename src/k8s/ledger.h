// The scheduler extender's books: every node's GPUs (from the inventories the node agents
// publish) and every pod's booking (from the assignments on pods), and the decisions made on
// them: which nodes a pod fits, how good each is, and the exact GPUs or MIG placement on the one
// the scheduler picks. Shared and whole GPUs are placed by the placement library's policy (the
// same code as the node service and the simulator); MIG GPUs by the MIG planner. Not thread-safe:
// the extender serialises calls.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "k8s/assignment.h"
#include "k8s/inventory.h"
#include "k8s/pod_request.h"
#include "placement/policies.h"

namespace gpufrac::k8s {

struct LedgerOptions {
  // A placement policy name (placement/policies.h).
  std::string policy = std::string(placement::kDefaultPolicy);
};

class Ledger {
 public:
  // kInvalidArgument for an unknown policy.
  static StatusOr<std::unique_ptr<Ledger>> Create(LedgerOptions options = {});
  ~Ledger();

  // Adds or replaces a node's GPUs. Bookings on it stay; a booking on a GPU that is gone or
  // changed mode keeps nothing (it is reported by Overbooked until the pod ends).
  void SetNode(const std::string& node, const NodeInventory& inventory);
  void RemoveNode(const std::string& node);
  bool HasNode(const std::string& node) const;
  // The node's GPUs as last set; nullopt for an unknown node.
  std::optional<NodeInventory> InventoryOf(const std::string& node) const;

  // Records that `pod` ("namespace/name") holds `assignment` (replacing what it held). Bookings
  // on a node not (yet) known are kept and counted when the node appears. Never refused: the
  // books must reflect what pods hold even when that is more than a GPU has (see Overbooked).
  void Book(const std::string& pod, const Assignment& assignment);
  // Forgets a pod's booking; false when it had none.
  bool Unbook(const std::string& pod);
  std::optional<Assignment> BookingOf(const std::string& pod) const;
  // Pods with a booking on `node`.
  std::vector<std::string> PodsOn(const std::string& node) const;
  size_t booking_count() const;

  // How `request` fits each of `nodes`: fits, a score (higher is better: the policy's, and among
  // nodes the policy scores alike, the one with more of its GPUs booked; only comparable
  // within one call), or a reason in words when it does not ("no gpufrac agent on this node",
  // "no GPU with 4 GiB free (largest free: 2.5 GiB)", ...).
  struct Verdict {
    bool fits = false;
    double score = 0;
    std::string reason;
  };
  std::vector<Verdict> Evaluate(const PodRequest& request, const std::vector<std::string>& nodes);

  // The exact GPUs (or MIG placements) `request` gets on `node`, for every container; the
  // caller books it with Book once it is recorded. kResourceExhausted (with the reason) when it
  // does not fit there; kNotFound for an unknown node.
  StatusOr<Assignment> Choose(const PodRequest& request, const std::string& node);

  // Pods whose bookings exceed what their GPUs have (after a race between schedulers that the
  // API server's checks should prevent, or a node that shrank), for logs and tests.
  std::vector<std::string> Overbooked() const;

 private:
  struct Impl;
  explicit Ledger(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::k8s
