// Field access on Kubernetes objects held as JSON.
#include "k8s/object_fields.h"

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/text.h"

namespace gpufrac::k8s {

using nlohmann::json;

const json* FieldOf(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto exact = object.find(std::string(key));
  if (exact != object.end()) return &*exact;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (EqualsIgnoreCase(it.key(), key)) return &*it;
  }
  return nullptr;
}

std::string StringOf(const json& object, std::string_view key) {
  const json* v = FieldOf(object, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

std::string MetaOf(const json& object, std::string_view key) {
  const json* metadata = FieldOf(object, "metadata");
  return metadata != nullptr ? StringOf(*metadata, key) : "";
}

namespace {

// metadata.<map>[key], or "".
std::string MetadataMapValue(const json& object, std::string_view map, std::string_view key) {
  const json* metadata = FieldOf(object, "metadata");
  const json* values = metadata != nullptr ? FieldOf(*metadata, map) : nullptr;
  return values != nullptr ? StringOf(*values, key) : "";
}

}  // namespace

std::string AnnotationOf(const json& object, std::string_view key) {
  return MetadataMapValue(object, "annotations", key);
}

std::string LabelOf(const json& object, std::string_view key) {
  return MetadataMapValue(object, "labels", key);
}

std::string PodKey(const json& pod) { return MetaOf(pod, "namespace") + "/" + MetaOf(pod, "name"); }

std::string PodNodeName(const json& pod) {
  const json* spec = FieldOf(pod, "spec");
  return spec != nullptr ? StringOf(*spec, "nodeName") : "";
}

bool PodFinished(const json& pod) {
  const json* status = FieldOf(pod, "status");
  std::string phase = status != nullptr ? StringOf(*status, "phase") : "";
  return phase == "Succeeded" || phase == "Failed";
}

std::optional<Assignment> AssignmentOf(const json& pod) {
  std::string text = AnnotationOf(pod, kAnnotationAssignment);
  if (text.empty()) return std::nullopt;
  StatusOr<Assignment> a =
      AssignmentFromJson(json::parse(text, nullptr, /*allow_exceptions=*/false));
  if (!a.ok()) {
    LogWarning("pod %s: ignoring its assignment: %s", PodKey(pod).c_str(),
               a.status().message().c_str());
    return std::nullopt;
  }
  return *a;
}

std::optional<Assignment> LiveAssignmentOn(const json& pod, const std::string& node) {
  if (PodFinished(pod)) return std::nullopt;
  std::optional<Assignment> a = AssignmentOf(pod);
  if (!a || a->node != node) return std::nullopt;
  return a;
}

}  // namespace gpufrac::k8s
