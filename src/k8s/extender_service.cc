// The extender process: reflectors feeding the Extender, and cpp-httplib serving it.
#include "k8s/extender_service.h"

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "common/text.h"
#include "k8s/extender.h"
#include "k8s/kube_cluster_api.h"
#include "k8s/ledger.h"
#include "k8s/reflector.h"

namespace gpufrac::k8s {

struct ExtenderService::Impl {
  ApiClient* client = nullptr;
  ExtenderServiceOptions options;
  std::string host;
  int requested_port = 0;
  std::unique_ptr<Ledger> ledger;
  std::unique_ptr<KubeClusterApi> api;
  std::unique_ptr<Reservations> reservations;  // Null unless reservation_pods.
  std::unique_ptr<Extender> extender;
  std::unique_ptr<Reflector> nodes;
  std::unique_ptr<Reflector> pods;
  // How long each filter, prioritize and bind call took (histograms; thread-safe).
  Metrics latency;
  httplib::Server server;
  std::atomic<int> port{0};
  std::atomic<bool> stopping{false};
};

ExtenderService::ExtenderService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ExtenderService::~ExtenderService() { Stop(); }

StatusOr<std::unique_ptr<ExtenderService>> ExtenderService::Create(ApiClient* client,
                                                                   ExtenderServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  GPUFRAC_ASSIGN_OR_RETURN(HostPort listen,
                           ParseHostPort(options.listen, "--listen", "0.0.0.0:8888"));
  impl->host = std::move(listen.host);
  impl->requested_port = listen.port;
  if (options.holder.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    options.holder = std::string(host) + "-" + std::to_string(getpid());
  }
  GPUFRAC_ASSIGN_OR_RETURN(impl->ledger, Ledger::Create({.policy = options.policy}));
  impl->client = client;
  impl->options = std::move(options);
  const std::vector<double> bounds = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3};
  for (const char* verb : {"filter", "prioritize", "bind"}) {
    impl->latency.DeclareHistogram(std::string("gpufrac_extender_") + verb + "_seconds",
                                   std::string("Time to answer one ") + verb + " call", bounds);
  }
  impl->api = std::make_unique<KubeClusterApi>(client);
  if (impl->options.reservation_pods) {
    if (impl->options.reservation.ns.empty() || impl->options.reservation.image.empty()) {
      return InvalidArgumentError(
          "--reservation-namespace and --reservation-image must not be empty");
    }
    impl->reservations = std::make_unique<Reservations>(impl->api.get(), impl->options.reservation);
  }
  ExtenderOptions extender{.holder = impl->options.holder,
                           .reservations = impl->reservations.get(),
                           .allow_unenforced = impl->options.allow_unenforced};
  extender.agent_pods = impl->options.agent_pods;
  if (impl->options.scheduler_names) extender.scheduler_names = *impl->options.scheduler_names;
  impl->extender =
      std::make_unique<Extender>(impl->ledger.get(), impl->api.get(), std::move(extender));
  return std::unique_ptr<ExtenderService>(new ExtenderService(std::move(impl)));
}

void ExtenderService::StartWatches() {
  Impl& s = *impl_;
  Extender* extender = s.extender.get();
  s.nodes = std::make_unique<Reflector>(
      *s.client, "/api/v1/nodes", ListOptions{},
      Reflector::Handlers{[extender](const json& n) { extender->OnNode(n); },
                          [extender](const json& n) { extender->OnNodeDeleted(n); }});
  // Finished pods hold nothing; leaving them out keeps the watch small on busy clusters.
  ListOptions pod_options;
  pod_options.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  s.pods = std::make_unique<Reflector>(
      *s.client, "/api/v1/pods", pod_options,
      Reflector::Handlers{[extender](const json& p) { extender->OnPod(p); },
                          [extender](const json& p) { extender->OnPodDeleted(p); }});
  s.nodes->Start();
  s.pods->Start();
  if (s.reservations) s.reservations->Start([this] { return ready(); });
}

