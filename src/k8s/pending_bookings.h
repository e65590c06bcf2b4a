// A node's pending bookings: GPUs chosen for pods that may not be bound yet, kept as one JSON
// document in the node annotation gpufrac.io/pending and always written with the node's
// resourceVersion as precondition. Of two extenders that choose GPUs on a node at once, one
// write fails with a conflict and that extender chooses again, seeing the other's booking; a
// booking stays in the record until a later writer sees its pod bound (its own assignment counts
// from then on), sees it deleted, or it expires.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/assignment.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kAnnotationPending = "gpufrac.io/pending";
// The node lock of earlier versions ("<holder> <expiry, Unix seconds>"): a bind waits while one
// is live, and removes one that has expired.
inline constexpr std::string_view kAnnotationLegacyLock = "gpufrac.io/lock";

struct PendingBooking {
  std::string id;   // This bind attempt: unique, also between extender replicas.
  std::string pod;  // "namespace/name"
  std::string uid;
  int64_t expires_ms = 0;  // Unix time after which it no longer counts.
  Assignment assignment;
  friend bool operator==(const PendingBooking&, const PendingBooking&) = default;
};

// The node's record; entries that cannot be read are left out (and logged): only gpufrac
// writes it, and a damaged entry must not block the node for ever.
std::vector<PendingBooking> PendingBookingsOf(const nlohmann::json& node);
// The annotation's value for `bookings` ("" for none, which removes the annotation).
std::string PendingBookingsValue(const std::vector<PendingBooking>& bookings);

// The holder of a legacy lock that is live at `now_s` (Unix seconds); nullopt when there is none,
// it has expired or it cannot be read.
std::optional<std::string> LiveLegacyLock(const nlohmann::json& node, int64_t now_s);

}  // namespace gpufrac::k8s
