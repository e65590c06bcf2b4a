// The probe endpoint on cpp-httplib, as the extender serves its /healthz.
#include "k8s/health_endpoint.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include "common/text.h"

namespace gpufrac::k8s {

struct HealthEndpoint::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
};

HealthEndpoint::HealthEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HealthEndpoint::~HealthEndpoint() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HealthEndpoint::port() const { return impl_->port; }

StatusOr<std::unique_ptr<HealthEndpoint>> HealthEndpoint::Start(const std::string& listen,
                                                                std::function<bool()> ready) {
  GPUFRAC_ASSIGN_OR_RETURN(HostPort at, ParseHostPort(listen, "--health-listen", "0.0.0.0:8081"));
  auto impl = std::make_unique<Impl>();
  impl->server.Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
    const bool ok = ready();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "ok\n" : "starting or stopping\n", "text/plain");
  });
  impl->server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  const int port = at.port == 0 ? impl->server.bind_to_any_port(at.host)
                                : (impl->server.bind_to_port(at.host, at.port) ? at.port : -1);
  if (port <= 0) {
    return UnavailableError("cannot listen on " + listen +
                            " for --health-listen (in use, or not an address of this machine)");
  }
  impl->port = port;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // cpp-httplib's stop() reaches only a running server: the destructor's must not come first.
  while (!raw->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<HealthEndpoint>(new HealthEndpoint(std::move(impl)));
}

}  // namespace gpufrac::k8s
