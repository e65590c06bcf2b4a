// The kubelet device-plugin server (see device_plugin.h): the v1beta1 gRPC service, registration
// with the kubelet, and the watcher that brings both back after a kubelet restart.
#include "k8s/device_plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/posix.h"
#include "k8s/proto/deviceplugin_v1beta1.grpc.pb.h"

namespace gpufrac::k8s {

StatusOr<std::vector<std::string>> DeviceProvider::PreferredAllocation(
    const std::vector<std::string>& available, const std::vector<std::string>& must_include,
    int size) {
  if (size < 0) return InvalidArgumentError("allocation size " + std::to_string(size) + " < 0");
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  for (const std::string& id : must_include) {
    if (taken.insert(id).second) chosen.push_back(id);
  }
  for (const std::string& id : available) {
    if (chosen.size() >= static_cast<size_t>(size)) break;
    if (taken.insert(id).second) chosen.push_back(id);
  }
  return chosen;
}

namespace {

constexpr char kApiVersion[] = "v1beta1";
constexpr char kKubeletSocketName[] = "kubelet.sock";
constexpr char kHealthy[] = "Healthy";
constexpr char kUnhealthy[] = "Unhealthy";
// The sync gRPC API cannot wake a handler when its client hangs up, so a ListAndWatch stream
// looks this often; it only bounds how long a stream of a vanished kubelet lingers.
constexpr std::chrono::milliseconds kCancelPollPeriod{200};
// How long Stop() and restarts let calls in flight finish before gRPC cancels them.
constexpr std::chrono::milliseconds kShutdownGrace{500};

grpc::StatusCode ToGrpcCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kInternal:
      return grpc::StatusCode::INTERNAL;
    case StatusCode::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
    case StatusCode::kAborted:
      return grpc::StatusCode::ABORTED;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpc(const Status& status) {
  return grpc::Status(ToGrpcCode(status.code()), status.message());
}

template <typename Ids>
std::string JoinIds(const Ids& ids) {
  std::string out;
  for (const auto& id : ids) {
    if (!out.empty()) out += ',';
    out += id;
  }
  return out;
}

// Enough of a file's identity to tell "the same file" from "deleted and created again", which is
// what a kubelet restart does to every socket in its directory. ctime separates a recreated file
// that happens to get the old inode number back.
struct FileIdentity {
  bool exists = false;
  bool is_socket = false;
  dev_t device = 0;
  ino_t inode = 0;
  int64_t ctime_ns = 0;

  bool SameFile(const FileIdentity& other) const {
    return exists && other.exists && device == other.device && inode == other.inode;
  }
  // Also true when neither exists.
  bool Unchanged(const FileIdentity& other) const {
    if (!exists || !other.exists) return exists == other.exists;
    return SameFile(other) && ctime_ns == other.ctime_ns;
  }
};

FileIdentity Identify(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return {};
  FileIdentity id;
  id.exists = true;
  id.is_socket = S_ISSOCK(st.st_mode);
  id.device = st.st_dev;
  id.inode = st.st_ino;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

Status CheckOptions(const DevicePluginOptions& options, const std::string& socket_path) {
  const std::string& name = options.resource_name;
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() ||
      name.find('/', slash + 1) != std::string::npos) {
    return InvalidArgumentError("resource name \"" + name +
                                "\" is not of the form <domain>/<name>, e.g. gpufrac.io/gpu");
  }
  if (options.socket_name.empty() || options.socket_name.find('/') != std::string::npos ||
      options.socket_name == "." || options.socket_name == "..") {
    return InvalidArgumentError("socket name \"" + options.socket_name +
                                "\" must be a plain file name, e.g. gpufrac-gpu.sock");
  }
  if (options.socket_name == kKubeletSocketName) {
    return InvalidArgumentError("socket name kubelet.sock is the kubelet's own; choose another");
  }
  // sun_path holds the path and its terminating NUL.
  if (socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgumentError("socket path " + socket_path + " is longer than the " +
                                std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                                " bytes a unix socket allows");
  }
  if (options.kubelet_check_period.count() <= 0 || options.register_timeout.count() <= 0 ||
      options.max_register_backoff < options.kubelet_check_period) {
    return InvalidArgumentError(
        "kubelet_check_period and register_timeout must be positive and max_register_backoff "
        "no shorter than kubelet_check_period");
  }
  std::error_code error;
  if (!std::filesystem::is_directory(options.kubelet_dir, error)) {
    return FailedPreconditionError("the kubelet device-plugin directory " + options.kubelet_dir +
                                   " does not exist; is this a Kubernetes node, and is the "
                                   "directory mounted into the agent's container?");
  }
  return OkStatus();
}

}  // namespace

class DevicePlugin::Impl {
 public:
  Impl(DevicePluginOptions options, DeviceProvider* provider)
      : options_(std::move(options)),
        provider_(provider),
        socket_path_((std::filesystem::path(options_.kubelet_dir) / options_.socket_name).string()),
        kubelet_socket_path_(
            (std::filesystem::path(options_.kubelet_dir) / kKubeletSocketName).string()) {}

