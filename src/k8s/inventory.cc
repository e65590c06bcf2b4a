// The node inventory document (node annotation gpufrac.io/gpus) to and from JSON.
#include "k8s/inventory.h"

#include <nlohmann/json.hpp>
#include <set>

#include "k8s/json_fields.h"

namespace gpufrac::k8s {

using nlohmann::json;

const GpuInfo* FindGpu(const NodeInventory& inventory, int index) {
  for (const GpuInfo& g : inventory.gpus) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

json InventoryToJson(const NodeInventory& inventory) {
  json gpus = json::array();
  for (const GpuInfo& g : inventory.gpus) {
    json gpu = {{"index", g.index},
                {"uuid", g.uuid},
                {"model", g.model},
                {"memory_bytes", g.memory_bytes},
                {"mode", gpu::GpuModeName(g.mode)},
                {"healthy", g.healthy}};
    if (g.mode == GpuMode::kMig) {
      json instances = json::array();
      for (const MigInstanceInfo& m : g.mig) {
        json instance = {
            {"profile", m.profile}, {"start", m.start}, {"size", m.size}, {"uuid", m.uuid}};
        if (!m.pod.empty()) instance["pod"] = m.pod;
        instances.push_back(std::move(instance));
      }
      gpu["mig"] = std::move(instances);
    }
    gpus.push_back(std::move(gpu));
  }
  json document = {
      {"version", 1}, {"slots_per_gpu", inventory.slots_per_gpu}, {"gpus", std::move(gpus)}};
  if (inventory.compute_policy) {
    document["compute_policy"] = ComputePolicyName(*inventory.compute_policy);
  }
  return document;
}

StatusOr<NodeInventory> InventoryFromJson(const json& document) {
  const std::string where = "gpufrac.io/gpus";
  GPUFRAC_ASSIGN_OR_RETURN(int version, JsonField<int>(document, "version", where));
  if (version != 1) {
    return InvalidArgumentError(where + ".version is " + std::to_string(version) +
                                "; this gpufrac reads version 1 (upgrade the extender)");
  }
  NodeInventory inventory;
  GPUFRAC_ASSIGN_OR_RETURN(inventory.slots_per_gpu,
                           JsonField<int>(document, "slots_per_gpu", where));
  const std::string none;
  GPUFRAC_ASSIGN_OR_RETURN(std::string policy,
                           JsonField<std::string>(document, "compute_policy", where, &none));
  if (!policy.empty()) {
    inventory.compute_policy = ParseComputePolicy(policy);
    if (!inventory.compute_policy) {
      return InvalidArgumentError(where + ".compute_policy is \"" + policy +
                                  "\"; expected fair, strict or off (upgrade the extender)");
    }
  }
  GPUFRAC_ASSIGN_OR_RETURN(json gpus, JsonField<json>(document, "gpus", where));
  if (!gpus.is_array()) return InvalidArgumentError(where + ".gpus is not a list");
  std::set<int> seen;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const std::string at = where + ".gpus[" + std::to_string(i) + "]";
    const json& g = gpus[i];
    GpuInfo gpu;
    GPUFRAC_ASSIGN_OR_RETURN(gpu.index, JsonField<int>(g, "index", at));
    GPUFRAC_ASSIGN_OR_RETURN(gpu.uuid, JsonField<std::string>(g, "uuid", at));
    GPUFRAC_ASSIGN_OR_RETURN(gpu.model, JsonField<std::string>(g, "model", at));
    GPUFRAC_ASSIGN_OR_RETURN(gpu.memory_bytes, JsonField<uint64_t>(g, "memory_bytes", at));
    GPUFRAC_ASSIGN_OR_RETURN(std::string mode, JsonField<std::string>(g, "mode", at));
    const bool yes = true;
    GPUFRAC_ASSIGN_OR_RETURN(gpu.healthy, JsonField<bool>(g, "healthy", at, &yes));
    std::optional<GpuMode> parsed = gpu::ParseGpuMode(mode);
    if (!parsed) {
      return InvalidArgumentError(at + ".mode is \"" + mode + "\"; expected whole, shared or mig");
    }
    gpu.mode = *parsed;
    if (gpu.index < 0 || !seen.insert(gpu.index).second) {
      return InvalidArgumentError(at + ".index " + std::to_string(gpu.index) +
                                  " is negative or appears twice");
    }
    if (gpu.mode == GpuMode::kMig) {
      const json none = json::array();
      GPUFRAC_ASSIGN_OR_RETURN(json instances, JsonField<json>(g, "mig", at, &none));
      if (!instances.is_array()) return InvalidArgumentError(at + ".mig is not a list");
      for (size_t k = 0; k < instances.size(); ++k) {
        const std::string in = at + ".mig[" + std::to_string(k) + "]";
        const std::string empty;
        MigInstanceInfo m;
        GPUFRAC_ASSIGN_OR_RETURN(m.profile, JsonField<std::string>(instances[k], "profile", in));
        GPUFRAC_ASSIGN_OR_RETURN(m.start, JsonField<int>(instances[k], "start", in));
        GPUFRAC_ASSIGN_OR_RETURN(m.size, JsonField<int>(instances[k], "size", in));
        GPUFRAC_ASSIGN_OR_RETURN(m.uuid, JsonField<std::string>(instances[k], "uuid", in, &empty));
        GPUFRAC_ASSIGN_OR_RETURN(m.pod, JsonField<std::string>(instances[k], "pod", in, &empty));
        if (m.start < 0 || m.size <= 0) {
          return InvalidArgumentError(in + " has an impossible placement " +
                                      std::to_string(m.start) + ":" + std::to_string(m.size));
        }
        gpu.mig.push_back(std::move(m));
      }
    }
    inventory.gpus.push_back(std::move(gpu));
  }
  std::sort(inventory.gpus.begin(), inventory.gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  return inventory;
}

}  // namespace gpufrac::k8s
