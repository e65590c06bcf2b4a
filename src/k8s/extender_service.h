// `gpufrac k8s extender`: the scheduler extender as a process. Watches nodes (their GPU
// inventories) and pods (their assignments) into the Ledger, and serves kube-scheduler's
// POST /filter, /prioritize and /bind, plus GET /healthz (200 once the books are built from the
// cluster) and GET /metrics (Prometheus text). With reservation pods on, it also keeps one
// reservation pod per GPU that holds fractional bookings (reservations.h).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/status.h"
#include "k8s/agent_pods.h"
#include "k8s/api_client.h"
#include "k8s/reservations.h"
#include "placement/policies.h"

namespace gpufrac::k8s {

struct ExtenderServiceOptions {
  std::string listen = "0.0.0.0:8888";  // HOST:PORT; port 0 picks a free one.
  std::string policy = std::string(placement::kDefaultPolicy);  // placement/policies.h
  std::string holder;             // Names this replica in pending bookings; "" = hostname/pid.
  bool reservation_pods = false;  // Reserve GPUs with fractional bookings (Run:ai style).
  bool allow_unenforced = false;  // ExtenderOptions::allow_unenforced.
  // ExtenderOptions::scheduler_names, when given (else its defaults).
  std::optional<std::set<std::string>> scheduler_names = std::nullopt;
  // How often one waiting pod may be tried again (Extender::RetryWaiting), at most.
  std::chrono::milliseconds retry_interval{30000};
  ReservationOptions reservation{};  // Namespace, image, ... of the reservation pods.
  AgentPodSelector agent_pods{};     // ExtenderOptions::agent_pods.
};

class ExtenderService {
 public:
  // `client` must outlive the service. Fails on a bad --listen or --policy.
  static StatusOr<std::unique_ptr<ExtenderService>> Create(ApiClient* client,
                                                           ExtenderServiceOptions options);
  ~ExtenderService();

  // Binds the port, starts the watches and serves until Stop(). kUnavailable when the port
  // cannot be bound.
  Status Run();
  void Stop();
  // The bound port once Run has bound it (0 before).
  int port() const;
  // True once the first lists of nodes and pods have been read into the books.
  bool ready() const;

 private:
  struct Impl;
  explicit ExtenderService(std::unique_ptr<Impl> impl);
  // Starts the watches of nodes and pods (and the reservation pods' upkeep).
  void StartWatches();
  // The HTTP routes: the extender's verbs, /healthz and /metrics.
  void AddRoutes();
  // The Prometheus text of /metrics, from the counters now.
  std::string MetricsText() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::k8s
