// The kubelet's PodResources API as a client (see pod_resources.h).
#include "k8s/pod_resources.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "common/text.h"
#include "k8s/proto/podresources_v1.grpc.pb.h"

namespace gpufrac::k8s {

std::vector<std::string> ContainerResources::DevicesOf(std::string_view resource) const {
  std::vector<std::string> ids;
  for (const ContainerDevices& d : devices) {
    if (d.resource_name == resource)
      ids.insert(ids.end(), d.device_ids.begin(), d.device_ids.end());
  }
  return ids;
}

const ContainerResources* PodResources::Container(std::string_view container) const {
  for (const ContainerResources& c : containers) {
    if (c.name == container) return &c;
  }
  return nullptr;
}

struct PodResourcesClient::Impl {
  std::mutex mu;
  // Made on first use and again after a failed call: a channel that failed to connect backs off
  // for up to minutes, while a kubelet that restarted serves a new socket at once.
  std::shared_ptr<v1::PodResourcesLister::Stub> stub;
};

PodResourcesClient::PodResourcesClient(std::string socket_path, std::chrono::milliseconds timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout), impl_(std::make_unique<Impl>()) {}

PodResourcesClient::~PodResourcesClient() = default;

StatusOr<std::vector<PodResources>> PodResourcesClient::List() {
  const std::string where = "the kubelet's PodResources socket " + socket_path_;
  struct stat st;
  if (::stat(socket_path_.c_str(), &st) != 0) {
    return UnavailableError("cannot reach " + where + ": " + std::strerror(errno));
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (impl_->stub == nullptr) {
    impl_->stub = v1::PodResourcesLister::NewStub(
        grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials()));
  }
  // Calls run in parallel on one stub; only its replacement needs the lock.
  std::shared_ptr<v1::PodResourcesLister::Stub> stub = impl_->stub;
  lock.unlock();

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  v1::ListPodResourcesResponse response;
  grpc::Status status = stub->List(&context, v1::ListPodResourcesRequest(), &response);
  if (!status.ok()) {
    lock.lock();
    if (impl_->stub == stub) impl_->stub.reset();
    return UnavailableError(where + " did not list the pods (" +
                            (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                 ? "no answer within " + std::to_string(timeout_.count()) + " ms"
                                 : OneLine(status.error_message())) +
                            ")");
  }
  std::vector<PodResources> pods;
  pods.reserve(response.pod_resources_size());
  for (const v1::PodResources& in : response.pod_resources()) {
    PodResources pod{.ns = in.namespace_(), .name = in.name(), .containers = {}};
    for (const v1::ContainerResources& c : in.containers()) {
      ContainerResources container{.name = c.name(), .devices = {}};
      for (const v1::ContainerDevices& d : c.devices()) {
        container.devices.push_back(
            {.resource_name = d.resource_name(),
             .device_ids = std::vector<std::string>(d.device_ids().begin(), d.device_ids().end())});
      }
      pod.containers.push_back(std::move(container));
    }
    pods.push_back(std::move(pod));
  }
  return pods;
}

}  // namespace gpufrac::k8s
