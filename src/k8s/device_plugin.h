// DevicePlugin: the kubelet device-plugin API (v1beta1) served over gRPC on a unix socket in the
// kubelet's device-plugin directory, answering from a DeviceProvider. Transport only: what the
// devices are and what a container gets is the provider's business.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "k8s/device_provider.h"

namespace gpufrac::k8s {

struct DevicePluginOptions {
  // The extended resource, "<domain>/<name>": gpufrac.io/gpu, nvidia.com/gpu,
  // nvidia.com/mig-1g.10gb.
  std::string resource_name;
  // Where the kubelet listens (kubelet.sock) and looks for plugins.
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
  // This plugin's socket file inside kubelet_dir, e.g. "gpufrac-gpu.sock". One per resource.
  std::string socket_name;
  // Whether to tell the kubelet to ask GetPreferredAllocation before choosing devices.
  bool preferred_allocation = true;
  // How often to look for a kubelet restart (which deletes our socket and replaces kubelet.sock).
  // It is also the first delay between failed registrations, which then doubles.
  std::chrono::milliseconds kubelet_check_period{1000};
  // The longest delay between registration attempts while the kubelet is down or refuses us.
  std::chrono::milliseconds max_register_backoff{30000};
  // How long one Register call may take.
  std::chrono::milliseconds register_timeout{5000};
};

// Serves one resource. Typical use:
//   DevicePlugin plugin(options, &manager);
//   if (Status s = plugin.Start(); !s.ok()) ...;   // serving; registered or retrying
//   ... manager.OnHealthChange(...) -> plugin.DevicesChanged();
//   plugin.Stop();
// After Start() a background thread watches for kubelet restarts: when the kubelet comes back it
// has deleted our socket, so the plugin serves again on a fresh socket and registers again. While
// the kubelet is down or refuses the registration, it retries with exponential backoff.
// All methods are thread-safe.
class DevicePlugin {
 public:
  // `provider` must outlive the plugin.
  DevicePlugin(DevicePluginOptions options, DeviceProvider* provider);
  ~DevicePlugin();  // Stops.

  DevicePlugin(const DevicePlugin&) = delete;
  DevicePlugin& operator=(const DevicePlugin&) = delete;

  // Serves on kubelet_dir/socket_name (removing a stale socket left there) and registers with
  // kubelet_dir/kubelet.sock. Fails only for what retrying cannot fix: bad options, a missing
  // directory, a socket that cannot be bound. A failed registration is logged, kept in
  // registration_status() and retried in the background.
  Status Start();

  // Ends every ListAndWatch stream, stops serving and removes the socket. Idempotent; the plugin
  // cannot be started again. Must not be called from inside a DeviceProvider method (it waits for
  // the calls in flight to return).
  void Stop();

  // Sends the provider's current Devices() on every open ListAndWatch stream. Cheap and
  // non-blocking: changes made in quick succession may reach the kubelet as one update.
  void DevicesChanged();

  // Successful registrations so far: 1 after a normal start, +1 per kubelet restart survived.
  int registrations() const;
  // OK once the current kubelet accepted us; otherwise why not ("cannot register with the kubelet
  // at /var/lib/kubelet/device-plugins/kubelet.sock: ...") while retries go on.
  Status registration_status() const;

  // kubelet_dir/socket_name.
  std::string socket_path() const;
  const DevicePluginOptions& options() const;

 private:
  class Impl;  // Holds the gRPC server, hidden so that users need no gRPC headers.
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::k8s
