// Places requests one at a time: filters the nodes a request fits, asks the policy for scores,
// takes the best node (the tie-break ranking decides between equal scores) and the policy's GPUs
// on it. Scores are cached per kind of request and refreshed only for nodes that changed since,
// so a placement costs O(changed nodes · log N), not a scan of every node.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "placement/cluster.h"
#include "placement/policy.h"
#include "placement/request.h"

namespace gpufrac::placement {

class Scheduler {
 public:
  // `rank` is a permutation of 0..cluster->size()-1: among nodes with the best score, the one
  // with the lowest rank wins. The cluster and policy must outlive the scheduler, and the
  // cluster may change only through this scheduler or Cluster::Apply/Release.
  Scheduler(Cluster* cluster, Policy* policy, std::vector<int> rank);

  // The best placement for r, or nullopt when it fits no node. Changes nothing.
  std::optional<Placement> Choose(const Request& r);

  // Choose, then apply the placement to the cluster.
  std::optional<Placement> Place(const Request& r);

  // n's score for r as Choose sees it (from the same cache), or nullopt when r does not fit n.
  // For callers that rank nodes themselves, e.g. the Kubernetes scheduler extender.
  std::optional<double> Score(int node, const Request& r);

  // Gives back a placement made by Place.
  void Release(const Placement& p, const Request& r) { cluster_->Release(p, r); }

 private:
  // Scores of every node for one kind of request, in a max-tree whose leaves are in rank order,
  // so that the best node with the lowest rank is found by one walk down.
  struct KindCache {
    std::vector<double> tree;  // tree[1] is the root; leaves from leaf_base_.
    size_t log_position = 0;   // How much of the cluster's change log is reflected.
    uint64_t last_used = 0;
  };

  double NodeScore(int node, const Request& r);
  KindCache& CacheFor(const Request& r);
  void Refresh(KindCache& kind, const Request& r);
  void Rebuild(KindCache& kind, const Request& r);
  std::optional<int> BestNode(const KindCache& kind) const;
  std::optional<int> ScanAll(const Request& r);
  void EvictIfFull();

  Cluster* cluster_;
  Policy* policy_;
  std::vector<int> rank_;          // node -> rank
  std::vector<int> node_at_rank_;  // rank -> node
  size_t leaf_base_ = 1;           // Power of two >= node count.
  std::unordered_map<Request, KindCache, RequestHash> cache_;
  std::vector<uint64_t> seen_;  // Per node: the refresh pass that last rescored it.
  // The kind CacheFor returned last: callers score many nodes for one request in a row.
  KindCache* last_kind_ = nullptr;
  Request last_request_;
  uint64_t pass_ = 0;
  uint64_t uses_ = 0;
};

}  // namespace gpufrac::placement
