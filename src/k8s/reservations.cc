// Reservation pods: the index of fractional bookings per GPU, the pod that reserves a GPU, and
// the create/delete/reconcile loop against the API server.
#include "k8s/reservations.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/text.h"
#include "common/units.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;

constexpr size_t kMaxNameLength = 63;  // A DNS label: also usable as the pod's hostname.

// FNV-1a: stable across processes and builds (std::hash is neither), so every extender replica
// derives the same name.
uint64_t Fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool Alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

std::string StatusReason(const json& pod) {
  const json* status = FieldOf(pod, "status");
  if (status == nullptr) return "";
  std::string reason = StringOf(*status, "reason"), message = StringOf(*status, "message");
  if (!message.empty()) reason += (reason.empty() ? "" : ": ") + message;
  return reason;
}

}  // namespace

bool NeedsReservation(const GpuGrant& grant) {
  return !grant.mig.has_value() && grant.milli < kMilliPerGpu;
}

std::string ReservationPodName(const std::string& node, int gpu) {
  const std::string prefix = "gpufrac-reserve-";
  const std::string suffix = "-gpu" + std::to_string(gpu);
  std::string lowered = node;
  for (char& c : lowered) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (!Alnum(c) && c != '.' && c != '-') c = '-';
  }
  std::string name = prefix + lowered + suffix;
  if (name.size() <= kMaxNameLength && lowered == node) return name;
  // Too long (or not a plain DNS name): keep what fits of the node's name and add a hash of the
  // original, so that two long names sharing a beginning stay apart.
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(Fnv1a(node + "/" + std::to_string(gpu))));
  std::string tail = "-" + std::string(hash, 10) + suffix;
  std::string head = prefix + lowered;
  if (head.size() + tail.size() > kMaxNameLength) head.resize(kMaxNameLength - tail.size());
  // Labels of a DNS name start and end alphanumeric: no "-" or "." before the tail.
  while (!head.empty() && !Alnum(head.back())) head.pop_back();
  return head + tail;
}

