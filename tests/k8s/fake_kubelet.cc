// The stand-in kubelet for device-plugin tests (see fake_kubelet.h).
#include "k8s/fake_kubelet.h"

#include <stdlib.h>

#include <filesystem>
#include <system_error>
#include <utility>

namespace gpufrac::k8s::testing {

class FakeKubelet::Service final : public v1beta1::Registration::Service {
 public:
  explicit Service(FakeKubelet* kubelet) : kubelet_(kubelet) {}

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    std::lock_guard<std::mutex> lock(kubelet_->mu_);
    kubelet_->requests_.push_back(*request);
    if (kubelet_->refusal_) return grpc::Status(grpc::StatusCode::UNKNOWN, *kubelet_->refusal_);
    ++kubelet_->accepted_;
    kubelet_->changed_.notify_all();
    return grpc::Status::OK;
  }

 private:
  FakeKubelet* const kubelet_;
};

FakeKubelet::FakeKubelet(std::string dir) : dir_(std::move(dir)) {}

FakeKubelet::~FakeKubelet() { Stop(); }

std::string FakeKubelet::socket_path() const { return dir_ + "/kubelet.sock"; }

Status FakeKubelet::Start() {
  if (server_ != nullptr) return FailedPreconditionError("the fake kubelet is already serving");
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path(), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    service_.reset();
    return UnavailableError("the fake kubelet cannot listen on " + socket_path());
  }
  return OkStatus();
}

void FakeKubelet::Stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_->Wait();
  server_.reset();
  service_.reset();
}

Status FakeKubelet::Restart() {
  Stop();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, error)) {
    if (entry.is_socket(error)) std::filesystem::remove(entry.path(), error);
  }
  if (error) return UnavailableError("cannot clean " + dir_ + ": " + error.message());
  return Start();
}

std::vector<v1beta1::RegisterRequest> FakeKubelet::registrations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

size_t FakeKubelet::accepted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepted_;
}

bool FakeKubelet::WaitForRegistrations(size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return accepted_ >= count; });
}

void FakeKubelet::RefuseRegistrations(std::optional<std::string> message) {
  std::lock_guard<std::mutex> lock(mu_);
  refusal_ = std::move(message);
}

KubeletClient::KubeletClient(const std::string& dir, const std::string& endpoint)
    : stub_(v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
          "unix:" + dir + "/" + endpoint, grpc::InsecureChannelCredentials()))) {}

KubeletClient::~KubeletClient() { CancelListAndWatch(); }

namespace {

void SetDeadline(grpc::ClientContext* context, std::chrono::milliseconds timeout) {
  context->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace

grpc::Status KubeletClient::GetDevicePluginOptions(v1beta1::DevicePluginOptions* options) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  return stub_->GetDevicePluginOptions(&context, v1beta1::Empty(), options);
}

grpc::Status KubeletClient::Allocate(const std::vector<std::vector<std::string>>& containers,
                                     v1beta1::AllocateResponse* response) {
  v1beta1::AllocateRequest request;
  for (const std::vector<std::string>& ids : containers) {
    v1beta1::ContainerAllocateRequest* container = request.add_container_requests();
    for (const std::string& id : ids) container->add_devices_ids(id);
  }
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  return stub_->Allocate(&context, request, response);
}

grpc::Status KubeletClient::GetPreferredAllocation(const std::vector<std::string>& available,
                                                   const std::vector<std::string>& must_include,
                                                   int size,
                                                   v1beta1::PreferredAllocationResponse* response) {
  v1beta1::PreferredAllocationRequest request;
  v1beta1::ContainerPreferredAllocationRequest* container = request.add_container_requests();
  for (const std::string& id : available) container->add_available_deviceids(id);
  for (const std::string& id : must_include) container->add_must_include_deviceids(id);
  container->set_allocation_size(size);
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  return stub_->GetPreferredAllocation(&context, request, response);
}

grpc::Status KubeletClient::PreStartContainer(const std::vector<std::string>& device_ids,
                                              v1beta1::PreStartContainerResponse* response) {
  v1beta1::PreStartContainerRequest request;
  for (const std::string& id : device_ids) request.add_devices_ids(id);
  grpc::ClientContext context;
  SetDeadline(&context, timeout_);
  return stub_->PreStartContainer(&context, request, response);
}

void KubeletClient::StartListAndWatch() {
  if (reader_.joinable()) return;
  reader_ = std::thread([this] { ReadStream(); });
}

void KubeletClient::ReadStream() {
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader =
      stub_->ListAndWatch(&stream_context_, v1beta1::Empty());
  v1beta1::ListAndWatchResponse list;
  while (reader->Read(&list)) {
    std::lock_guard<std::mutex> lock(mu_);
    lists_.push_back(list);
    changed_.notify_all();
  }
  grpc::Status status = reader->Finish();
  std::lock_guard<std::mutex> lock(mu_);
  stream_end_ = std::move(status);
  changed_.notify_all();
}

std::optional<v1beta1::ListAndWatchResponse> KubeletClient::NextDeviceList(
    std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return !lists_.empty() || stream_end_.has_value(); });
  if (lists_.empty()) return std::nullopt;
  v1beta1::ListAndWatchResponse list = std::move(lists_.front());
  lists_.pop_front();
  return list;
}

std::optional<grpc::Status> KubeletClient::WaitForStreamEnd(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return stream_end_.has_value(); });
  return stream_end_;
}

void KubeletClient::CancelListAndWatch() {
  if (!reader_.joinable()) return;
  stream_context_.TryCancel();
  reader_.join();
}

TempDir::TempDir() {
  char pattern[] = "/tmp/gpufrac-k8s-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) std::abort();  // A test environment without /tmp is broken.
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

}  // namespace gpufrac::k8s::testing
