// Reflector's list-then-watch loop on one background thread.
#include "k8s/reflector.h"

#include <algorithm>

#include "common/log.h"

namespace gpufrac::k8s {
namespace {

std::string Field(const json& object, const char* key) {
  if (!object.is_object() || !object.contains("metadata")) return "";
  const json& meta = object["metadata"];
  if (!meta.is_object() || !meta.contains(key) || !meta[key].is_string()) return "";
  return meta[key];
}

}  // namespace

Reflector::Reflector(ApiClient& client, std::string path, ListOptions options, Handlers handlers,
                     ReflectorOptions reflector_options)
    : client_(client),
      path_(std::move(path)),
      options_(std::move(options)),
      handlers_(std::move(handlers)),
      reflector_options_(reflector_options) {}

Reflector::~Reflector() { Stop(); }

void Reflector::Start() {
  if (thread_.joinable() || stopping()) return;
  thread_ = std::thread([this] { Run(); });
}

void Reflector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  stopper_.Stop();
  // Stop may be called from two threads (a signal handler's and a destructor): one joins.
  std::lock_guard<std::mutex> join_lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

bool Reflector::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return synced_; });
}

bool Reflector::synced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synced_;
}

std::vector<json> Reflector::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> out;
  out.reserve(cache_.size());
  for (const auto& [key, object] : cache_) out.push_back(object);
  return out;
}

std::optional<json> Reflector::Get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(Key{ns, name});
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::string Reflector::last_resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

ReflectorCounters Reflector::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

bool Reflector::Sleep(std::chrono::milliseconds delay) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, delay, [this] { return stopping(); });
}

bool Reflector::ListAndReconcile(bool relist) {
  StatusOr<json> list = client_.List(path_, options_);
  if (!list.ok()) {
    LogWarning("list of %s failed: %s", path_.c_str(), list.status().ToString().c_str());
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.errors;
    return false;
  }
  std::map<Key, json> fresh;
  for (json& item : (*list)["items"]) {
    Key key{Field(item, "namespace"), Field(item, "name")};
    fresh[key] = std::move(item);
  }
  std::vector<json> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, object] : cache_) {
      if (fresh.count(key) == 0) gone.push_back(std::move(object));
    }
    cache_ = fresh;
    resource_version_ = Field(*list, "resourceVersion");
    ++counters_.lists;
    if (relist) ++counters_.relists;
  }
  // The cache already holds the new state, so handlers that read it see what they are told.
  for (const json& object : gone) {
    if (handlers_.on_delete) handlers_.on_delete(object);
  }
  for (const auto& [key, object] : fresh) {
    if (handlers_.on_upsert) handlers_.on_upsert(object);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    synced_ = true;
  }
  cv_.notify_all();
  return true;
}

void Reflector::Run() {
  std::chrono::milliseconds backoff = reflector_options_.initial_backoff;
  auto wait = [&] {
    bool awake = Sleep(backoff);
    backoff = std::min(backoff * 2, reflector_options_.max_backoff);
    return awake;
  };
  bool need_list = true;
  bool relist = false;
  bool rewatch = false;
  while (!stopping()) {
    if (need_list) {
      if (!ListAndReconcile(relist)) {
        if (!wait()) return;
        continue;
      }
      need_list = false;
      rewatch = false;
      backoff = reflector_options_.initial_backoff;
    }
    std::string from;
    {
      std::lock_guard<std::mutex> lock(mu_);
      from = resource_version_;
      if (rewatch) ++counters_.reconnects;
    }
    rewatch = true;
    WatchResult result = client_.Watch(
        path_, options_, from,
        [this](const std::string& type, const json& object) {
          const std::string rv = Field(object, "resourceVersion");
          Key key{Field(object, "namespace"), Field(object, "name")};
          bool deleted = type == "DELETED";
          bool upserted = type == "ADDED" || type == "MODIFIED";
          {
            std::lock_guard<std::mutex> lock(mu_);
            ++counters_.events;
            if (!rv.empty()) resource_version_ = rv;
            if (deleted) cache_.erase(key);
            if (upserted) cache_[key] = object;
          }
          if (deleted && handlers_.on_delete) handlers_.on_delete(object);
          if (upserted && handlers_.on_upsert) handlers_.on_upsert(object);
          return !stopping();
        },
        &stopper_);
    switch (result.end) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kClosed:
        backoff = reflector_options_.initial_backoff;
        break;
      case WatchEnd::kGone:
        LogInfo("watch of %s: %s; listing again", path_.c_str(), result.status.message().c_str());
        need_list = true;
        relist = true;
        break;
      case WatchEnd::kError:
        LogWarning("watch of %s failed: %s", path_.c_str(), result.status.ToString().c_str());
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++counters_.errors;
        }
        // A watch that got events was healthy until it dropped: retry after the shortest wait.
        if (result.events > 0) backoff = reflector_options_.initial_backoff;
        if (!wait()) return;
        break;
    }
  }
}

}  // namespace gpufrac::k8s
