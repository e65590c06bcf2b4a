// The kubelet device plugin end to end over real gRPC and unix sockets, with a fake kubelet and a
// fake resource manager: registration, device lists and health, Allocate shapes and errors,
// preferred allocation, kubelet restarts, stale sockets, and stopping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "k8s/device_plugin.h"
#include "k8s/device_provider.h"
#include "k8s/fake_kubelet.h"

namespace gpufrac::k8s {

// Lets failed comparisons print what the kubelet saw.
void PrintTo(const ContainerAllocation& a, std::ostream* out) {
  *out << "{envs:";
  for (const auto& [k, v] : a.envs) *out << " " << k << "=" << v;
  *out << "; mounts:";
  for (const auto& m : a.mounts) {
    *out << " " << m.host_path << "->" << m.container_path << (m.read_only ? "(ro)" : "(rw)");
  }
  *out << "; devices:";
  for (const auto& d : a.devices) {
    *out << " " << d.host_path << "->" << d.container_path << "(" << d.permissions << ")";
  }
  *out << "; annotations:";
  for (const auto& [k, v] : a.annotations) *out << " " << k << "=" << v;
  *out << "; cdi:";
  for (const auto& c : a.cdi_devices) *out << " " << c;
  *out << "}";
}

namespace {

using ::gpufrac::k8s::testing::FakeKubelet;
using ::gpufrac::k8s::testing::KubeletClient;
using ::gpufrac::k8s::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kGpuA[] = "GPU-6f1c2a3e-8d4b-4f0a-9c1e-2b3d4e5f6a7b";
constexpr char kGpuB[] = "GPU-0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d";
constexpr char kMig[] = "MIG-5c3e1d2f-7a8b-5c9d-8e0f-1a2b3c4d5e6f";

// The resource manager's stand-in: a device list the test edits, canned allocations keyed by
// the ids asked for, and a record of what the plugin asked.
class FakeProvider : public DeviceProvider {
 public:
  std::vector<PluginDevice> Devices() override {
    std::lock_guard<std::mutex> lock(mu_);
    return devices_;
  }

  StatusOr<ContainerAllocation> Allocate(const std::vector<std::string>& ids) override {
    std::lock_guard<std::mutex> lock(mu_);
    allocate_calls_.push_back(ids);
    if (error_) return *error_;
    auto it = allocations_.find(ids);
    if (it == allocations_.end()) return NotFoundError("no such device");
    return it->second;
  }

  StatusOr<std::vector<std::string>> PreferredAllocation(
      const std::vector<std::string>& available, const std::vector<std::string>& must_include,
      int size) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      preferred_calls_.push_back({available, must_include, size});
      if (error_) return *error_;
    }
    return DeviceProvider::PreferredAllocation(available, must_include, size);
  }

  void SetDevices(std::vector<PluginDevice> devices) {
    std::lock_guard<std::mutex> lock(mu_);
    devices_ = std::move(devices);
  }
  void SetHealthy(const std::string& id, bool healthy) {
    std::lock_guard<std::mutex> lock(mu_);
    for (PluginDevice& device : devices_) {
      if (device.id == id) device.healthy = healthy;
    }
  }
  void SetAllocation(const std::vector<std::string>& ids, ContainerAllocation allocation) {
    std::lock_guard<std::mutex> lock(mu_);
    allocations_[ids] = std::move(allocation);
  }
  void FailWith(std::optional<Status> error) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
  }

  struct PreferredCall {
    std::vector<std::string> available, must_include;
    int size;
  };
  std::vector<std::vector<std::string>> allocate_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return allocate_calls_;
  }
  std::vector<PreferredCall> preferred_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return preferred_calls_;
  }

 private:
  std::mutex mu_;
  std::vector<PluginDevice> devices_;
  std::map<std::vector<std::string>, ContainerAllocation> allocations_;
  std::optional<Status> error_;
  std::vector<std::vector<std::string>> allocate_calls_;
  std::vector<PreferredCall> preferred_calls_;
};

