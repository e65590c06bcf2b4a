// A small Kubernetes API-server client over HTTPS: get, list (all pages), create, patch, delete
// and watch on API paths, plus PatchWithRetry for optimistic-concurrency updates.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "k8s/kube_config.h"

namespace gpufrac::k8s {

using json = nlohmann::json;

struct ListOptions {
  std::string label_selector;  // "app=x,tier!=db"
  std::string field_selector;  // "spec.nodeName=node1"
  // List: passed through ("" = most recent, consistent read). Watch takes its own argument.
  std::string resource_version;
  // Page size; List follows `continue` until every item is read. 0: one unpaged request.
  int64_t page_size = 500;
  // Watch only: the server ends the watch normally after this long (timeoutSeconds).
  std::chrono::seconds watch_timeout{300};
};

enum class PatchType {
  kMerge,           // application/merge-patch+json (RFC 7386)
  kStrategicMerge,  // application/strategic-merge-patch+json
  kJson,            // application/json-patch+json (RFC 6902)
};

// How a Watch ended.
enum class WatchEnd {
  kClosed,  // The server ended the stream (timeoutSeconds passed): watch again from the last
            // resourceVersion seen.
  kGone,    // 410 Gone (HTTP status or an ERROR event): the resourceVersion is too old; list again.
  kError,   // The connection failed or dropped, or the server answered an error: see status.
  kStopped,  // The callback returned false, or the WatchStopper fired.
};

struct WatchResult {
  WatchEnd end = WatchEnd::kClosed;
  Status status;   // Why, for kGone and kError.
  int events = 0;  // Events delivered to the callback (BOOKMARKs included).
};

// Called for each event: type is "ADDED", "MODIFIED", "DELETED" or "BOOKMARK"; return false to
// stop watching. Runs on the thread that called Watch.
using WatchCallback = std::function<bool(const std::string& type, const json& object)>;

// Lets another thread end a Watch promptly (the connection is shut down, so the Watch returns
// without waiting for the next event). Once stopped it stays stopped: every later Watch given it
// returns kStopped at once. Thread-safe.
class WatchStopper {
 public:
  void Stop();
  bool stopped() const;

 private:
  friend class ApiClient;
  // A Watch begins: `on_stop` ends it from Stop(). False (and nothing kept) if already stopped.
  bool Arm(std::function<void()> on_stop);
  void Disarm();  // The Watch has ended.
  mutable std::mutex mu_;
  bool stopped_ = false;
  std::function<void()> on_stop_;  // Set while a Watch runs.
};

// Thread-safe: one instance is shared by every thread of a process; each call uses its own
// connection, so a long watch never blocks other calls. Paths are API paths such as
// "/api/v1/namespaces/default/pods/p" (the server's path prefix, if any, is added).
//
// Errors: the message reads "<VERB> <path>: HTTP <code> <reason>: <server's message>".
//   401, 403                        kPermissionDenied
//   404                             kNotFound
//   409 reason Conflict             kAborted (resourceVersion precondition failed: read again)
//   409 reason AlreadyExists        kFailedPrecondition
//   410 Gone                        kAborted (resourceVersion or continue token expired)
//   400, 405, 413, 415, 422         kInvalidArgument
//   429, 5xx, connection/TLS errors kUnavailable
//   anything else                   kInternal
//
// cpp-httplib 0.11.4 writes without MSG_NOSIGNAL, so a process using this client must ignore
// SIGPIPE (a server hanging up mid-request would otherwise kill it).
class ApiClient {
 public:
  // Validates the configuration (server URL, PEM certificates and key) once.
  static StatusOr<std::unique_ptr<ApiClient>> Create(ClientConfig config);
  ~ApiClient();

  StatusOr<json> Get(const std::string& path);
  // The list object with every item of every page in "items"; metadata.resourceVersion is the
  // one to watch from. A continue token that expired mid-way restarts the list unpaged.
  StatusOr<json> List(const std::string& path, const ListOptions& options = {});
  // POST; returns the created object (or what the server answered, e.g. a Status for bindings).
  StatusOr<json> Create(const std::string& path, const json& object);
  StatusOr<json> Patch(const std::string& path, const json& patch,
                       PatchType type = PatchType::kMerge);
  // DELETE with optional DeleteOptions as body; returns what the server answered.
  StatusOr<json> Delete(const std::string& path, const json& delete_options = nullptr);

  // Streams ?watch=1 events newer than `resource_version` ("" or "0": the server first sends
  // the current objects as ADDED) until the stream ends; see WatchEnd. ERROR events are not
  // delivered: they end the watch (kGone for code 410, kError otherwise).
  WatchResult Watch(const std::string& path, const ListOptions& options,
                    const std::string& resource_version, const WatchCallback& callback,
                    WatchStopper* stopper = nullptr);

  const ClientConfig& config() const { return config_; }

 private:
  struct Tls;
  ApiClient(ClientConfig config, std::string host, int port, std::string base_path,
            std::unique_ptr<Tls> tls);

  StatusOr<json> Call(const std::string& verb, const std::string& path, const std::string& body,
                      const std::string& content_type);
  // The bearer token to send now ("" for none); re-reads token_file when it changed.
  std::string Token();

  ClientConfig config_;
  std::string host_;
  int port_;
  std::string base_path_;
  std::unique_ptr<Tls> tls_;

  std::mutex token_mu_;
  std::string token_;
  std::string token_file_stamp_;  // Identity of the token file's last read (inode, size, mtime).
};

// Read-modify-write with optimistic concurrency: GETs `path`, asks make_patch for a merge patch
// against what was read, and PATCHes it carrying metadata.resourceVersion of what was read, so
// the server refuses it (409, kAborted) if the object changed in between; then reads again and
// retries, up to `attempts` times with a short backoff. Returns the patched object. A make_patch
// error stops at once with that error; an empty patch ({} or null) returns the object unchanged.
StatusOr<json> PatchWithRetry(ApiClient& client, const std::string& path,
                              const std::function<StatusOr<json>(const json& current)>& make_patch,
                              int attempts = 5);

}  // namespace gpufrac::k8s
