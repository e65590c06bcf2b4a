// ClusterApi over the API server (ApiClient): pods, bindings, events, reservation pods, and node
// annotations written with the node's resourceVersion as precondition (a JSON merge patch that
// carries metadata.resourceVersion: 409 Conflict when the node changed meanwhile).
#pragma once

#include "k8s/api_client.h"
#include "k8s/cluster_api.h"

namespace gpufrac::k8s {

class KubeClusterApi : public ClusterApi {
 public:
  // `client` must outlive this object.
  explicit KubeClusterApi(ApiClient* client) : client_(client) {}

  StatusOr<nlohmann::json> GetPod(const std::string& ns, const std::string& name) override;
  StatusOr<std::vector<nlohmann::json>> ListPodsOnNode(const std::string& node) override;
  Status AnnotatePod(const std::string& ns, const std::string& name,
                     const std::string& resource_version,
                     const std::vector<std::pair<std::string, std::string>>& set) override;
  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                 const std::string& node) override;
  StatusOr<nlohmann::json> GetNode(const std::string& node) override;
  StatusOr<nlohmann::json> GetNamespace(const std::string& name) override;
  Status AnnotateNode(const std::string& node, const std::string& resource_version,
                      const std::vector<std::pair<std::string, std::string>>& set) override;
  void PodEvent(const nlohmann::json& pod, const std::string& reason, const std::string& message,
                bool warning) override;
  // An event on the node, for `kubectl describe node` (best effort): in namespace default,
  // involvedObject the Node with the node's name as uid, as the kubelet writes them.
  void NodeEvent(const std::string& node, const std::string& reason, const std::string& message,
                 bool warning);
  StatusOr<nlohmann::json> CreatePod(const std::string& ns, const nlohmann::json& pod) override;
  Status DeletePod(const std::string& ns, const std::string& name, const std::string& uid) override;
  StatusOr<std::vector<nlohmann::json>> ListPods(const std::string& ns,
                                                 const std::string& label_selector) override;

 private:
  void PostEvent(const std::string& ns, const nlohmann::json& involved, const std::string& reason,
                 const std::string& message, bool warning);
  ApiClient* client_;
};

}  // namespace gpufrac::k8s
