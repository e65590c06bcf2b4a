// What the scheduler extender needs from the Kubernetes API server, as one small interface: read
// a pod, list the pods on a node, record an assignment, bind, read a node and annotate it
// conditionally (the node's pending bookings), read a namespace's labels, post an event, and
// create, list and delete the GPU reservation pods. The real implementation talks HTTPS to the API
// server (kube_cluster_api.h); tests use an in-memory one. Keeping this narrow is what makes the
// bind protocol testable.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::k8s {

class ClusterApi {
 public:
  virtual ~ClusterApi() = default;

  // The pod as the API server has it now; kNotFound when it is gone.
  virtual StatusOr<nlohmann::json> GetPod(const std::string& ns, const std::string& name) = 0;
  // Every pod bound to `node` (spec.nodeName), in any phase.
  virtual StatusOr<std::vector<nlohmann::json>> ListPodsOnNode(const std::string& node) = 0;
  // Sets (or with an empty value removes) annotations on the pod, only if its resourceVersion
  // is still `resource_version` (kAborted otherwise; kNotFound when the pod is gone).
  virtual Status AnnotatePod(const std::string& ns, const std::string& name,
                             const std::string& resource_version,
                             const std::vector<std::pair<std::string, std::string>>& set) = 0;
  // Creates the pods/binding subresource: kNotFound when the pod is gone, kAborted when it is
  // already bound (or its UID changed).
  virtual Status BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                         const std::string& node) = 0;
  // The node as the API server has it now; kNotFound when it is gone.
  virtual StatusOr<nlohmann::json> GetNode(const std::string& node) = 0;
  // Sets (or with an empty value removes) annotations on the node, only if its resourceVersion
  // is still `resource_version` (kAborted otherwise; kNotFound when the node is gone). The
  // extender's pending bookings (pending_bookings.h) are written so.
  virtual Status AnnotateNode(const std::string& node, const std::string& resource_version,
                              const std::vector<std::pair<std::string, std::string>>& set) = 0;
  // The namespace as the API server has it now (its labels: kLabelAllowUnenforced); kNotFound
  // when it does not exist.
  virtual StatusOr<nlohmann::json> GetNamespace(const std::string& name) = 0;
  // An event on the pod, for `kubectl describe pod` (best effort).
  virtual void PodEvent(const nlohmann::json& pod, const std::string& reason,
                        const std::string& message, bool warning) = 0;

  // For the reservation pods (reservations.h); the defaults answer kFailedPrecondition, so an
  // implementation that never reserves GPUs need not provide them.
  //
  // Creates `pod` in `ns` and returns the stored object; kFailedPrecondition when a pod of that
  // name already exists.
  virtual StatusOr<nlohmann::json> CreatePod(const std::string& ns, const nlohmann::json& pod) = 0;
  // Deletes the pod if its uid is `uid` ("": whatever pod has that name); kNotFound when it is
  // already gone, kAborted when a pod with another uid has the name now.
  virtual Status DeletePod(const std::string& ns, const std::string& name,
                           const std::string& uid) = 0;
  // The pods of `ns` that match `label_selector` ("app.kubernetes.io/name=x"), in any phase.
  virtual StatusOr<std::vector<nlohmann::json>> ListPods(const std::string& ns,
                                                         const std::string& label_selector) = 0;
};

}  // namespace gpufrac::k8s
