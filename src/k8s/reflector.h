// Reflector: keeps a local copy of one API collection (e.g. the pods on a node, or all nodes)
// up to date by listing it and then watching for changes, and tells handlers what changed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "k8s/api_client.h"

namespace gpufrac::k8s {

struct ReflectorOptions {
  // Waits after failed lists and watches: doubling from initial_backoff up to max_backoff, and
  // back to initial_backoff after a success.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
};

// Counters for logs and tests. lists counts every list (the first included); relists those
// after a 410 Gone; reconnects the watches started again from the last resourceVersion after a
// watch ended (normally or by an error).
struct ReflectorCounters {
  int64_t lists = 0;
  int64_t relists = 0;
  int64_t reconnects = 0;
  int64_t errors = 0;  // Failed lists and watches that ended in an error.
  int64_t events = 0;  // Watch events applied (bookmarks included).
};

// Life cycle: construct, Start() once, Stop() (or destroy). The handlers run on the reflector's
// thread, one at a time, after the cache has been updated; they must not call Stop().
//
// Behaviour: list (every page), deliver each object as an upsert, watch from the list's
// resourceVersion; when the watch ends or drops, watch again from the last resourceVersion seen
// (bookmarks included); on 410 Gone list again and reconcile (deletes for cached objects that
// vanished, upserts for all others); on errors wait (ReflectorOptions) and try again.
class Reflector {
 public:
  struct Handlers {
    std::function<void(const json& object)> on_upsert;
    std::function<void(const json& object)> on_delete;  // The last state known.
  };

  // `path` is a collection ("/api/v1/nodes", "/api/v1/pods"); `options` its selectors.
  Reflector(ApiClient& client, std::string path, ListOptions options, Handlers handlers,
            ReflectorOptions reflector_options = {});
  ~Reflector();  // Stop()s.
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  void Start();
  // Ends an open watch at once (its connection is shut down) and joins the thread. A list in
  // progress is not interrupted, so Stop() can take up to the client's timeout then.
  void Stop();

  // True once the first list has been delivered; false when `timeout` passes first.
  bool WaitForSync(std::chrono::milliseconds timeout) const;
  bool synced() const;

  // Copies of the cached objects, ordered by namespace and name.
  std::vector<json> Snapshot() const;
  // The cached object ("" namespace for cluster-scoped ones).
  std::optional<json> Get(const std::string& ns, const std::string& name) const;
  // The resourceVersion the next watch starts from.
  std::string last_resource_version() const;
  ReflectorCounters counters() const;

 private:
  using Key = std::pair<std::string, std::string>;  // namespace, name

  void Run();
  // Lists and reconciles the cache; false on error.
  bool ListAndReconcile(bool relist);
  // Waits `delay` unless stopped first; false when stopped.
  bool Sleep(std::chrono::milliseconds delay);
  bool stopping() const { return stopping_.load(); }

  ApiClient& client_;
  const std::string path_;
  const ListOptions options_;
  const Handlers handlers_;
  const ReflectorOptions reflector_options_;

  std::atomic<bool> stopping_{false};
  WatchStopper stopper_;
  std::thread thread_;
  std::mutex join_mu_;  // Serialises joining thread_.

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // Signals sync and stop.
  std::map<Key, json> cache_;
  std::string resource_version_;
  bool synced_ = false;
  ReflectorCounters counters_;
};

}  // namespace gpufrac::k8s
