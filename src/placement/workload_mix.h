// The workload mix a fragmentation-aware policy (fgd, gpufrac) is measured against, kept up to
// date by whoever places work: counts of requests by kind, and the policy rebuilt from them when
// the mix has moved. Shared by the node service and the Kubernetes extender.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "common/status.h"
#include "placement/cluster.h"
#include "placement/policy.h"
#include "placement/request.h"
#include "placement/typical_workload.h"

namespace gpufrac::placement {

class PolicyWithMix {
 public:
  // The policy `name` on `cluster` (which must outlive this), first built from an empty mix.
  // kInvalidArgument for an unknown name.
  static StatusOr<PolicyWithMix> Create(std::string_view name, const Cluster* cluster);

  Policy& policy() const { return *policy_; }

  // One more (delta > 0) or fewer request of `request`'s kind in the mix (its memory is not
  // part of the kind).
  void Count(const Request& request, int64_t delta);
  // The mix changed in a way that moves it towards a rebuild (the node service counts new
  // requests; the extender, bookings made and removed).
  void NoteChange() { ++changes_; }

  // Rebuilds the policy from the mix when it measures against one and the mix has moved enough:
  // 64 changes (or an eighth of the requests it was built from, if more), or any change once
  // `max_age_ms` of the caller's time has passed; always with `force`. The cluster may have been
  // replaced since (its nodes are read again). True if it rebuilt.
  bool Refresh(int64_t now_ms, const Cluster* cluster, bool force = false,
               int64_t max_age_ms = kNoMaxAge);

  static constexpr int64_t kNoMaxAge = INT64_MAX;

 private:
  using Kind = std::tuple<uint64_t, uint32_t, uint32_t, ModelSet>;  // cpu, share, count, models

  PolicyWithMix() = default;

  std::string name_;
  bool needs_mix_ = false;
  std::map<Kind, int64_t> counts_;
  // The policy refers to the typical workload: declared after it, so destroyed first.
  std::unique_ptr<TypicalWorkload> typical_;
  std::unique_ptr<Policy> policy_;
  int64_t changes_ = 0;
  int64_t built_size_ = 0;  // Requests it was last built from.
  int64_t built_ms_ = 0;
};

}  // namespace gpufrac::placement
