// The registry of built-in policies, and looking them up by name.
#include "placement/policies.h"

#include <array>

namespace gpufrac::placement {
namespace {

constexpr std::array<PolicyInfo, 7> kPolicies = {{
    {"random", false, false, [](const PolicyOptions& o) { return NewRandomPolicy(o.seed); }},
    {"dotprod", false, false, [](const PolicyOptions&) { return NewDotProductPolicy(); }},
    {"gpu-clustering", false, false, [](const PolicyOptions&) { return NewGpuClusteringPolicy(); }},
    {"gpu-packing", false, false, [](const PolicyOptions&) { return NewGpuPackingPolicy(); }},
    {"bestfit", false, false, [](const PolicyOptions&) { return NewBestFitPolicy(); }},
    {"fgd", true, false, [](const PolicyOptions& o) { return NewFgdPolicy(o.typical); }},
    {"gpufrac", true, true,
     [](const PolicyOptions& o) { return NewGpufracPolicy(*o.typical, *o.cluster); }},
}};

}  // namespace

std::span<const PolicyInfo> Policies() { return kPolicies; }

const PolicyInfo* FindPolicy(std::string_view name) {
  for (const PolicyInfo& p : kPolicies) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string_view> PolicyNames() {
  std::vector<std::string_view> names;
  for (const PolicyInfo& p : kPolicies) names.push_back(p.name);
  return names;
}

std::string PolicyNameList() {
  std::string list;
  for (const PolicyInfo& p : kPolicies) list += (list.empty() ? "" : ", ") + std::string(p.name);
  return list;
}

StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options) {
  const PolicyInfo* info = FindPolicy(name);
  if (info == nullptr) {
    return InvalidArgumentError("unknown policy \"" + std::string(name) + "\"; choose one of " +
                                PolicyNameList());
  }
  if (info->needs_typical && options.typical == nullptr) {
    return InvalidArgumentError("policy " + std::string(name) + " needs a typical workload");
  }
  if (info->needs_cluster && options.cluster == nullptr) {
    return InvalidArgumentError("policy " + std::string(name) + " needs the cluster");
  }
  return info->make(options);
}

}  // namespace gpufrac::placement