// What the kubelet received, in the provider's terms, so it can be compared whole.
ContainerAllocation FromKubelet(const v1beta1::ContainerAllocateResponse& in) {
  ContainerAllocation out;
  out.envs.insert(in.envs().begin(), in.envs().end());
  for (const v1beta1::Mount& m : in.mounts()) {
    out.mounts.push_back({m.container_path(), m.host_path(), m.read_only()});
  }
  for (const v1beta1::DeviceSpec& d : in.devices()) {
    out.devices.push_back({d.container_path(), d.host_path(), d.permissions()});
  }
  out.annotations.insert(in.annotations().begin(), in.annotations().end());
  for (const v1beta1::CDIDevice& c : in.cdi_devices()) out.cdi_devices.push_back(c.name());
  return out;
}

struct DeviceView {
  std::string id;
  std::string health;
  std::vector<int64_t> numa;
  friend bool operator==(const DeviceView&, const DeviceView&) = default;
  friend std::ostream& operator<<(std::ostream& out, const DeviceView& d) {
    out << d.id << " " << d.health << " numa[";
    for (int64_t n : d.numa) out << n << " ";
    return out << "]";
  }
};

std::vector<DeviceView> View(const v1beta1::ListAndWatchResponse& list) {
  std::vector<DeviceView> out;
  for (const v1beta1::Device& d : list.devices()) {
    DeviceView view{d.id(), d.health(), {}};
    if (d.has_topology()) {
      for (const v1beta1::NUMANode& n : d.topology().nodes()) view.numa.push_back(n.id());
    }
    out.push_back(view);
  }
  return out;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string Slot(const std::string& gpu, int slot) { return gpu + "::" + std::to_string(slot); }

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kubelet_.Start().ok());
    // GPU A shared as four slots on NUMA node 0; GPU B as two slots, topology unknown.
    std::vector<PluginDevice> devices;
    for (int i = 0; i < 4; ++i) devices.push_back({Slot(kGpuA, i), true, 0});
    for (int i = 0; i < 2; ++i) devices.push_back({Slot(kGpuB, i), true, std::nullopt});
    provider_.SetDevices(devices);
  }

  DevicePluginOptions Options() const {
    DevicePluginOptions options;
    options.resource_name = "gpufrac.io/gpu";
    options.kubelet_dir = dir_.path();
    options.socket_name = "gpufrac-gpu.sock";
    options.kubelet_check_period = 20ms;
    options.max_register_backoff = 200ms;
    options.register_timeout = 1s;
    return options;
  }

  // Starts the plugin and waits for the kubelet to have accepted it.
  void StartPlugin(DevicePluginOptions options) {
    plugin_ = std::make_unique<DevicePlugin>(std::move(options), &provider_);
    const Status status = plugin_->Start();
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(kubelet_.WaitForRegistrations(1, 2s));
  }
  void StartPlugin() { StartPlugin(Options()); }

  // A kubelet client for the plugin's last registration.
  std::unique_ptr<KubeletClient> Connect() {
    const std::vector<v1beta1::RegisterRequest> requests = kubelet_.registrations();
    EXPECT_FALSE(requests.empty());
    if (requests.empty()) return nullptr;
    return std::make_unique<KubeletClient>(dir_.path(), requests.back().endpoint());
  }

  // Allocates `ids` for one container and returns what the kubelet got.
  ContainerAllocation AllocateOne(const std::vector<std::string>& ids) {
    std::unique_ptr<KubeletClient> kubelet = Connect();
    v1beta1::AllocateResponse response;
    const grpc::Status status = kubelet->Allocate({ids}, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.container_responses_size(), 1);
    if (response.container_responses_size() != 1) return {};
    return FromKubelet(response.container_responses(0));
  }

  TempDir dir_;
  FakeKubelet kubelet_{dir_.path()};
  FakeProvider provider_;
  std::unique_ptr<DevicePlugin> plugin_;  // Last: stopped before the provider goes.
};

TEST_F(DevicePluginTest, RegistersWithTheKubelet) {
  StartPlugin();
  const std::vector<v1beta1::RegisterRequest> requests = kubelet_.registrations();
  ASSERT_EQ(requests.size(), 1u);
  const v1beta1::RegisterRequest& request = requests[0];
  EXPECT_EQ(request.version(), "v1beta1");
  EXPECT_EQ(request.endpoint(), "gpufrac-gpu.sock");  // Relative: the kubelet adds its directory.
  EXPECT_EQ(request.resource_name(), "gpufrac.io/gpu");
  ASSERT_TRUE(request.has_options());
  EXPECT_FALSE(request.options().pre_start_required());
  EXPECT_TRUE(request.options().get_preferred_allocation_available());
  EXPECT_EQ(plugin_->registrations(), 1);
  EXPECT_TRUE(plugin_->registration_status().ok());
  EXPECT_EQ(plugin_->socket_path(), dir_.path() + "/gpufrac-gpu.sock");

  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(Connect()->GetDevicePluginOptions(&options).ok());
  EXPECT_FALSE(options.pre_start_required());
  EXPECT_TRUE(options.get_preferred_allocation_available());
}