std::string ExtenderService::MetricsText() const {
  const Impl& s = *impl_;
  // The node service's Prometheus writer, filled afresh from the counters at each scrape.
  Metrics m;
  auto counter = [&m](const char* name, const char* help, uint64_t v) {
    m.Declare(name, "counter", help);
    m.Set(name, {}, static_cast<double>(v));
  };
  Extender::Stats st = s.extender->stats();
  counter("gpufrac_extender_filters_total", "Filter calls.", st.filters);
  counter("gpufrac_extender_prioritizes_total", "Prioritize calls.", st.prioritizes);
  counter("gpufrac_extender_binds_total", "Bind calls.", st.binds);
  counter("gpufrac_extender_bind_failures_total", "Bind calls that failed.", st.bind_failures);
  counter("gpufrac_extender_pending_conflicts_total",
          "Writes of a node's pending bookings that another bind's write beat.",
          st.pending_conflicts);
  if (s.reservations) {
    Reservations::Stats r = s.reservations->stats();
    counter("gpufrac_extender_reservations_created_total", "Reservation pods created.", r.created);
    counter("gpufrac_extender_reservations_deleted_total", "Reservation pods deleted.", r.deleted);
    counter("gpufrac_extender_reservation_failures_total",
            "Failed reservation pod calls (retried at the next reconcile).", r.failures);
    m.Declare("gpufrac_extender_reserved_gpus", "gauge", "GPUs that need a reservation pod now.");
    m.Set("gpufrac_extender_reserved_gpus", {}, static_cast<double>(s.reservations->wanted()));
  }
  return m.Render() + s.latency.Render();
}

void ExtenderService::AddRoutes() {
  Impl& s = *impl_;
  // Until the books are built, answers would be guesses: say so, and kube-scheduler retries.
  auto body_route = [this, &s](std::string (Extender::*verb)(const std::string&),
                               std::string histogram) {
    return [this, &s, verb, histogram](const httplib::Request& req, httplib::Response& res) {
      const auto start = std::chrono::steady_clock::now();
      std::string body = ready() ? (s.extender.get()->*verb)(req.body)
                                 : json{{"Error",
                                         "gpufrac extender: still reading the cluster's "
                                         "nodes and pods"}}
                                       .dump();
      s.latency.Observe(
          histogram,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      res.set_content(body, "application/json");
    };
  };
  s.server.Post(
      "/filter",
      [this, &s, route = body_route(&Extender::Filter, "gpufrac_extender_filter_seconds")](
          const httplib::Request& req, httplib::Response& res) {
        // A pod refused while the books were being built is tried again once they are.
        if (!ready()) s.extender->FilterUnanswered(req.body);
        route(req, res);
      });
  s.server.Post("/prioritize",
                body_route(&Extender::Prioritize, "gpufrac_extender_prioritize_seconds"));
  s.server.Post("/bind", body_route(&Extender::Bind, "gpufrac_extender_bind_seconds"));
  s.server.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    bool ok = ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok\n" : "reading nodes and pods\n", "text/plain");
  });
  s.server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(MetricsText(), "text/plain; version=0.0.4");
  });
}

Status ExtenderService::Run() {
  Impl& s = *impl_;
  StartWatches();
  AddRoutes();

  int port = s.requested_port == 0
                 ? s.server.bind_to_any_port(s.host)
                 : (s.server.bind_to_port(s.host, s.requested_port) ? s.requested_port : -1);
  if (port <= 0) {
    if (s.reservations) s.reservations->Stop();
    s.nodes->Stop();
    s.pods->Stop();
    return UnavailableError("cannot listen on " + s.options.listen +
                            " (in use, or not an address of this machine)");
  }
  s.port = port;
  LogInfo("gpufrac extender listening on %s:%d", s.host.c_str(), port);
  // Once the books are built (after a restart: the pods it could not answer meanwhile), and
  // whenever a node's GPUs change, the waiting pods are tried again (Extender::RetryWaiting).
  std::thread retry([this, &s] {
    while (!s.stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (ready() && s.extender->retry_wanted()) s.extender->RetryWaiting(s.options.retry_interval);
    }
  });
  // A Stop() before the server runs would not reach it (cpp-httplib stops only a running
  // server): it is seen here instead.
  if (!s.stopping) s.server.listen_after_bind();
  s.stopping = true;
  retry.join();
  return OkStatus();
}

void ExtenderService::Stop() {
  impl_->stopping = true;
  impl_->server.stop();
  if (impl_->reservations) impl_->reservations->Stop();
  if (impl_->nodes) impl_->nodes->Stop();
  if (impl_->pods) impl_->pods->Stop();
}

int ExtenderService::port() const { return impl_->port; }

bool ExtenderService::ready() const {
  return impl_->nodes && impl_->pods && impl_->nodes->synced() && impl_->pods->synced();
}

}  // namespace gpufrac::k8s
