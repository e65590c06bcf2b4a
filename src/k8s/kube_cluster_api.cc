// The extender's and the agent's calls, as API-server requests.
#include "k8s/kube_cluster_api.h"

#include <chrono>
#include <ctime>

#include "common/log.h"
#include "common/text.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

std::string PodPath(const std::string& ns, const std::string& name) {
  return "/api/v1/namespaces/" + ns + "/pods/" + name;
}

// The objects of a list answer.
std::vector<json> ItemsOf(json list) {
  std::vector<json> items;
  if (list.contains("items") && list["items"].is_array()) {
    for (json& item : list["items"]) items.push_back(std::move(item));
  }
  return items;
}

int64_t NowSeconds() { return static_cast<int64_t>(std::time(nullptr)); }

// The lock annotation's holder and expiry; empty holder when unset or unreadable.
std::pair<std::string, int64_t> ParseLock(const std::string& value) {
  size_t space = value.rfind(' ');
  if (space == std::string::npos) return {"", 0};
  try {
    return {value.substr(0, space), std::stoll(value.substr(space + 1))};
  } catch (...) {
    return {"", 0};
  }
}

}  // namespace

StatusOr<json> KubeClusterApi::GetPod(const std::string& ns, const std::string& name) {
  return client_->Get(PodPath(ns, name));
}

StatusOr<std::vector<json>> KubeClusterApi::ListPodsOnNode(const std::string& node) {
  ListOptions options;
  options.field_selector = "spec.nodeName=" + node;
  GPUFRAC_ASSIGN_OR_RETURN(json list, client_->List("/api/v1/pods", options));
  return ItemsOf(std::move(list));
}

StatusOr<json> KubeClusterApi::CreatePod(const std::string& ns, const json& pod) {
  return client_->Create("/api/v1/namespaces/" + ns + "/pods", pod);
}

Status KubeClusterApi::DeletePod(const std::string& ns, const std::string& name,
                                 const std::string& uid) {
  json options = nullptr;
  if (!uid.empty()) options = {{"preconditions", {{"uid", uid}}}};
  return client_->Delete(PodPath(ns, name), options).status();
}

StatusOr<std::vector<json>> KubeClusterApi::ListPods(const std::string& ns,
                                                     const std::string& label_selector) {
  ListOptions options;
  options.label_selector = label_selector;
  GPUFRAC_ASSIGN_OR_RETURN(json list, client_->List("/api/v1/namespaces/" + ns + "/pods", options));
  return ItemsOf(std::move(list));
}

Status KubeClusterApi::AnnotatePod(const std::string& ns, const std::string& name,
                                   const std::string& resource_version,
                                   const std::vector<std::pair<std::string, std::string>>& set) {
  json annotations = json::object();
  for (const auto& [key, value] : set) {
    annotations[key] = value.empty() ? json(nullptr) : json(value);
  }
  json patch = {{"metadata", {{"annotations", annotations}}}};
  if (!resource_version.empty()) patch["metadata"]["resourceVersion"] = resource_version;
  return client_->Patch(PodPath(ns, name), patch).status();
}

Status KubeClusterApi::BindPod(const std::string& ns, const std::string& name,
                               const std::string& uid, const std::string& node) {
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  if (!uid.empty()) binding["metadata"]["uid"] = uid;
  return client_->Create(PodPath(ns, name) + "/binding", binding).status();
}

Status KubeClusterApi::LockNode(const std::string& node, const std::string& holder,
                                std::chrono::seconds ttl) {
  const std::string path = "/api/v1/nodes/" + node;
  GPUFRAC_ASSIGN_OR_RETURN(json current, client_->Get(path));
  auto [owner, expiry] = ParseLock(AnnotationOf(current, kAnnotationLock));
  if (!owner.empty() && owner != holder && expiry > NowSeconds()) {
    return AbortedError("node " + node + " is locked by " + owner);
  }
  json patch = {{"metadata",
                 {{"resourceVersion", MetaOf(current, "resourceVersion")},
                  {"annotations",
                   {{std::string(kAnnotationLock),
                     holder + " " + std::to_string(NowSeconds() + ttl.count())}}}}}};
  return client_->Patch(path, patch).status();
}

void KubeClusterApi::UnlockNode(const std::string& node, const std::string& holder) {
  const std::string path = "/api/v1/nodes/" + node;
  StatusOr<json> current = client_->Get(path);
  if (!current.ok() || ParseLock(AnnotationOf(*current, kAnnotationLock)).first != holder) return;
  json patch = {{"metadata",
                 {{"resourceVersion", MetaOf(*current, "resourceVersion")},
                  {"annotations", {{std::string(kAnnotationLock), nullptr}}}}}};
  Status s = client_->Patch(path, patch).status();
  if (!s.ok()) LogDebug("unlock %s: %s (it expires anyway)", node.c_str(), s.message().c_str());
}

void KubeClusterApi::PodEvent(const json& pod, const std::string& reason,
                              const std::string& message, bool warning) {
  const std::string ns = MetaOf(pod, "namespace"), name = MetaOf(pod, "name");
  const std::string now = Rfc3339(std::chrono::system_clock::now());
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", name + "."}, {"namespace", ns}}},
                {"involvedObject",
                 {{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"namespace", ns},
                  {"name", name},
                  {"uid", MetaOf(pod, "uid")}}},
                {"reason", reason},
                {"message", message},
                {"type", warning ? "Warning" : "Normal"},
                {"source", {{"component", "gpufrac"}}},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  Status s = client_->Create("/api/v1/namespaces/" + ns + "/events", event).status();
  if (!s.ok()) LogDebug("event on %s/%s: %s", ns.c_str(), name.c_str(), s.message().c_str());
}

}  // namespace gpufrac::k8s
