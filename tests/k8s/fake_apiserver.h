// A Kubernetes API server stand-in for tests: HTTPS on 127.0.0.1 with a CA made at start,
// in-memory core/v1 pods, nodes and events with list/watch/create/patch/delete and pod
// bindings, a record of every request, and fault injection (errors, compaction, dropped watches).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "k8s/kube_config.h"

namespace gpufrac::k8s::testing {

using json = nlohmann::json;

// One request as the server received it (query parameters decoded).
struct RecordedRequest {
  std::string method;
  std::string path;
  std::multimap<std::string, std::string> query;
  std::string content_type;
  std::string authorization;
  std::string body;

  // The query parameter's (first) value, or "" when absent.
  std::string Param(const std::string& key) const;
  bool HasParam(const std::string& key) const { return query.count(key) > 0; }
  bool is_watch() const { return Param("watch") == "1" || Param("watch") == "true"; }
};

class FakeApiServer {
 public:
  struct Options {
    // Requests must carry "Authorization: Bearer <token>" (401 otherwise).
    std::string token = "fake-token";
    // Require a client certificate signed by the fake's CA (see client_cert_pem()).
    bool require_client_cert = false;
    // 410 on a watch as an HTTP status instead of the API server's usual 200 with an ERROR
    // event whose object is a Status with code 410.
    bool gone_as_http_status = false;
    // Every write (POST, PUT, PATCH, DELETE) is answered this much later, as by an API server
    // whose etcd sits on a slow disk; it is applied at the end of the wait, so a write's
    // preconditions are checked against the objects as they are then. Reads are not delayed.
    std::chrono::milliseconds write_latency{0};
  };

  // Generates the CA and certificates, writes the CA to a temporary file and starts serving.
  static StatusOr<std::unique_ptr<FakeApiServer>> Start(Options options);
  static StatusOr<std::unique_ptr<FakeApiServer>> Start() { return Start(Options()); }
  // Ends every watch (as a dropped connection) and stops.
  ~FakeApiServer();

  int port() const;
  std::string url() const;  // "https://127.0.0.1:<port>"
  const std::string& ca_pem() const;
  const std::string& ca_file() const;  // The CA PEM on disk (removed with the server).
  // A client certificate and key signed by the CA (CN "fake-client").
  const std::string& client_cert_pem() const;
  const std::string& client_key_pem() const;
  // server, ca_pem and token filled in.
  ClientConfig client_config() const;

  // The accepted token from now on.
  void set_token(const std::string& token);

  // --- Objects (kinds Pod, Node, Namespace, Event; "pods", "nodes", "namespaces", "events" in
  // paths) ---

  // Creates or replaces the object as a server-side change (no precondition), giving it a new
  // resourceVersion (and uid/creationTimestamp when new) and an ADDED or MODIFIED event.
  // Returns the stored object. Another kind is a test bug: throws std::invalid_argument.
  json Put(json object);
  // Deletes it with a DELETED event; false when there was none.
  bool Delete(const std::string& resource, const std::string& ns, const std::string& name);
  std::optional<json> Get(const std::string& resource, const std::string& ns,
                          const std::string& name) const;
  // The latest resourceVersion handed out.
  std::string resource_version() const;

  // --- Faults ---

  // The next `count` requests whose method is `method` ("" any) and whose path starts with
  // `path_prefix` are answered with `code` and a Status (reason given or derived), after the
  // token check. `watch`: only watches (true), only non-watches (false), or both (nullopt).
  void FailNext(const std::string& method, const std::string& path_prefix, int code, int count = 1,
                std::optional<bool> watch = std::nullopt, const std::string& reason = "");
  // Forgets history: watches from a resourceVersion older than now get 410 Gone, as do
  // continue tokens issued before.
  void Compact();
  // Closes every open watch mid-stream, without the end of the chunked body.
  void DropWatches();
  // Sends a BOOKMARK carrying the current resourceVersion to every watch that allowed them.
  void SendBookmarks();
  // While held, watches send nothing (changes queue up); lets a test change objects and compact
  // before a client can see the changes.
  void HoldWatches(bool hold);
  // Watch streams open now, and waiting until at least `count` are (false on timeout).
  int open_watches() const;
  bool WaitForWatches(int count, std::chrono::milliseconds timeout) const;

  // --- Requests received ---
  std::vector<RecordedRequest> requests() const;
  // Those with this method ("" any) and a path starting with `path_prefix`.
  std::vector<RecordedRequest> requests(const std::string& method,
                                        const std::string& path_prefix) const;
  void ClearRequests();

  struct State;  // Shared with the connection threads.

 private:
  explicit FakeApiServer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace gpufrac::k8s::testing