TEST_F(DevicePluginTest, PreferredAllocationCanBeLeftOut) {
  DevicePluginOptions options = Options();
  options.resource_name = "nvidia.com/mig-1g.10gb";
  options.socket_name = "gpufrac-mig-1g.10gb.sock";
  options.preferred_allocation = false;
  StartPlugin(options);
  const v1beta1::RegisterRequest request = kubelet_.registrations().at(0);
  EXPECT_EQ(request.resource_name(), "nvidia.com/mig-1g.10gb");
  EXPECT_EQ(request.endpoint(), "gpufrac-mig-1g.10gb.sock");
  EXPECT_FALSE(request.options().get_preferred_allocation_available());

  std::unique_ptr<KubeletClient> kubelet = Connect();
  v1beta1::DevicePluginOptions answered;
  ASSERT_TRUE(kubelet->GetDevicePluginOptions(&answered).ok());
  EXPECT_FALSE(answered.get_preferred_allocation_available());
  v1beta1::PreferredAllocationResponse response;
  EXPECT_EQ(kubelet->GetPreferredAllocation({kMig}, {}, 1, &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_TRUE(provider_.preferred_calls().empty());
}

TEST_F(DevicePluginTest, ListAndWatchSendsTheListThenEveryHealthChange) {
  StartPlugin();
  std::unique_ptr<KubeletClient> kubelet = Connect();
  kubelet->StartListAndWatch();

  std::optional<v1beta1::ListAndWatchResponse> list = kubelet->NextDeviceList(2s);
  ASSERT_TRUE(list.has_value());
  EXPECT_THAT(View(*list), ElementsAre(DeviceView{Slot(kGpuA, 0), "Healthy", {0}},
                                       DeviceView{Slot(kGpuA, 1), "Healthy", {0}},
                                       DeviceView{Slot(kGpuA, 2), "Healthy", {0}},
                                       DeviceView{Slot(kGpuA, 3), "Healthy", {0}},
                                       DeviceView{Slot(kGpuB, 0), "Healthy", {}},
                                       DeviceView{Slot(kGpuB, 1), "Healthy", {}}));
  // Nothing changed, nothing sent.
  EXPECT_FALSE(kubelet->NextDeviceList(100ms).has_value());

  // GPU B fails (an XID error, say): both its slots turn unhealthy, and stay listed.
  provider_.SetHealthy(Slot(kGpuB, 0), false);
  provider_.SetHealthy(Slot(kGpuB, 1), false);
  plugin_->DevicesChanged();
  list = kubelet->NextDeviceList(2s);
  ASSERT_TRUE(list.has_value());
  std::vector<DeviceView> view = View(*list);
  ASSERT_EQ(view.size(), 6u);
  EXPECT_EQ(view[0].health, "Healthy");
  EXPECT_EQ(view[4], (DeviceView{Slot(kGpuB, 0), "Unhealthy", {}}));
  EXPECT_EQ(view[5], (DeviceView{Slot(kGpuB, 1), "Unhealthy", {}}));

  provider_.SetHealthy(Slot(kGpuB, 0), true);
  provider_.SetHealthy(Slot(kGpuB, 1), true);
  plugin_->DevicesChanged();
  list = kubelet->NextDeviceList(2s);
  ASSERT_TRUE(list.has_value());
  for (const DeviceView& device : View(*list)) EXPECT_EQ(device.health, "Healthy") << device;

  // A second kubelet connection gets its own full list and its own updates.
  std::unique_ptr<KubeletClient> second = Connect();
  second->StartListAndWatch();
  ASSERT_TRUE(second->NextDeviceList(2s).has_value());
  provider_.SetDevices({{Slot(kGpuA, 0), true, 1}});
  plugin_->DevicesChanged();
  for (KubeletClient* client : {kubelet.get(), second.get()}) {
    list = client->NextDeviceList(2s);
    ASSERT_TRUE(list.has_value());
    EXPECT_THAT(View(*list), ElementsAre(DeviceView{Slot(kGpuA, 0), "Healthy", {1}}));
  }
}

TEST_F(DevicePluginTest, AllocateFractionOfASharedGpu) {
  // What the resource manager returns for a share of GPU A: the GPU by UUID, the limiter preloaded
  // from a read-only mount, the allocation's limit file in a read-only directory.
  ContainerAllocation share;
  share.envs = {{"CUDA_VISIBLE_DEVICES", kGpuA},
                {"NVIDIA_VISIBLE_DEVICES", kGpuA},
                {"GPUFRAC_LIMIT_FILE", "/run/gpufrac/limit"}};
  share.mounts = {{"/usr/lib/gpufrac/libgpufrac.so", "/var/lib/gpufrac/lib/libgpufrac.so", true},
                  {"/run/gpufrac", "/var/lib/gpufrac/allocations/a1b2c3", true},
                  {"/etc/ld.so.preload", "/var/lib/gpufrac/ld.so.preload", true}};
  share.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"},
                   {"/dev/nvidiactl", "/dev/nvidiactl", "rw"}};
  share.annotations = {{"gpufrac.io/allocation", "a1b2c3"}};
  const std::vector<std::string> ids = {Slot(kGpuA, 0), Slot(kGpuA, 1)};
  provider_.SetAllocation(ids, share);
  StartPlugin();

  EXPECT_EQ(AllocateOne(ids), share);
  EXPECT_THAT(provider_.allocate_calls(), ElementsAre(ids));
}

TEST_F(DevicePluginTest, AllocateWholeGpu) {
  ContainerAllocation whole;
  whole.envs = {{"CUDA_VISIBLE_DEVICES", kGpuB}, {"NVIDIA_VISIBLE_DEVICES", kGpuB}};
  whole.devices = {{"/dev/nvidia1", "/dev/nvidia1", "rw"},
                   {"/dev/nvidiactl", "/dev/nvidiactl", "rw"},
                   {"/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"}};
  provider_.SetAllocation({kGpuB}, whole);
  StartPlugin();

  EXPECT_EQ(AllocateOne({kGpuB}), whole);
}

TEST_F(DevicePluginTest, AllocateMigInstance) {
  ContainerAllocation mig;
  mig.envs = {{"CUDA_VISIBLE_DEVICES", kMig}, {"NVIDIA_VISIBLE_DEVICES", kMig}};
  mig.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"},
                 {"/dev/nvidiactl", "/dev/nvidiactl", "rw"},
                 {"/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap21", "r"},
                 {"/dev/nvidia-caps/nvidia-cap22", "/dev/nvidia-caps/nvidia-cap22", "r"}};
  mig.mounts = {{"/var/run/gpufrac/mig", "/run/gpufrac/mig/gi1-ci0", false}};
  mig.cdi_devices = {std::string("nvidia.com/gpu=") + kMig};
  provider_.SetAllocation({kMig}, mig);
  StartPlugin();

  EXPECT_EQ(AllocateOne({kMig}), mig);
}