  ~Impl() { Stop(); }

  Status Start();
  void Stop();

  void DevicesChanged() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++devices_version_;
    }
    changed_.notify_all();
  }

  int registrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  Status registration_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registration_status_;
  }
  const std::string& socket_path() const { return socket_path_; }
  const DevicePluginOptions& options() const { return options_; }

 private:
  class Service;
  // One bound socket and what serves it; replaced as a whole after a kubelet restart.
  struct Server {
    std::unique_ptr<Service> service;
    std::unique_ptr<grpc::Server> grpc_server;
    FileIdentity socket;  // As bound; gone or replaced later means the kubelet restarted.
  };

  Status StartServer();
  void StopServer();
  Status Register();
  void Watch();
  // Why we must serve and register again, or "" when the kubelet we registered with is still on.
  std::string KubeletRestartReason();

  v1beta1::ListAndWatchResponse DeviceList();

  const DevicePluginOptions options_;
  DeviceProvider* const provider_;
  const std::string socket_path_;
  const std::string kubelet_socket_path_;

  // Held by Start() and Stop() throughout, so that they never interleave.
  std::mutex lifecycle_mu_;

  // Guards the fields below. changed_ wakes streams (new devices, closing) and the watcher.
  mutable std::mutex mu_;
  std::condition_variable changed_;
  uint64_t devices_version_ = 0;
  bool started_ = false;
  bool stopping_ = false;
  int registrations_ = 0;
  Status registration_status_ = UnavailableError("not registered with the kubelet yet");
  grpc::ClientContext* register_call_ = nullptr;  // A Register in flight, for Stop() to cancel.

  // Used by Start() and, once it has returned, only by the watcher; Stop() joins the watcher
  // before touching them.
  std::unique_ptr<Server> server_;
  FileIdentity registered_kubelet_;  // kubelet.sock as it was when the current registration won.
  bool registered_ = false;
  bool kubelet_seen_gone_ = false;  // kubelet.sock vanished since the registration.
  std::thread watcher_;
};

// The DevicePlugin gRPC service of one Server. Its closing_ flag (guarded by the plugin's mu_)
// ends this server's ListAndWatch streams without touching those of a later server.
class DevicePlugin::Impl::Service final : public v1beta1::DevicePlugin::Service {
 public:
  explicit Service(Impl* plugin) : plugin_(plugin) {}

