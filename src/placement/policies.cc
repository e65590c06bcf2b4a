// Looking policies up by name.
#include "placement/policies.h"

namespace gpufrac::placement {

const std::vector<std::string_view>& PolicyNames() {
  static const std::vector<std::string_view> names = {
      "random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd", "gpufrac"};
  return names;
}

std::string PolicyNameList() {
  std::string list;
  for (std::string_view n : PolicyNames()) list += (list.empty() ? "" : ", ") + std::string(n);
  return list;
}

StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options) {
  bool needs_typical = name == "fgd" || name == "gpufrac";
  if (needs_typical && options.typical == nullptr) {
    return InvalidArgumentError("policy " + std::string(name) + " needs a typical workload");
  }
  if (name == "random") return NewRandomPolicy(options.seed);
  if (name == "dotprod") return NewDotProductPolicy();
  if (name == "gpu-clustering") return NewGpuClusteringPolicy();
  if (name == "gpu-packing") return NewGpuPackingPolicy();
  if (name == "bestfit") return NewBestFitPolicy();
  if (name == "fgd") return NewFgdPolicy(options.typical);
  if (name == "gpufrac") {
    if (options.cluster == nullptr) return InvalidArgumentError("policy gpufrac needs the cluster");
    return NewGpufracPolicy(*options.typical, *options.cluster);
  }
  return InvalidArgumentError("unknown policy \"" + std::string(name) + "\"; choose one of " +
                              PolicyNameList());
}

}  // namespace gpufrac::placement
