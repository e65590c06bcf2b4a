// Kubernetes objects for the extender's tests, as the API server holds them: nodes with a gpufrac
// inventory, pending pods asking for GPUs, and the bind body kube-scheduler sends.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/text.h"
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
// The status the kubelet writes for a pod of one container, `container`, whose process runs
// (`running`: state running, else terminated as a SIGKILL leaves it, exit code 137) and passes
// its readiness probe (`ready`), after `restarts` restarts: phase Running (restartPolicy Always),
// the conditions Initialized, Ready, ContainersReady and PodScheduled, and containerStatuses, with
// the fields and reasons a kubelet of 1.26 writes.
inline nlohmann::json RunningPodStatus(const std::string& container, bool running, bool ready,
                                       int restarts) {
  const std::string now = Rfc3339(std::chrono::system_clock::now());
  auto condition = [&now](const char* type, bool status) {
    nlohmann::json c = {{"type", type},
                        {"status", status ? "True" : "False"},
                        {"lastProbeTime", nullptr},
                        {"lastTransitionTime", now}};
    return c;
  };
  nlohmann::json ready_condition = condition("Ready", ready);
  nlohmann::json containers_ready = condition("ContainersReady", ready);
  if (!ready) {
    for (nlohmann::json* c : {&ready_condition, &containers_ready}) {
      (*c)["reason"] = "ContainersNotReady";
      (*c)["message"] = "containers with unready status: [" + container + "]";
    }
  }
  const std::string id = "containerd://" + std::to_string(restarts) + "f00d";
  nlohmann::json state = running ? nlohmann::json{{"running", {{"startedAt", now}}}}
                                 : nlohmann::json{{"terminated",
                                                   {{"exitCode", 137},
                                                    {"reason", "Error"},
                                                    {"startedAt", now},
                                                    {"finishedAt", now},
                                                    {"containerID", id}}}};
  return {{"phase", "Running"},
          {"conditions",
           {condition("Initialized", true), ready_condition, containers_ready,
            condition("PodScheduled", true)}},
          {"hostIP", "10.0.0.1"},
          {"podIP", "10.244.0.7"},
          {"podIPs", {{{"ip", "10.244.0.7"}}}},
          {"startTime", now},
          {"qosClass", "Burstable"},
          {"containerStatuses",
           {{{"name", container},
             {"state", state},
             {"lastState", nlohmann::json::object()},
             {"ready", ready},
             {"restartCount", restarts},
             {"image", "docker.io/gpufrac/gpufrac:0.1.0"},
             {"imageID", "docker.io/gpufrac/gpufrac@sha256:0123"},
             {"containerID", id},
             {"started", running}}}}};
}

// The pod of deploy/kubernetes/agent-daemonset.yaml on `node`, as the DaemonSet controller
// creates it (namespace, labels, its controller reference, bound by spec.nodeName) and the
// kubelet reports it; `ns` and `owner_kind` are for pods that only look like it.
inline nlohmann::json AgentPodObject(const std::string& node, bool ready,
                                     const std::string& ns = "gpufrac-system",
                                     const std::string& owner_kind = "DaemonSet") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "gpufrac-agent-" + node},
            {"generateName", "gpufrac-agent-"},
            {"namespace", ns},
            {"labels",
             {{"app.kubernetes.io/name", "gpufrac-agent"},
              {"app.kubernetes.io/part-of", "gpufrac"},
              {"controller-revision-hash", "7d9c5b6f4"},
              {"pod-template-generation", "1"}}},
            {"ownerReferences",
             {{{"apiVersion", "apps/v1"},
               {"kind", owner_kind},
               {"name", "gpufrac-agent"},
               {"uid", "5a0c1d7e-0000-4000-8000-00000000da75"},
               {"controller", true},
               {"blockOwnerDeletion", true}}}}}},
          {"spec",
           {{"nodeName", node},
            {"serviceAccountName", "gpufrac-agent"},
            {"schedulerName", "default-scheduler"},
            {"containers", {{{"name", "agent"}, {"image", "gpufrac/gpufrac:0.1.0"}}}}}},
          {"status", RunningPodStatus("agent", true, ready, 0)}};
}

}  // namespace gpufrac::k8s::testing
