// The built-in placement policies, by name. Six reproduce the baselines of the FGD paper's
// simulator exactly (scores are whole numbers and ties go to the scheduler's ranking, as there);
// `gpufrac` is our own and the default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "placement/policy.h"
#include "placement/typical_workload.h"

namespace gpufrac::placement {

inline constexpr std::string_view kDefaultPolicy = "gpufrac";

// random, dotprod, gpu-clustering, gpu-packing, bestfit, fgd, gpufrac.
const std::vector<std::string_view>& PolicyNames();
// The same, joined with ", " for messages.
std::string PolicyNameList();

struct PolicyOptions {
  // The workload fragmentation is measured against (fgd, gpufrac). Must outlive the policy.
  const TypicalWorkload* typical = nullptr;
  uint64_t seed = 0;  // For random choices (random).
  // The GPUs of each model (gpufrac). Only the nodes' specs are read, when the policy is made.
  const Cluster* cluster = nullptr;
};

// The policy called `name`, or a kInvalidArgument error listing the names.
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
