// The gpufrac.io/pending document: a JSON array of {"id", "pod", "uid", "expires" (Unix ms),
// "assignment"}.
#include "k8s/pending_bookings.h"

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/text.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {

using nlohmann::json;

std::vector<PendingBooking> PendingBookingsOf(const json& node) {
  std::vector<PendingBooking> out;
  const std::string text = AnnotationOf(node, kAnnotationPending);
  if (text.empty()) return out;
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) {
    LogWarning("node %s: ignoring its %s: not a JSON array",
               Printable(MetaOf(node, "name")).c_str(), std::string(kAnnotationPending).c_str());
    return out;
  }
  for (const json& entry : doc) {
    PendingBooking b;
    const json* expires = entry.is_object() ? FieldOf(entry, "expires") : nullptr;
    const json* assignment = entry.is_object() ? FieldOf(entry, "assignment") : nullptr;
    StatusOr<Assignment> a = assignment != nullptr
                                 ? AssignmentFromJson(*assignment)
                                 : StatusOr<Assignment>(InvalidArgumentError("no assignment"));
    b.id = StringOf(entry, "id");
    b.pod = StringOf(entry, "pod");
    b.uid = StringOf(entry, "uid");
    if (b.id.empty() || b.pod.empty() || expires == nullptr || !expires->is_number_integer() ||
        !a.ok()) {
      LogWarning("node %s: ignoring an unreadable entry of its %s",
                 Printable(MetaOf(node, "name")).c_str(), std::string(kAnnotationPending).c_str());
      continue;
    }
    b.expires_ms = expires->get<int64_t>();
    b.assignment = std::move(*a);
    out.push_back(std::move(b));
  }
  return out;
}

std::string PendingBookingsValue(const std::vector<PendingBooking>& bookings) {
  if (bookings.empty()) return "";
  json doc = json::array();
  for (const PendingBooking& b : bookings) {
    doc.push_back({{"id", b.id},
                   {"pod", b.pod},
                   {"uid", b.uid},
                   {"expires", b.expires_ms},
                   {"assignment", AssignmentToJson(b.assignment)}});
  }
  return doc.dump();
}

std::optional<std::string> LiveLegacyLock(const json& node, int64_t now_s) {
  const std::string value = AnnotationOf(node, kAnnotationLegacyLock);
  const size_t space = value.rfind(' ');
  if (space == std::string::npos || space == 0) return std::nullopt;
  char* end = nullptr;
  const std::string expiry = value.substr(space + 1);
  const long long expires = std::strtoll(expiry.c_str(), &end, 10);
  if (expiry.empty() || *end != '\0' || expires <= now_s) return std::nullopt;
  return value.substr(0, space);
}

}  // namespace gpufrac::k8s