  void Close() {
    {
      std::lock_guard<std::mutex> lock(plugin_->mu_);
      closing_ = true;
    }
    plugin_->changed_.notify_all();
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* response) override {
    response->set_pre_start_required(false);
    response->set_get_preferred_allocation_available(plugin_->options_.preferred_allocation);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    std::optional<uint64_t> sent;  // The devices_version_ the kubelet has seen.
    while (true) {
      uint64_t version;
      {
        std::unique_lock<std::mutex> lock(plugin_->mu_);
        plugin_->changed_.wait_for(lock, kCancelPollPeriod,
                                   [&] { return closing_ || sent != plugin_->devices_version_; });
        if (closing_) return grpc::Status::OK;
        version = plugin_->devices_version_;
      }
      if (context->IsCancelled()) return grpc::Status::CANCELLED;
      if (sent == version) continue;
      // Read after the version, so a change racing with Devices() is sent again next round.
      if (!writer->Write(plugin_->DeviceList())) return grpc::Status::CANCELLED;
      sent = version;
    }
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    if (!plugin_->options_.preferred_allocation) {
      return grpc::Status(
          grpc::StatusCode::UNIMPLEMENTED,
          "GetPreferredAllocation is not offered for " + plugin_->options_.resource_name);
    }
    for (const v1beta1::ContainerPreferredAllocationRequest& container :
         request->container_requests()) {
      const std::vector<std::string> available(container.available_deviceids().begin(),
                                               container.available_deviceids().end());
      const std::vector<std::string> must_include(container.must_include_deviceids().begin(),
                                                  container.must_include_deviceids().end());
      StatusOr<std::vector<std::string>> chosen = plugin_->provider_->PreferredAllocation(
          available, must_include, container.allocation_size());
      if (!chosen.ok()) {
        return ToGrpc(chosen.status().WithContext(
            "cannot choose " + std::to_string(container.allocation_size()) + " of " +
            plugin_->options_.resource_name + " [" + JoinIds(available) + "]"));
      }
      v1beta1::ContainerPreferredAllocationResponse* out = response->add_container_responses();
      for (const std::string& id : *chosen) out->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    for (const v1beta1::ContainerAllocateRequest& container : request->container_requests()) {
      const std::vector<std::string> ids(container.devices_ids().begin(),
                                         container.devices_ids().end());
      StatusOr<ContainerAllocation> allocation = plugin_->provider_->Allocate(ids);
      if (!allocation.ok()) {
        const Status error = allocation.status().WithContext(
            "cannot allocate " + plugin_->options_.resource_name + " [" + JoinIds(ids) + "]");
        LogWarning("%s", error.message().c_str());
        // The kubelet fails the whole pod, so no partial response is sent.
        return ToGrpc(error);
      }
      Fill(*allocation, response->add_container_responses());
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    // Registered with pre_start_required=false; answered in case a kubelet asks anyway.
    return grpc::Status::OK;
  }

 private:
  static void Fill(const ContainerAllocation& in, v1beta1::ContainerAllocateResponse* out) {
    for (const auto& [name, value] : in.envs) (*out->mutable_envs())[name] = value;
    for (const ContainerAllocation::Mount& mount : in.mounts) {
      v1beta1::Mount* m = out->add_mounts();
      m->set_container_path(mount.container_path);
      m->set_host_path(mount.host_path);
      m->set_read_only(mount.read_only);
    }
    for (const ContainerAllocation::DeviceNode& node : in.devices) {
      v1beta1::DeviceSpec* d = out->add_devices();
      d->set_container_path(node.container_path);
      d->set_host_path(node.host_path);
      d->set_permissions(node.permissions);
    }
    for (const auto& [name, value] : in.annotations) (*out->mutable_annotations())[name] = value;
    for (const std::string& name : in.cdi_devices) out->add_cdi_devices()->set_name(name);
  }

  Impl* const plugin_;
  bool closing_ = false;
};

v1beta1::ListAndWatchResponse DevicePlugin::Impl::DeviceList() {
  v1beta1::ListAndWatchResponse response;
  for (const PluginDevice& device : provider_->Devices()) {
    v1beta1::Device* out = response.add_devices();
    out->set_id(device.id);
    out->set_health(device.healthy ? kHealthy : kUnhealthy);
    if (device.numa_node) out->mutable_topology()->add_nodes()->set_id(*device.numa_node);
  }
  return response;
}

Status DevicePlugin::Impl::Start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return FailedPreconditionError("the device plugin was stopped; make a new one");
    if (started_) return FailedPreconditionError("the device plugin is already started");
  }
  GPUFRAC_RETURN_IF_ERROR(CheckOptions(options_, socket_path_));
  GPUFRAC_RETURN_IF_ERROR(StartServer());
  if (Status status = Register(); !status.ok()) {
    LogWarning("%s; will retry", status.message().c_str());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  watcher_ = std::thread([this] { Watch(); });
  return OkStatus();
}

void DevicePlugin::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (register_call_ != nullptr) register_call_->TryCancel();
  }
  changed_.notify_all();
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (watcher_.joinable()) watcher_.join();
  StopServer();
}

