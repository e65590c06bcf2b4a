// Reading the few fields gpufrac needs from Kubernetes objects (pods, nodes) held as JSON, the
// same way in the extender and the node agent. Keys match case-insensitively when no exact key
// exists, as Go's encoding/json reads them (kube-scheduler's extender bodies carry Go names).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "k8s/assignment.h"

namespace gpufrac::k8s {

// object[key] (exact key first, then ignoring case); nullptr when absent or not an object.
const nlohmann::json* FieldOf(const nlohmann::json& object, std::string_view key);
// object[key] when it is a string, else "".
std::string StringOf(const nlohmann::json& object, std::string_view key);
// metadata.<key> ("name", "namespace", "uid", "resourceVersion", "creationTimestamp").
std::string MetaOf(const nlohmann::json& object, std::string_view key);
// metadata.annotations[key], or "".
std::string AnnotationOf(const nlohmann::json& object, std::string_view key);
// metadata.labels[key], or "".
std::string LabelOf(const nlohmann::json& object, std::string_view key);

// "namespace/name".
std::string PodKey(const nlohmann::json& pod);
// spec.nodeName, or "" while unbound.
std::string PodNodeName(const nlohmann::json& pod);
// status.phase is Succeeded or Failed: its containers hold nothing any more.
bool PodFinished(const nlohmann::json& pod);
// The pod's gpufrac.io/assignment when it has a well-formed one (a malformed one is logged and
// ignored: it cannot be honoured, and must not block the node).
std::optional<Assignment> AssignmentOf(const nlohmann::json& pod);
// The same for a pod that has not finished and is booked on `node`; nullopt for any other.
std::optional<Assignment> LiveAssignmentOn(const nlohmann::json& pod, const std::string& node);

}  // namespace gpufrac::k8s