TEST_F(DevicePluginTest, AllocateAnswersEveryContainerInOrder) {
  ContainerAllocation first, second;
  first.envs = {{"NVIDIA_VISIBLE_DEVICES", kGpuA}};
  second.envs = {{"NVIDIA_VISIBLE_DEVICES", kGpuB}};
  provider_.SetAllocation({Slot(kGpuA, 3)}, first);
  provider_.SetAllocation({Slot(kGpuB, 0), Slot(kGpuB, 1)}, second);
  StartPlugin();

  v1beta1::AllocateResponse response;
  ASSERT_TRUE(
      Connect()->Allocate({{Slot(kGpuA, 3)}, {Slot(kGpuB, 0), Slot(kGpuB, 1)}}, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 2);
  EXPECT_EQ(FromKubelet(response.container_responses(0)), first);
  EXPECT_EQ(FromKubelet(response.container_responses(1)), second);
}

TEST_F(DevicePluginTest, AllocateErrorReachesTheKubeletWithItsMessage) {
  StartPlugin();
  std::unique_ptr<KubeletClient> kubelet = Connect();
  const struct {
    Status error;
    grpc::StatusCode code;
  } cases[] = {
      {ResourceExhaustedError("GPU-6f1c has 2 GiB free, the pod asks for 4 GiB"),
       grpc::StatusCode::RESOURCE_EXHAUSTED},
      {InvalidArgumentError("slot ids of two GPUs in one container"),
       grpc::StatusCode::INVALID_ARGUMENT},
      {UnavailableError("the GPU fell off the bus"), grpc::StatusCode::UNAVAILABLE},
      {NotFoundError("no device GPU-x::9"), grpc::StatusCode::NOT_FOUND},
  };
  for (const auto& c : cases) {
    provider_.FailWith(c.error);
    v1beta1::AllocateResponse response;
    const grpc::Status status = kubelet->Allocate({{Slot(kGpuA, 0)}}, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.error;
    EXPECT_THAT(status.error_message(), HasSubstr(c.error.message()));
    EXPECT_THAT(status.error_message(), HasSubstr(Slot(kGpuA, 0)));
  }
}

TEST_F(DevicePluginTest, GetPreferredAllocationPassesThrough) {
  StartPlugin();
  std::unique_ptr<KubeletClient> kubelet = Connect();
  const std::vector<std::string> available = {Slot(kGpuB, 0), Slot(kGpuA, 0), Slot(kGpuA, 1),
                                              Slot(kGpuA, 2)};
  v1beta1::PreferredAllocationResponse response;
  ASSERT_TRUE(kubelet->GetPreferredAllocation(available, {Slot(kGpuA, 2)}, 2, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 1);
  // The default preference: what must be included, then the first available.
  EXPECT_THAT(response.container_responses(0).deviceids(),
              ElementsAre(Slot(kGpuA, 2), Slot(kGpuB, 0)));
  const std::vector<FakeProvider::PreferredCall> calls = provider_.preferred_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].available, available);
  EXPECT_THAT(calls[0].must_include, ElementsAre(Slot(kGpuA, 2)));
  EXPECT_EQ(calls[0].size, 2);

  provider_.FailWith(InvalidArgumentError("cannot spread one container over two GPUs"));
  const grpc::Status status = kubelet->GetPreferredAllocation(available, {}, 2, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("cannot spread one container over two GPUs"));
}

TEST_F(DevicePluginTest, PreStartContainerAnswersEmpty) {
  StartPlugin();
  v1beta1::PreStartContainerResponse response;
  EXPECT_TRUE(Connect()->PreStartContainer({Slot(kGpuA, 0)}, &response).ok());
}

TEST_F(DevicePluginTest, RegistersAgainAfterAKubeletRestart) {
  StartPlugin();
  std::unique_ptr<KubeletClient> old_kubelet = Connect();
  old_kubelet->StartListAndWatch();
  ASSERT_TRUE(old_kubelet->NextDeviceList(2s).has_value());

  const auto restarted = std::chrono::steady_clock::now();
  ASSERT_TRUE(kubelet_.Restart().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(2, 3s));
  EXPECT_LT(std::chrono::steady_clock::now() - restarted, 2s);
  EXPECT_TRUE(WaitFor([&] { return plugin_->registrations() == 2; }, 2s));
  EXPECT_TRUE(plugin_->registration_status().ok());
  const std::vector<v1beta1::RegisterRequest> requests = kubelet_.registrations();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].endpoint(), "gpufrac-gpu.sock");
  EXPECT_EQ(requests[1].resource_name(), "gpufrac.io/gpu");
  // The plugin served again on a fresh socket, which the restart had deleted.
  EXPECT_TRUE(std::filesystem::is_socket(plugin_->socket_path()));
  // The old kubelet's stream ended with the old server.
  EXPECT_TRUE(old_kubelet->WaitForStreamEnd(2s).has_value());

  std::unique_ptr<KubeletClient> kubelet = Connect();
  kubelet->StartListAndWatch();
  std::optional<v1beta1::ListAndWatchResponse> list = kubelet->NextDeviceList(2s);
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->devices_size(), 6);
  provider_.SetHealthy(Slot(kGpuA, 0), false);
  plugin_->DevicesChanged();
  list = kubelet->NextDeviceList(2s);
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->devices(0).health(), "Unhealthy");

  // And a second restart works as well as the first.
  ASSERT_TRUE(kubelet_.Restart().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, 3s));
}