Status DevicePlugin::Impl::StartServer() {
  const FileIdentity existing = Identify(socket_path_);
  if (existing.exists) {
    // Left by an earlier run that did not stop cleanly; binding would fail with EADDRINUSE.
    if (!existing.is_socket) {
      return FailedPreconditionError(socket_path_ +
                                     " exists and is not a socket; choose another socket name");
    }
    if (::unlink(socket_path_.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus("cannot remove the stale socket " + socket_path_, errno);
    }
  }
  if (::access(options_.kubelet_dir.c_str(), W_OK | X_OK) != 0) {
    return PermissionDeniedError("cannot serve the device plugin on " + socket_path_ + ": " +
                                 options_.kubelet_dir + " is not writable (" +
                                 std::strerror(errno) + ")");
  }
  auto server = std::make_unique<Server>();
  server->service = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(server->service.get());
  server->grpc_server = builder.BuildAndStart();
  if (server->grpc_server == nullptr) {
    return UnavailableError("cannot serve the device plugin on " + socket_path_ +
                            ": gRPC could not listen on the socket");
  }
  server->socket = Identify(socket_path_);
  if (!server->socket.exists) {
    server->grpc_server->Shutdown();
    return UnavailableError("cannot serve the device plugin on " + socket_path_ +
                            ": the socket vanished as soon as it was bound");
  }
  server_ = std::move(server);
  return OkStatus();
}

void DevicePlugin::Impl::StopServer() {
  if (server_ == nullptr) return;
  server_->service->Close();
  server_->grpc_server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server_->grpc_server->Wait();
  // After a kubelet restart the path may already hold someone else's file; only remove ours.
  if (Identify(socket_path_).SameFile(server_->socket)) ::unlink(socket_path_.c_str());
  server_.reset();
}

Status DevicePlugin::Impl::Register() {
  const FileIdentity kubelet = Identify(kubelet_socket_path_);
  std::unique_ptr<v1beta1::Registration::Stub> stub = v1beta1::Registration::NewStub(
      grpc::CreateChannel("unix:" + kubelet_socket_path_, grpc::InsecureChannelCredentials()));
  v1beta1::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(options_.socket_name);  // The kubelet resolves it inside its directory.
  request.set_resource_name(options_.resource_name);
  request.mutable_options()->set_pre_start_required(false);
  request.mutable_options()->set_get_preferred_allocation_available(options_.preferred_allocation);
  v1beta1::Empty response;

  grpc::ClientContext call;
  call.set_deadline(std::chrono::system_clock::now() + options_.register_timeout);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return AbortedError("the device plugin is stopping");
    register_call_ = &call;
  }
  const grpc::Status result = stub->Register(&call, request, &response);
  std::lock_guard<std::mutex> lock(mu_);
  register_call_ = nullptr;
  if (!result.ok()) {
    // The transport failing means the kubelet is not there (yet); any other answer is the
    // kubelet refusing us (unsupported version, resource name taken).
    const bool unreachable = result.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             result.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                             result.error_code() == grpc::StatusCode::CANCELLED;
    std::string reason = result.error_message();
    if (reason.empty()) reason = "gRPC code " + std::to_string(result.error_code());
    registration_status_ =
        Status(unreachable ? StatusCode::kUnavailable : StatusCode::kFailedPrecondition,
               "cannot register with the kubelet at " + kubelet_socket_path_ + ": " + reason);
    registered_ = false;
    return registration_status_;
  }
  ++registrations_;
  registration_status_ = OkStatus();
  registered_ = true;
  registered_kubelet_ = kubelet;
  kubelet_seen_gone_ = false;
  LogInfo("registered %s with the kubelet (socket %s)", options_.resource_name.c_str(),
          socket_path_.c_str());
  return OkStatus();
}

