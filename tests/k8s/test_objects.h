// Kubernetes objects for the extender's tests, as the API server holds them: nodes with a gpufrac
// inventory, pending pods asking for GPUs, and the bind body kube-scheduler sends.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gpu/catalogue.h"
#include "k8s/inventory.h"

namespace gpufrac::k8s::testing {

// `count` GPUs of `model`, UUIDs "GPU-<node>-<index>", 8 slots each.
inline NodeInventory Inventory(const std::string& node, int count, const std::string& model,
                               GpuMode mode = GpuMode::kShared) {
  NodeInventory inv;
  inv.slots_per_gpu = 8;
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + node + "-" + std::to_string(i);
    g.model = model;
    g.memory_bytes = gpu::FindModel(model)->memory_bytes;
    g.mode = mode;
    inv.gpus.push_back(g);
  }
  return inv;
}

// A node with `inventory` published (none when null) and, besides its hostname, `labels`.
inline nlohmann::json NodeObject(const std::string& name, const NodeInventory* inventory,
                                 const nlohmann::json& labels = nlohmann::json::object()) {
  nlohmann::json node = {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
      {"status", {{"capacity", {{"cpu", "64"}}}}}};
  node["metadata"]["labels"].update(labels);
  if (inventory != nullptr) {
    node["metadata"]["annotations"] = {
        {std::string(kAnnotationInventory), InventoryToJson(*inventory).dump()}};
  }
  return node;
}

inline nlohmann::json NodeObject(const std::string& name, const NodeInventory& inventory,
                                 const nlohmann::json& labels = nlohmann::json::object()) {
  return NodeObject(name, &inventory, labels);
}

// `node` advertising `count` nvidia.com/gpu (NVIDIA's device plugin serving its GPUs), in its
// capacity and allocatable as the kubelet reports them.
inline nlohmann::json WithNvidiaGpus(nlohmann::json node, int count) {
  node["status"]["capacity"]["nvidia.com/gpu"] = std::to_string(count);
  node["status"]["allocatable"]["nvidia.com/gpu"] = std::to_string(count);
  return node;
}

// A pending pod in "default" with one container "main" with these limits.
inline nlohmann::json PodObject(const std::string& name, const nlohmann::json& limits,
                                const nlohmann::json& annotations = nlohmann::json::object(),
                                const std::string& ns = "default") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"annotations", annotations}}},
          {"spec",
           {{"schedulerName", "default-scheduler"},
            {"containers",
             {{{"name", "main"}, {"image", "cuda:12"}, {"resources", {{"limits", limits}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

// Limits asking for `milli` thousandths of one GPU.
inline nlohmann::json FractionLimits(int milli) {
  return {{"gpufrac.io/gpu", "1"}, {"gpufrac.io/gpu-fraction", std::to_string(milli)}};
}

// The ExtenderBindingArgs kube-scheduler posts to bind `pod` to `node`.
inline std::string BindBody(const nlohmann::json& pod, const std::string& node) {
  return nlohmann::json{{"PodName", pod["metadata"]["name"]},
                        {"PodNamespace", pod["metadata"]["namespace"]},
                        {"PodUID", pod["metadata"]["uid"]},
                        {"Node", node}}
      .dump();
}

}  // namespace gpufrac::k8s::testing
