// The extender's and the agent's calls, as API-server requests.
#include "k8s/kube_cluster_api.h"

#include <chrono>

#include "common/log.h"
#include "common/text.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

std::string PodPath(const std::string& ns, const std::string& name) {
  return "/api/v1/namespaces/" + ns + "/pods/" + name;
}

std::string NodePath(const std::string& node) { return "/api/v1/nodes/" + node; }

// A merge patch setting (null: removing) annotations, conditional on `resource_version` if given.
json AnnotationPatch(const std::string& resource_version,
                     const std::vector<std::pair<std::string, std::string>>& set) {
  json annotations = json::object();
  for (const auto& [key, value] : set) {
    annotations[key] = value.empty() ? json(nullptr) : json(value);
  }
  json patch = {{"metadata", {{"annotations", annotations}}}};
  if (!resource_version.empty()) patch["metadata"]["resourceVersion"] = resource_version;
  return patch;
}

// The objects of a list answer.
std::vector<json> ItemsOf(json list) {
  std::vector<json> items;
  if (list.contains("items") && list["items"].is_array()) {
    for (json& item : list["items"]) items.push_back(std::move(item));
  }
  return items;
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
  return client_->Patch(PodPath(ns, name), AnnotationPatch(resource_version, set)).status();
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

StatusOr<json> KubeClusterApi::GetNode(const std::string& node) {
  return client_->Get(NodePath(node));
}

StatusOr<json> KubeClusterApi::GetNamespace(const std::string& name) {
  return client_->Get("/api/v1/namespaces/" + name);
}

Status KubeClusterApi::AnnotateNode(const std::string& node, const std::string& resource_version,
                                    const std::vector<std::pair<std::string, std::string>>& set) {
  return client_->Patch(NodePath(node), AnnotationPatch(resource_version, set)).status();
}

void KubeClusterApi::PodEvent(const json& pod, const std::string& reason,
                              const std::string& message, bool warning) {
  const std::string ns = MetaOf(pod, "namespace"), name = MetaOf(pod, "name");
  PostEvent(ns,
            {{"apiVersion", "v1"},
             {"kind", "Pod"},
             {"namespace", ns},
             {"name", name},
             {"uid", MetaOf(pod, "uid")}},
            reason, message, warning);
}

void KubeClusterApi::NodeEvent(const std::string& node, const std::string& reason,
                               const std::string& message, bool warning) {
  PostEvent("default", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}, {"uid", node}},
            reason, message, warning);
}

void KubeClusterApi::PostEvent(const std::string& ns, const json& involved,
                               const std::string& reason, const std::string& message,
                               bool warning) {
  const std::string name = StringOf(involved, "name");
  const std::string now = Rfc3339(std::chrono::system_clock::now());
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", name + "."}, {"namespace", ns}}},
                {"involvedObject", involved},
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