std::string DevicePlugin::Impl::KubeletRestartReason() {
  if (server_ != nullptr && !Identify(socket_path_).SameFile(server_->socket)) {
    return socket_path_ + " was removed";
  }
  if (!registered_) return "";
  const FileIdentity kubelet = Identify(kubelet_socket_path_);
  if (!kubelet.exists) {
    // The kubelet is down; wait for it to come back rather than registering into the void.
    kubelet_seen_gone_ = true;
    return "";
  }
  if (kubelet_seen_gone_ || !kubelet.Unchanged(registered_kubelet_)) {
    return kubelet_socket_path_ + " was replaced";
  }
  return "";
}

void DevicePlugin::Impl::Watch() {
  using Clock = std::chrono::steady_clock;
  std::chrono::milliseconds backoff = options_.kubelet_check_period;
  Clock::time_point next_attempt = Clock::now() + backoff;
  FileIdentity kubelet_at_last_attempt = Identify(kubelet_socket_path_);
  std::string last_error;  // Logged once, not on every retry.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!registered_) last_error = registration_status_.message();  // Start() logged it.
  }
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait_for(lock, options_.kubelet_check_period, [&] { return stopping_; });
      if (stopping_) return;
    }
    if (const std::string reason = KubeletRestartReason(); !reason.empty()) {
      LogInfo("the kubelet restarted (%s); serving %s again and registering again", reason.c_str(),
              options_.resource_name.c_str());
      StopServer();
      {
        std::lock_guard<std::mutex> lock(mu_);
        registered_ = false;
        registration_status_ = UnavailableError("re-registering after a kubelet restart");
      }
      backoff = options_.kubelet_check_period;
      next_attempt = Clock::now();
    }
    if (server_ == nullptr) {
      if (Status status = StartServer(); !status.ok()) {
        if (status.message() != last_error) LogWarning("%s; will retry", status.message().c_str());
        last_error = status.message();
        continue;
      }
    }
    if (registered_) continue;
    // A kubelet.sock that appeared or changed since the last try is a kubelet that just came up:
    // try at once instead of sitting out the backoff.
    const FileIdentity kubelet = Identify(kubelet_socket_path_);
    if (Clock::now() < next_attempt && kubelet.Unchanged(kubelet_at_last_attempt)) continue;
    kubelet_at_last_attempt = kubelet;
    if (Status status = Register(); !status.ok()) {
      if (status.message() != last_error) LogWarning("%s; will retry", status.message().c_str());
      last_error = status.message();
      backoff = std::min(backoff * 2, options_.max_register_backoff);
      next_attempt = Clock::now() + backoff;
    } else {
      last_error.clear();
      backoff = options_.kubelet_check_period;
    }
  }
}

DevicePlugin::DevicePlugin(DevicePluginOptions options, DeviceProvider* provider)
    : impl_(std::make_unique<Impl>(std::move(options), provider)) {}

DevicePlugin::~DevicePlugin() = default;

Status DevicePlugin::Start() { return impl_->Start(); }
void DevicePlugin::Stop() { impl_->Stop(); }
void DevicePlugin::DevicesChanged() { impl_->DevicesChanged(); }
int DevicePlugin::registrations() const { return impl_->registrations(); }
Status DevicePlugin::registration_status() const { return impl_->registration_status(); }
std::string DevicePlugin::socket_path() const { return impl_->socket_path(); }
const DevicePluginOptions& DevicePlugin::options() const { return impl_->options(); }

}  // namespace gpufrac::k8s