TEST_F(DevicePluginTest, RetriesRegistrationUntilTheKubeletIsUp) {
  kubelet_.Stop();
  std::filesystem::remove(kubelet_.socket_path());
  plugin_ = std::make_unique<DevicePlugin>(Options(), &provider_);
  ASSERT_TRUE(plugin_->Start().ok());  // Serving; registration pending.
  EXPECT_EQ(plugin_->registrations(), 0);
  const Status status = plugin_->registration_status();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_THAT(status.message(),
              HasSubstr("cannot register with the kubelet at " + kubelet_.socket_path() + ": "));
  // Let a few retries fail, backing off.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(kubelet_.registrations().size(), 0u);

  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, 2s));
  EXPECT_TRUE(WaitFor([&] { return plugin_->registration_status().ok(); }, 2s));
  EXPECT_EQ(plugin_->registrations(), 1);
}

TEST_F(DevicePluginTest, RetriesWhenTheKubeletRefuses) {
  kubelet_.RefuseRegistrations("resource gpufrac.io/gpu is already registered");
  plugin_ = std::make_unique<DevicePlugin>(Options(), &provider_);
  ASSERT_TRUE(plugin_->Start().ok());
  const Status status = plugin_->registration_status();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("resource gpufrac.io/gpu is already registered"));
  EXPECT_TRUE(WaitFor([&] { return kubelet_.registrations().size() >= 2; }, 2s));
  EXPECT_EQ(kubelet_.accepted(), 0u);

  kubelet_.RefuseRegistrations(std::nullopt);
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, 2s));
  EXPECT_TRUE(WaitFor([&] { return plugin_->registrations() == 1; }, 2s));
}

