// The scheduler's cached max-trees. A leaf holds a node's score, or -infinity when the request
// does not fit there; an inner entry holds the larger of its children.
#include "placement/scheduler.h"

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "placement/fit.h"

namespace gpufrac::placement {
namespace {

constexpr double kNoFit = -std::numeric_limits<double>::infinity();
// Cached trees are dropped, least recently used first, beyond this many bytes in all.
constexpr size_t kCacheBytes = size_t{64} << 20;

}  // namespace

Scheduler::Scheduler(Cluster* cluster, Policy* policy, std::vector<int> rank)
    : cluster_(cluster), policy_(policy), rank_(std::move(rank)) {
  size_t n = cluster_->size();
  node_at_rank_.assign(n, -1);
  bool permutation = rank_.size() == n;
  for (size_t i = 0; permutation && i < n; ++i) {
    int r = rank_[i];
    permutation = r >= 0 && static_cast<size_t>(r) < n && node_at_rank_[r] == -1;
    if (permutation) node_at_rank_[r] = static_cast<int>(i);
  }
  if (!permutation) {
    std::fprintf(stderr, "gpufrac: internal error: the tie-break ranking is not a permutation\n");
    std::abort();
  }
  while (leaf_base_ < n) leaf_base_ *= 2;
  seen_.assign(n, 0);
}

double Scheduler::NodeScore(int node, const Request& r) {
  const Node& n = cluster_->node(node);
  if (!Fits(n, r)) return kNoFit;
  return policy_->Score(n, r);
}

void Scheduler::Rebuild(KindCache& kind, const Request& r) {
  kind.tree.assign(2 * leaf_base_, kNoFit);
  for (int node = 0; node < cluster_->size(); ++node) {
    kind.tree[leaf_base_ + rank_[node]] = NodeScore(node, r);
  }
  for (size_t i = leaf_base_ - 1; i >= 1; --i) {
    kind.tree[i] = std::max(kind.tree[2 * i], kind.tree[2 * i + 1]);
  }
  kind.log_position = cluster_->change_log().size();
}

void Scheduler::Refresh(KindCache& kind, const Request& r) {
  const std::vector<int>& log = cluster_->change_log();
  size_t pending = log.size() - kind.log_position;
  if (pending == 0) return;
  if (pending >= static_cast<size_t>(cluster_->size()) / 2) {
    Rebuild(kind, r);
    return;
  }
  ++pass_;
  for (size_t i = kind.log_position; i < log.size(); ++i) {
    int node = log[i];
    if (seen_[node] == pass_) continue;
    seen_[node] = pass_;
    size_t leaf = leaf_base_ + rank_[node];
    kind.tree[leaf] = NodeScore(node, r);
    for (size_t p = leaf / 2; p >= 1; p /= 2) {
      double best = std::max(kind.tree[2 * p], kind.tree[2 * p + 1]);
      if (kind.tree[p] == best) break;
      kind.tree[p] = best;
    }
  }
  kind.log_position = log.size();
}

std::optional<int> Scheduler::BestNode(const KindCache& kind) const {
  double best = kind.tree[1];
  if (best == kNoFit) return std::nullopt;
  size_t i = 1;
  while (i < leaf_base_) i = kind.tree[2 * i] == best ? 2 * i : 2 * i + 1;
  return node_at_rank_[i - leaf_base_];
}

std::optional<int> Scheduler::ScanAll(const Request& r) {
  std::optional<int> best_node;
  double best = kNoFit;
  for (int rank = 0; rank < cluster_->size(); ++rank) {
    int node = node_at_rank_[rank];
    double score = NodeScore(node, r);
    if (score > best) {
      best = score;
      best_node = node;
    }
  }
  return best_node;
}

void Scheduler::EvictIfFull() {
  size_t per_kind = 2 * leaf_base_ * sizeof(double);
  size_t max_kinds = std::max<size_t>(8, kCacheBytes / per_kind);
  while (cache_.size() >= max_kinds) {
    auto oldest = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    if (&oldest->second == last_kind_) last_kind_ = nullptr;
    cache_.erase(oldest);
  }
}

Scheduler::KindCache& Scheduler::CacheFor(const Request& r) {
  if (last_kind_ != nullptr && last_request_ == r) {
    Refresh(*last_kind_, r);
    last_kind_->last_used = ++uses_;
    return *last_kind_;
  }
  auto it = cache_.find(r);
  if (it == cache_.end()) {
    EvictIfFull();
    it = cache_.emplace(r, KindCache{}).first;
    Rebuild(it->second, r);
  } else {
    Refresh(it->second, r);
  }
  it->second.last_used = ++uses_;
  last_kind_ = &it->second;  // Map nodes stay put until erased (EvictIfFull forgets it).
  last_request_ = r;
  return it->second;
}

std::optional<Placement> Scheduler::Choose(const Request& r) {
  std::optional<int> node = policy_->volatile_scores() ? ScanAll(r) : BestNode(CacheFor(r));
  if (!node) return std::nullopt;
  const Node& n = cluster_->node(*node);
  return Placement{*node, policy_->ChooseGpus(n, r)};
}

std::optional<double> Scheduler::Score(int node, const Request& r) {
  double score = policy_->volatile_scores() ? NodeScore(node, r)
                                            : CacheFor(r).tree[leaf_base_ + rank_[node]];
  if (score == kNoFit) return std::nullopt;
  return score;
}

std::optional<Placement> Scheduler::Place(const Request& r) {
  std::optional<Placement> p = Choose(r);
  if (p) cluster_->Apply(*p, r);
  return p;
}

}  // namespace gpufrac::placement
