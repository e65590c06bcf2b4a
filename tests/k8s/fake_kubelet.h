// A stand-in kubelet for device-plugin tests: the Registration service on <dir>/kubelet.sock, and a
// client in the kubelet's role that calls a registered plugin over its socket. Real gRPC, no k8s.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "k8s/proto/deviceplugin_v1beta1.grpc.pb.h"

namespace gpufrac::k8s::testing {

// The kubelet's side of registration. Records every Register request; can refuse them, the way a
// kubelet refuses a second plugin for the same resource.
class FakeKubelet {
 public:
  // `dir` plays /var/lib/kubelet/device-plugins and must exist.
  explicit FakeKubelet(std::string dir);
  ~FakeKubelet();  // Stops.

  FakeKubelet(const FakeKubelet&) = delete;
  FakeKubelet& operator=(const FakeKubelet&) = delete;

  // Serves Registration on dir/kubelet.sock.
  Status Start();
  void Stop();
  // What a kubelet restart does to the directory: stop, delete every socket in it (plugins'
  // included), serve a new kubelet.sock. Recorded requests are kept.
  Status Restart();

  const std::string& dir() const { return dir_; }
  std::string socket_path() const;

  // Every Register request received so far, refused ones included, oldest first.
  std::vector<v1beta1::RegisterRequest> registrations() const;
  // Waits until at least `count` requests have been accepted; false on timeout.
  bool WaitForRegistrations(size_t count, std::chrono::milliseconds timeout) const;
  // Accepted requests so far.
  size_t accepted() const;
  // While set, Register answers with this message (gRPC UNKNOWN, as the kubelet does).
  void RefuseRegistrations(std::optional<std::string> message);

 private:
  class Service;

  const std::string dir_;
  // One service and server per kubelet "process"; a restart replaces both.
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;

  // What outlives a restart.
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::vector<v1beta1::RegisterRequest> requests_;
  size_t accepted_ = 0;
  std::optional<std::string> refusal_;
};

// The kubelet calling one plugin. Unary calls return the gRPC status so tests can check the codes
// and messages the kubelet would put into pod events.
class KubeletClient {
 public:
  // Connects to dir/endpoint, endpoint as the plugin registered it (relative).
  KubeletClient(const std::string& dir, const std::string& endpoint);
  ~KubeletClient();  // Cancels a ListAndWatch stream still open.

  KubeletClient(const KubeletClient&) = delete;
  KubeletClient& operator=(const KubeletClient&) = delete;

  // Per-call deadline of the unary calls.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  grpc::Status GetDevicePluginOptions(v1beta1::DevicePluginOptions* options);
  // One container request per element of `containers`.
  grpc::Status Allocate(const std::vector<std::vector<std::string>>& containers,
                        v1beta1::AllocateResponse* response);
  grpc::Status GetPreferredAllocation(const std::vector<std::string>& available,
                                      const std::vector<std::string>& must_include, int size,
                                      v1beta1::PreferredAllocationResponse* response);
  grpc::Status PreStartContainer(const std::vector<std::string>& device_ids,
                                 v1beta1::PreStartContainerResponse* response);

  // Opens the stream; a thread reads the device lists into a queue. One stream per client.
  void StartListAndWatch();
  // The next list received, or nullopt if none arrived in `timeout` (or the stream ended).
  std::optional<v1beta1::ListAndWatchResponse> NextDeviceList(std::chrono::milliseconds timeout);
  // The stream's final status once the plugin ended it; nullopt if still open after `timeout`.
  std::optional<grpc::Status> WaitForStreamEnd(std::chrono::milliseconds timeout);
  // Hangs up, as a kubelet going away does, and waits for the reader thread.
  void CancelListAndWatch();

 private:
  void ReadStream();

  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  std::chrono::milliseconds timeout_{5000};

  grpc::ClientContext stream_context_;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<v1beta1::ListAndWatchResponse> lists_;
  std::optional<grpc::Status> stream_end_;
};

// A fresh directory under /tmp (short, as unix socket paths must be), removed with its contents
// on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gpufrac::k8s::testing
