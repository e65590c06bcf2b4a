// The built-in placement policies, by name. Six reproduce the baselines of the FGD paper's
// simulator exactly (scores are whole numbers and ties go to the scheduler's ranking, as there);
// `gpufrac` is our own and the default.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "placement/policy.h"
#include "placement/typical_workload.h"

namespace gpufrac::placement {

inline constexpr std::string_view kDefaultPolicy = "gpufrac";

struct PolicyOptions {
  // The workload fragmentation is measured against (fgd, gpufrac). Must outlive the policy.
  const TypicalWorkload* typical = nullptr;
  uint64_t seed = 0;  // For random choices (random).
  // The GPUs of each model (gpufrac). Only the nodes' specs are read, when the policy is made.
  const Cluster* cluster = nullptr;
};

// One built-in policy: its name, what it needs to be made, and how.
struct PolicyInfo {
  std::string_view name;
  // It measures fragmentation against PolicyOptions::typical, which its user keeps up to date
  // with the workload mix (and rebuilds the policy when it changes).
  bool needs_typical = false;
  bool needs_cluster = false;  // It reads PolicyOptions::cluster when made.
  std::unique_ptr<Policy> (*make)(const PolicyOptions& options) = nullptr;
};

// The registry: random, dotprod, gpu-clustering, gpu-packing, bestfit, fgd, gpufrac.
std::span<const PolicyInfo> Policies();
// The policy called `name`; nullptr if there is none.
const PolicyInfo* FindPolicy(std::string_view name);
// The names, in the registry's order.
std::vector<std::string_view> PolicyNames();
// The same, joined with ", " for messages.
std::string PolicyNameList();

// The policy called `name`, or a kInvalidArgument error listing the names (or saying what the
// policy needs that `options` lacks).
StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options);

// Each policy by itself (see its file for the rules).
std::unique_ptr<Policy> NewRandomPolicy(uint64_t seed);
std::unique_ptr<Policy> NewDotProductPolicy();
std::unique_ptr<Policy> NewGpuClusteringPolicy();
std::unique_ptr<Policy> NewGpuPackingPolicy();
std::unique_ptr<Policy> NewBestFitPolicy();
std::unique_ptr<Policy> NewFgdPolicy(const TypicalWorkload* typical);
std::unique_ptr<Policy> NewGpufracPolicy(const TypicalWorkload& typical, const Cluster& cluster);

}  // namespace gpufrac::placement