TEST_F(DevicePluginTest, ReplacesAStaleSocket) {
  // A socket file left by a crashed run: bound, then abandoned.
  const std::string path = dir_.path() + "/gpufrac-gpu.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ::close(fd);
  ASSERT_TRUE(std::filesystem::is_socket(path));

  StartPlugin();
  v1beta1::DevicePluginOptions options;
  EXPECT_TRUE(Connect()->GetDevicePluginOptions(&options).ok());
}

TEST_F(DevicePluginTest, WillNotReplaceAFileThatIsNotASocket) {
  std::ofstream(dir_.path() + "/gpufrac-gpu.sock") << "not a socket";
  DevicePlugin plugin(Options(), &provider_);
  const Status status = plugin.Start();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("is not a socket"));
  EXPECT_EQ(kubelet_.registrations().size(), 0u);
}

TEST_F(DevicePluginTest, RejectsBadOptions) {
  DevicePluginOptions options = Options();
  options.resource_name = "gpu";
  Status status = DevicePlugin(options, &provider_).Start();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("<domain>/<name>"));

  options = Options();
  options.socket_name = "kubelet.sock";
  EXPECT_EQ(DevicePlugin(options, &provider_).Start().code(), StatusCode::kInvalidArgument);

  options = Options();
  options.kubelet_dir = dir_.path() + "/missing";
  status = DevicePlugin(options, &provider_).Start();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(options.kubelet_dir + " does not exist"));
}

TEST_F(DevicePluginTest, StopEndsOpenStreamsPromptly) {
  StartPlugin();
  std::unique_ptr<KubeletClient> kubelet = Connect();
  kubelet->StartListAndWatch();
  ASSERT_TRUE(kubelet->NextDeviceList(2s).has_value());
  // One kubelet that hung up and one still watching.
  std::unique_ptr<KubeletClient> gone = Connect();
  gone->StartListAndWatch();
  ASSERT_TRUE(gone->NextDeviceList(2s).has_value());
  gone->CancelListAndWatch();

  const auto stopping = std::chrono::steady_clock::now();
  plugin_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 1s);
  const std::optional<grpc::Status> end = kubelet->WaitForStreamEnd(1s);
  ASSERT_TRUE(end.has_value());
  EXPECT_FALSE(std::filesystem::exists(plugin_->socket_path()));
  plugin_->Stop();  // Idempotent.
  EXPECT_EQ(plugin_->Start().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gpufrac::k8s