json ReservationPod(const ReservationOptions& options, const std::string& node, int gpu,
                    const std::string& uuid) {
  // Requests equal to limits: QoS class Guaranteed, the last to be evicted under node pressure.
  json small = {{"cpu", "10m"}, {"memory", "16Mi"}, {"nvidia.com/gpu", "1"}};
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", ReservationPodName(node, gpu)},
        {"namespace", options.ns},
        {"labels",
         {{std::string(kReservationLabelKey), std::string(kReservationLabelValue)},
          {"app.kubernetes.io/part-of", "gpufrac"},
          {"app.kubernetes.io/managed-by", "gpufrac-extender"}}},
        {"annotations",
         {{std::string(kAnnotationReserves), uuid},
          {std::string(kAnnotationReservedNode), node},
          {std::string(kAnnotationReservedIndex), std::to_string(gpu)}}}}},
      {"spec",
       {// Bound here directly: no scheduler decides, and none can put it elsewhere.
        {"nodeName", node},
        {"restartPolicy", "Always"},
        {"terminationGracePeriodSeconds", 0},
        {"automountServiceAccountToken", false},
        {"enableServiceLinks", false},
        // Never kept off or evicted by a taint: the GPU is in use whatever the node's state.
        {"tolerations", json::array({{{"operator", "Exists"}}})},
        // Passes the "restricted" Pod Security Standard, whatever the namespace enforces.
        {"securityContext",
         {{"runAsNonRoot", true},
          {"runAsUser", 65535},
          {"runAsGroup", 65535},
          {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
        {"containers", json::array({{{"name", "reserve"},
                                     {"image", options.image},
                                     {"resources", {{"requests", small}, {"limits", small}}},
                                     {"securityContext",
                                      {{"allowPrivilegeEscalation", false},
                                       {"readOnlyRootFilesystem", true},
                                       {"capabilities", {{"drop", json::array({"ALL"})}}}}}}})}}}};
  if (!options.priority_class.empty()) {
    pod["spec"]["priorityClassName"] = options.priority_class;
  }
  return pod;
}

Reservations::Reservations(ClusterApi* api, ReservationOptions options)
    : api_(api), options_(std::move(options)) {}

Reservations::~Reservations() { Stop(); }

void Reservations::SetPod(const std::string& pod, const std::optional<Assignment>& held) {
  std::vector<std::pair<Key, std::string>> now;
  if (held) {
    for (const ContainerAssignment& c : held->containers) {
      for (const GpuGrant& g : c.gpus) {
        if (!NeedsReservation(g)) continue;
        Key key{held->node, g.index};
        auto same = [&key](const auto& k) { return k.first == key; };
        if (std::none_of(now.begin(), now.end(), same)) now.push_back({key, g.uuid});
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(pod);
  std::vector<Key> before = it != pods_.end() ? it->second : std::vector<Key>{};
  for (const Key& key : before) {
    auto w = want_.find(key);
    if (w == want_.end()) continue;
    if (--w->second.pods <= 0) {
      want_.erase(w);
      dirty_.insert(key);
    }
  }
  std::vector<Key> keys;
  for (const auto& [key, uuid] : now) {
    Want& w = want_[key];
    if (w.pods++ == 0 || w.uuid != uuid) dirty_.insert(key);
    w.uuid = uuid;
    keys.push_back(key);
  }
  if (keys.empty()) {
    if (it != pods_.end()) pods_.erase(it);
  } else {
    pods_[pod] = std::move(keys);
  }
  if (!dirty_.empty()) wake_.notify_all();
}

void Reservations::SetNodeReservable(const std::string& node, bool reservable) {
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = reservable ? unreservable_.erase(node) > 0 : unreservable_.insert(node).second;
  if (!changed) return;
  for (const auto& [key, w] : want_) {
    if (key.first == node) dirty_.insert(key);
  }
  for (const auto& [key, held] : have_) {
    if (key.first == node) dirty_.insert(key);
  }
  wake_.notify_all();
}

std::optional<Reservations::Want> Reservations::WantedLocked(const Key& key) const {
  auto it = want_.find(key);
  if (it == want_.end() || unreservable_.count(key.first) > 0) return std::nullopt;
  return it->second;
}

size_t Reservations::wanted() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& entry : want_) n += unreservable_.count(entry.first.first) == 0 ? 1 : 0;
  return n;
}

Reservations::Stats Reservations::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool Reservations::Create(const Key& key, const std::string& uuid, Held* held) {
  const auto& [node, gpu] = key;
  const std::string name = ReservationPodName(node, gpu);
  StatusOr<json> made = api_->CreatePod(options_.ns, ReservationPod(options_, node, gpu, uuid));
  if (made.ok()) {
    const std::string uid = MetaOf(*made, "uid");
    LogInfo("reserved GPU %d (%s) of node %s for gpufrac's fractions: pod %s/%s", gpu, uuid.c_str(),
            node.c_str(), options_.ns.c_str(), name.c_str());
    *held = Held{uuid, uid};
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.created;
    if (!uid.empty()) made_.insert(uid);
    return true;
  }
  if (made.status().code() == StatusCode::kFailedPrecondition) {
    // Made by another extender replica, or an old one still going away: only a live pod for
    // this very GPU counts.
    StatusOr<json> existing = api_->GetPod(options_.ns, name);
    if (existing.ok() && MetaOf(*existing, "deletionTimestamp").empty() &&
        !PodFinished(*existing) && AnnotationOf(*existing, kAnnotationReserves) == uuid) {
      *held = Held{uuid, MetaOf(*existing, "uid")};
      return true;
    }
    LogDebug("reservation pod %s/%s exists from before; retrying once it is gone",
             options_.ns.c_str(), name.c_str());
    return false;
  }
  LogWarning(
      "cannot create the reservation pod %s/%s for GPU %d of node %s: %s (retrying at "
      "the next reconcile)",
      options_.ns.c_str(), name.c_str(), gpu, node.c_str(), made.status().message().c_str());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.failures;
  return false;
}

bool Reservations::Delete(const std::string& name, const std::string& uid,
                          const std::string& why) {
  Status s = api_->DeletePod(options_.ns, name, uid);
  if (s.ok()) {
    LogInfo("deleted the reservation pod %s/%s: %s", options_.ns.c_str(), name.c_str(),
            why.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.deleted;
    return true;
  }
  if (s.code() == StatusCode::kNotFound) return true;
  if (s.code() == StatusCode::kAborted && !uid.empty()) {
    // Deleted meanwhile and made again, by another replica for a booking this one has not seen
    // yet: that one is not ours to delete.
    LogDebug("the reservation pod %s/%s was replaced meanwhile; leaving the new one",
             options_.ns.c_str(), name.c_str());
    return true;
  }
  LogWarning("cannot delete the reservation pod %s/%s: %s (retrying at the next reconcile)",
             options_.ns.c_str(), name.c_str(), s.message().c_str());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.failures;
  return false;
}

void Reservations::Sync() {
  std::lock_guard<std::mutex> io(io_mu_);
  std::vector<std::pair<Key, std::string>> creates;  // GPU, UUID.
  std::vector<std::pair<Key, std::string>> deletes;  // GPU, uid of the pod.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Key& key : dirty_) {
      std::optional<Want> w = WantedLocked(key);
      auto h = have_.find(key);
      if (w && h == have_.end()) {
        creates.push_back({key, w->uuid});
      } else if (h != have_.end() && (!w || w->uuid != h->second.uuid)) {
        // Another GPU at that index: its reservation is made again by the next Reconcile, once
        // the old pod is gone.
        deletes.push_back({key, h->second.uid});
      }
    }
    dirty_.clear();
  }
  for (const auto& [key, uid] : deletes) {
    if (Delete(ReservationPodName(key.first, key.second), uid, "no fractional booking on the GPU")) {
      std::lock_guard<std::mutex> lock(mu_);
      have_.erase(key);
    }
  }
  for (const auto& [key, uuid] : creates) {
    Held held;
    if (Create(key, uuid, &held)) {
      std::lock_guard<std::mutex> lock(mu_);
      have_[key] = held;
    }
  }
}

Status Reservations::Reconcile() {
  std::lock_guard<std::mutex> io(io_mu_);
  const std::string selector =
      std::string(kReservationLabelKey) + "=" + std::string(kReservationLabelValue);
  StatusOr<std::vector<json>> listed = api_->ListPods(options_.ns, selector);
  if (!listed.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.failures;
    return listed.status().WithContext("listing the GPU reservation pods in " + options_.ns);
  }
  std::map<Key, std::string> want;
  std::set<std::string> made;  // The listed pods this replica created.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, w] : want_) {
      if (unreservable_.count(key.first) == 0) want[key] = w.uuid;
    }
    dirty_.clear();  // Everything is looked at now; changes from here on mark again.
    for (const json& pod : *listed) {
      if (made_.count(MetaOf(pod, "uid")) > 0) made.insert(MetaOf(pod, "uid"));
    }
    made_ = made;  // Forget the pods that are gone.
  }
  std::map<Key, Held> live;
  for (const json& pod : *listed) {
    if (!MetaOf(pod, "deletionTimestamp").empty()) continue;  // Already going.
    const std::string name = MetaOf(pod, "name");
    const std::string node = AnnotationOf(pod, kAnnotationReservedNode);
    const std::string uuid = AnnotationOf(pod, kAnnotationReserves);
    int index = -1;
    try {
      index = std::stoi(AnnotationOf(pod, kAnnotationReservedIndex));
    } catch (...) {
    }
    Key key{node, index};
    auto w = want.find(key);
    std::string why;
    if (PodFinished(pod)) {
      // Typically the kubelet refused it (no nvidia.com/gpu left on the node, or no plugin
      // serving it): say so, and try again with a fresh pod.
      why = "it ended (" + StatusReason(pod) + ")";
      LogWarning("reservation pod %s/%s ended: %s", options_.ns.c_str(), name.c_str(),
                 StatusReason(pod).c_str());
    } else if (w == want.end()) {
      std::optional<std::chrono::system_clock::time_point> created =
          ParseRfc3339(MetaOf(pod, "creationTimestamp"));
      if (made.count(MetaOf(pod, "uid")) == 0 && created &&
          std::chrono::system_clock::now() - *created < options_.orphan_grace) {
        // Perhaps made by another replica for a bind this one has not seen yet.
        LogDebug("keeping the reservation pod %s/%s, made by another replica, until the next "
                 "reconcile",
                 options_.ns.c_str(), name.c_str());
        continue;
      }
      why = "no fractional booking on GPU " + std::to_string(index) + " of node " + node;
    } else if (w->second != uuid) {
      why = "it reserves " + uuid + ", the GPU there is now " + w->second;
    } else if (name != ReservationPodName(node, index) || live.count(key) > 0) {
      why = "another pod reserves that GPU";
    } else {
      live[key] = Held{uuid, MetaOf(pod, "uid")};
      continue;
    }
    // Only the pod looked at: a replacement made meanwhile by another replica stays.
    Delete(name, MetaOf(pod, "uid"), why);
  }
  for (const auto& [key, uuid] : want) {
    Held held;
    if (live.count(key) == 0 && Create(key, uuid, &held)) live[key] = held;
  }
  std::lock_guard<std::mutex> lock(mu_);
  have_ = std::move(live);
  return OkStatus();
}

void Reservations::Start(std::function<bool()> ready) {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker_.joinable()) return;
  stop_ = false;
  worker_ = std::thread([this, ready = std::move(ready)] { RunWorker(ready); });
}

void Reservations::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

void Reservations::RunWorker(std::function<bool()> ready) {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(mu_);
  // Nothing before the books are built: a reconcile then would delete every reservation.
  while (!stop_ && !(ready && ready())) {
    wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
  }
  Clock::time_point next_reconcile = Clock::now();
  while (!stop_) {
    if (Clock::now() >= next_reconcile) {
      lock.unlock();
      if (Status s = Reconcile(); !s.ok()) LogWarning("%s", s.message().c_str());
      lock.lock();
      next_reconcile = Clock::now() + options_.reconcile_period;
      continue;
    }
    wake_.wait_until(lock, next_reconcile, [this] { return stop_ || !dirty_.empty(); });
    if (stop_ || dirty_.empty()) continue;
    wake_.wait_for(lock, options_.settle, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    Sync();
    lock.lock();
  }
}

}  // namespace gpufrac::k8s
