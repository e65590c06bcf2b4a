// GPU reservation pods (as Run:ai does): while a physical GPU holds at least one fractional
// gpufrac booking, a pause pod bound to its node asks for `nvidia.com/gpu: 1`, so that NVIDIA's
// device plugin, kube-scheduler and other schedulers count that GPU as taken.
//
// The rule: a GPU with at least one fractional booking (a share of a GPU that is not a MIG
// instance and less than the whole GPU) has exactly one reservation pod; any other GPU has none.
// Whole-GPU and MIG bookings get none: a MIG GPU is not an `nvidia.com/gpu` device of NVIDIA's
// plugin (mixed strategy), and a whole-GPU pod is meant to ask for `nvidia.com/gpu` itself when
// it must be seen by other schedulers.
//
// Reservations keeps its own index of which pods hold fractions of which GPUs (fed by the
// extender from the same events as its Ledger) and acts on the API server outside the bind path:
// Sync after changes, Reconcile at start and periodically (create the missing, delete orphans).
// A failure is logged and retried at the next Sync or Reconcile; it never fails a bind.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "k8s/assignment.h"
#include "k8s/cluster_api.h"

namespace gpufrac::k8s {

// The label every reservation pod carries (and the selector Reconcile lists them by).
inline constexpr std::string_view kReservationLabelKey = "app.kubernetes.io/name";
inline constexpr std::string_view kReservationLabelValue = "gpufrac-reservation";
// Annotations on a reservation pod: the reserved GPU's UUID, its node and its index.
inline constexpr std::string_view kAnnotationReserves = "gpufrac.io/reserves";
inline constexpr std::string_view kAnnotationReservedNode = "gpufrac.io/node";
inline constexpr std::string_view kAnnotationReservedIndex = "gpufrac.io/gpu-index";

struct ReservationOptions {
  std::string ns = "gpufrac-system";
  std::string image = "registry.k8s.io/pause:3.9";
  std::string priority_class{};  // priorityClassName of the pods; "" for none.
  // How long the background worker waits after a change before acting (changes arriving
  // together, e.g. a pod's annotation then its binding, are handled once).
  std::chrono::milliseconds settle{500};
  std::chrono::seconds reconcile_period{30};
  // A reservation pod that another replica made is not deleted by Reconcile for want of a
  // booking while younger than this: a replica whose watch has not yet delivered a bind would
  // otherwise delete the reservation another replica just made for it. (Its own, one that ended,
  // or one that reserves another GPU's UUID go at once.)
  std::chrono::seconds orphan_grace{60};
};

// Whether this grant needs its GPU reserved: a fraction of a GPU that is not in MIG.
bool NeedsReservation(const GpuGrant& grant);

// "gpufrac-reserve-<node>-gpu<index>"; when that is longer than 63 characters the node's name is
// cut and a hash of the whole name added, so that the name stays unique, a valid DNS label and
// the same in every extender.
std::string ReservationPodName(const std::string& node, int gpu);
// The pod that reserves GPU `gpu` (UUID `uuid`) of `node`.
nlohmann::json ReservationPod(const ReservationOptions& options, const std::string& node, int gpu,
                              const std::string& uuid);

class Reservations {
 public:
  // `api` must outlive this object.
  Reservations(ClusterApi* api, ReservationOptions options);
  ~Reservations();  // Stops the worker.

  Reservations(const Reservations&) = delete;
  Reservations& operator=(const Reservations&) = delete;

  // `pod` ("namespace/name") now holds `held` (nullopt: nothing). No I/O; wakes the worker.
  void SetPod(const std::string& pod, const std::optional<Assignment>& held);
  // Whether reservations are made on `node` (false while its agent serves nvidia.com/gpu).
  void SetNodeReservable(const std::string& node, bool reservable);

  // Creates the reservations and deletes those no longer needed for the GPUs whose bookings
  // changed since the last Sync. Failures are logged and retried later.
  void Sync();
  // Lists every reservation pod and makes them match the bookings: creates the missing ones,
  // deletes orphans (a GPU without fractional bookings, once older than orphan_grace; another
  // UUID; a finished pod). Only the
  // list failing is an error; other failures are logged and retried later. Must not run before
  // the bookings are known (it would delete the reservations of pods not yet seen).
  Status Reconcile();

  // A worker thread: waits until `ready()` is true, reconciles, then Syncs after every change
  // and Reconciles every reconcile_period, until Stop().
  void Start(std::function<bool()> ready);
  void Stop();

  // The number of GPUs that need a reservation now.
  size_t wanted() const;

  struct Stats {
    uint64_t created = 0, deleted = 0, failures = 0;
  };
  Stats stats() const;

 private:
  using Key = std::pair<std::string, int>;  // Node, GPU index.
  struct Want {
    std::string uuid;
    int pods = 0;  // Pods with a fractional booking on the GPU.
  };

  void RunWorker(std::function<bool()> ready);
  std::optional<Want> WantedLocked(const Key& key) const;
  // A reservation pod believed to exist.
  struct Held {
    std::string uuid;  // The GPU it reserves.
    std::string uid;   // The pod's uid ("" if unknown).
  };
  // Create/delete one reservation; true when the API server now has what was asked (a live
  // pod, whose uid goes to `held`; or not the pod with uid `uid`, "" for any).
  bool Create(const Key& key, const std::string& uuid, Held* held);
  bool Delete(const std::string& name, const std::string& uid, const std::string& why);

  ClusterApi* api_;
  const ReservationOptions options_;

  std::mutex io_mu_;  // One Sync or Reconcile at a time.

  mutable std::mutex mu_;  // Guards what follows.
  std::condition_variable wake_;
  std::map<std::string, std::vector<Key>> pods_;  // Pod -> GPUs it holds fractions of.
  std::map<Key, Want> want_;
  std::map<Key, Held> have_;            // Reservation pods believed to exist.
  std::set<Key> dirty_;                 // GPUs changed since the last Sync.
  std::set<std::string> unreservable_;  // Nodes whose agent serves nvidia.com/gpu.
  std::set<std::string> made_;          // UIDs of the reservation pods this replica created.
  Stats stats_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace gpufrac::k8s
