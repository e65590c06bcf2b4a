// The stand-in for the kubelet's PodResources API (see fake_pod_resources.h).
#include "k8s/fake_pod_resources.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

#include "k8s/proto/podresources_v1.grpc.pb.h"

namespace gpufrac::k8s::testing {

class FakePodResources::Service final : public v1::PodResourcesLister::Service {
 public:
  explicit Service(FakePodResources* owner) : owner_(owner) {}

  grpc::Status List(grpc::ServerContext* context, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    std::unique_lock<std::mutex> lock(owner_->mu_);
    if (owner_->delay_.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + owner_->delay_;
      lock.unlock();
      while (std::chrono::steady_clock::now() < until && !context->IsCancelled()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      lock.lock();
    }
    ++owner_->calls_;
    if (owner_->failure_) return grpc::Status(*owner_->failure_, "the fake kubelet fails");
    for (const Pod& pod : owner_->pods_) {
      v1::PodResources* out = response->add_pod_resources();
      out->set_name(pod.name);
      out->set_namespace_(pod.ns);
      for (const Container& c : pod.containers) {
        v1::ContainerResources* container = out->add_containers();
        container->set_name(c.name);
        for (const auto& [resource, ids] : c.devices) {
          v1::ContainerDevices* devices = container->add_devices();
          devices->set_resource_name(resource);
          for (const std::string& id : ids) devices->add_device_ids(id);
        }
      }
    }
    return grpc::Status::OK;
  }

 private:
  FakePodResources* const owner_;
};

FakePodResources::FakePodResources(std::string socket_path)
    : socket_path_(std::move(socket_path)) {}

FakePodResources::~FakePodResources() { Stop(); }

Status FakePodResources::Start() {
  if (server_ != nullptr) return FailedPreconditionError("the fake PodResources API is serving");
  std::error_code error;
  std::filesystem::remove(socket_path_, error);
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    service_.reset();
    return UnavailableError("the fake PodResources API cannot listen on " + socket_path_);
  }
  return OkStatus();
}

void FakePodResources::Stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_->Wait();
  server_.reset();
  service_.reset();
  std::error_code error;
  std::filesystem::remove(socket_path_, error);
}

void FakePodResources::Admit(const std::string& ns, const std::string& name,
                             const std::vector<std::string>& containers) {
  std::lock_guard<std::mutex> lock(mu_);
  Pod pod{.ns = ns, .name = name, .containers = {}};
  for (const std::string& c : containers) pod.containers.push_back({.name = c, .devices = {}});
  pods_.push_back(std::move(pod));
}

void FakePodResources::Record(const std::string& ns, const std::string& name,
                              const std::string& container, const std::string& resource,
                              const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Pod& pod : pods_) {
    if (pod.ns != ns || pod.name != name) continue;
    for (Container& c : pod.containers) {
      if (c.name == container) c.devices[resource] = ids;
    }
  }
}

void FakePodResources::FailWith(std::optional<grpc::StatusCode> code) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_ = code;
}

void FakePodResources::Delay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  delay_ = delay;
}

int FakePodResources::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

}  // namespace gpufrac::k8s::testing
