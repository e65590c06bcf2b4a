// An in-memory API server for the scheduler extender's tests: pods and nodes with resourceVersions
// (annotations written with one as precondition), the binding subresource, recorded events, pod
// creation, deletion and listing by label (reservation pods), and switches that inject the
// failures the bind protocol and the reservations must survive.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "k8s/cluster_api.h"
#include "k8s/object_fields.h"
#include "k8s/pending_bookings.h"

namespace gpufrac::k8s::testing {

class FakeClusterApi : public ClusterApi {
 public:
  struct Event {
    std::string pod;  // "namespace/name"
    std::string reason;
    std::string message;
    bool warning = false;
  };

  // ---- The objects ----

  // Adds or replaces a pod; gives it a uid (when it has none) and a new resourceVersion.
  // Returns the stored object.
  nlohmann::json PutPod(nlohmann::json pod) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& meta = pod["metadata"];
    if (!meta.contains("namespace")) meta["namespace"] = "default";
    if (!meta.contains("uid")) meta["uid"] = "uid-" + std::to_string(++next_uid_);
    meta["resourceVersion"] = NextVersion();
    pods_[Key(meta["namespace"].get<std::string>(), meta["name"].get<std::string>())] = pod;
    return pod;
  }
  std::optional<nlohmann::json> Pod(const std::string& ns, const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(Key(ns, name));
    if (it == pods_.end()) return std::nullopt;
    return it->second;
  }
  // Sets status.phase ("Succeeded", ...); returns the stored object.
  nlohmann::json SetPodPhase(const std::string& ns, const std::string& name,
                             const std::string& phase) {
    std::lock_guard<std::mutex> lock(mu_);
    nlohmann::json& pod = pods_.at(Key(ns, name));
    pod["status"]["phase"] = phase;
    pod["metadata"]["resourceVersion"] = NextVersion();
    return pod;
  }
  std::vector<nlohmann::json> AllPods() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<nlohmann::json> out;
    for (const auto& [key, pod] : pods_) out.push_back(pod);
    return out;
  }

  nlohmann::json PutNode(nlohmann::json node) {
    std::lock_guard<std::mutex> lock(mu_);
    node["metadata"]["resourceVersion"] = NextVersion();
    nodes_[node["metadata"]["name"].get<std::string>()] = node;
    return node;
  }
  void DeleteNode(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_.erase(name);
  }
  std::vector<nlohmann::json> AllNodes() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<nlohmann::json> out;
    for (const auto& [name, node] : nodes_) out.push_back(node);
    return out;
  }

  std::vector<Event> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // The node's pending bookings as stored now.
  std::vector<PendingBooking> PendingOn(const std::string& node) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node);
    return it == nodes_.end() ? std::vector<PendingBooking>{} : PendingBookingsOf(it->second);
  }
  int bind_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bind_calls_;
  }
  int annotate_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return annotate_calls_;
  }
  int annotate_node_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return annotate_node_calls_;
  }
  int create_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return create_calls_;
  }
  int delete_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return delete_calls_;
  }
  // The pods of `ns` (all of them), sorted by name.
  std::vector<nlohmann::json> PodsIn(const std::string& ns) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<nlohmann::json> out;
    for (const auto& [key, pod] : pods_) {
      if (pod["metadata"].value("namespace", "") == ns) out.push_back(pod);
    }
    return out;
  }

  // ---- Injected failures (each applies once, to the next matching call) ----

  // The pod is deleted just before the next AnnotatePod / BindPod of it reaches the "server".
  void DeletePodBeforeAnnotate(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    delete_before_annotate_ = Key(ns, name);
  }
  void DeletePodBeforeBind(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    delete_before_bind_ = Key(ns, name);
  }
  // Someone else changes the pod just before the next AnnotatePod: its precondition fails.
  void ConflictOnNextAnnotate() {
    std::lock_guard<std::mutex> lock(mu_);
    conflict_on_annotate_ = true;
  }
  // Runs once, just before the next AnnotateNode reaches the "server", outside the fake's lock
  // (so it may call the fake, e.g. to run another extender's bind first).
  void BeforeNextAnnotateNode(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    before_annotate_node_ = std::move(hook);
  }
  // The next BindPod fails with `status` (the pod stays unbound).
  void FailNextBind(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_bind_ = std::move(status);
  }
  // The next CreatePod / DeletePod / ListPods fails with `status`.
  void FailNextCreatePod(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_create_ = std::move(status);
  }
  void FailNextDeletePod(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_delete_ = std::move(status);
  }
  void FailNextListPods(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_list_ = std::move(status);
  }
  // Runs once, at the start of the next BindPod, outside the fake's lock (so it may call the
  // fake, e.g. to run another extender's bind while this one is between choosing and binding).
  void BeforeNextBind(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    before_bind_ = std::move(hook);
  }

  // ---- ClusterApi ----

  StatusOr<nlohmann::json> GetPod(const std::string& ns, const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(Key(ns, name));
    if (it == pods_.end()) return NotFoundError("pods \"" + name + "\" not found");
    return it->second;
  }

  StatusOr<std::vector<nlohmann::json>> ListPodsOnNode(const std::string& node) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<nlohmann::json> out;
    for (const auto& [key, pod] : pods_) {
      if (pod.contains("spec") && pod["spec"].value("nodeName", "") == node) out.push_back(pod);
    }
    return out;
  }

  Status AnnotatePod(const std::string& ns, const std::string& name,
                     const std::string& resource_version,
                     const std::vector<std::pair<std::string, std::string>>& set) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = Key(ns, name);
    if (delete_before_annotate_ == key) {
      delete_before_annotate_.clear();
      pods_.erase(key);
    }
    auto it = pods_.find(key);
    if (it == pods_.end()) return NotFoundError("pods \"" + name + "\" not found");
    nlohmann::json& pod = it->second;
    if (conflict_on_annotate_) {
      conflict_on_annotate_ = false;
      pod["metadata"]["resourceVersion"] = NextVersion();
    }
    if (pod["metadata"]["resourceVersion"] != resource_version) {
      return AbortedError(
          "the object has been modified; please apply your changes to the "
          "latest version and try again");
    }
    SetAnnotations(pod, set);
    pod["metadata"]["resourceVersion"] = NextVersion();
    ++annotate_calls_;
    return OkStatus();
  }

  Status BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                 const std::string& node) override {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = std::exchange(before_bind_, nullptr);
    }
    if (hook) hook();
    std::lock_guard<std::mutex> lock(mu_);
    ++bind_calls_;
    const std::string key = Key(ns, name);
    if (delete_before_bind_ == key) {
      delete_before_bind_.clear();
      pods_.erase(key);
    }
    if (fail_bind_) {
      Status s = *std::exchange(fail_bind_, std::nullopt);
      return s;
    }
    auto it = pods_.find(key);
    if (it == pods_.end()) return NotFoundError("pods \"" + name + "\" not found");
    nlohmann::json& pod = it->second;
    if (pod["metadata"]["uid"] != uid) return AbortedError("the pod's UID changed");
    if (pod.contains("spec") && !pod["spec"].value("nodeName", "").empty()) {
      return AbortedError("pod " + name + " is already assigned to node " +
                          pod["spec"]["nodeName"].get<std::string>());
    }
    if (nodes_.count(node) == 0) return NotFoundError("nodes \"" + node + "\" not found");
    pod["spec"]["nodeName"] = node;
    pod["metadata"]["resourceVersion"] = NextVersion();
    return OkStatus();
  }

  // Namespaces exist as pods are put in them (the API server has every pod's); labels come
  // from SetNamespaceLabel.
  void SetNamespaceLabel(const std::string& ns, const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mu_);
    namespace_labels_[ns][key] = value;
  }
  StatusOr<nlohmann::json> GetNamespace(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++namespace_gets_;
    nlohmann::json ns = {{"apiVersion", "v1"},
                         {"kind", "Namespace"},
                         {"metadata", {{"name", name}, {"labels", nlohmann::json::object()}}}};
    for (const auto& [key, value] : namespace_labels_[name]) ns["metadata"]["labels"][key] = value;
    return ns;
  }
  int namespace_gets() const {
    std::lock_guard<std::mutex> lock(mu_);
    return namespace_gets_;
  }

  StatusOr<nlohmann::json> GetNode(const std::string& node) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return NotFoundError("nodes \"" + node + "\" not found");
    return it->second;
  }

  Status AnnotateNode(const std::string& node, const std::string& resource_version,
                      const std::vector<std::pair<std::string, std::string>>& set) override {
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = std::exchange(before_annotate_node_, nullptr);
    }
    if (hook) hook();
    std::lock_guard<std::mutex> lock(mu_);
    ++annotate_node_calls_;
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return NotFoundError("nodes \"" + node + "\" not found");
    if (it->second["metadata"]["resourceVersion"] != resource_version) {
      return AbortedError("Operation cannot be fulfilled on nodes \"" + node +
                          "\": the object has been modified; please apply your changes to the "
                          "latest version and try again");
    }
    SetAnnotations(it->second, set);
    it->second["metadata"]["resourceVersion"] = NextVersion();
    return OkStatus();
  }

  StatusOr<nlohmann::json> CreatePod(const std::string& ns, const nlohmann::json& pod) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++create_calls_;
    if (fail_create_) return *std::exchange(fail_create_, std::nullopt);
    nlohmann::json stored = pod;
    auto& meta = stored["metadata"];
    const std::string name = meta.value("name", "");
    if (name.empty()) return InvalidArgumentError("metadata.name: Required value");
    if (meta.contains("namespace") && meta["namespace"] != ns) {
      return InvalidArgumentError("the namespace of the object does not match the request's");
    }
    if (pods_.count(Key(ns, name)) > 0) {
      return FailedPreconditionError("pods \"" + name + "\" already exists");
    }
    meta["namespace"] = ns;
    meta["uid"] = "uid-" + std::to_string(++next_uid_);
    meta["resourceVersion"] = NextVersion();
    meta["creationTimestamp"] = Rfc3339(std::chrono::system_clock::now());
    pods_[Key(ns, name)] = stored;
    return stored;
  }

  Status DeletePod(const std::string& ns, const std::string& name,
                   const std::string& uid) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++delete_calls_;
    if (fail_delete_) return *std::exchange(fail_delete_, std::nullopt);
    auto it = pods_.find(Key(ns, name));
    if (it == pods_.end()) return NotFoundError("pods \"" + name + "\" not found");
    if (!uid.empty() && it->second["metadata"].value("uid", "") != uid) {
      return AbortedError("Operation cannot be fulfilled on pods \"" + name +
                          "\": precondition failed: uid");
    }
    pods_.erase(it);
    return OkStatus();
  }

  // `label_selector` as "k=v[,k=v...]" (equality only).
  StatusOr<std::vector<nlohmann::json>> ListPods(const std::string& ns,
                                                 const std::string& label_selector) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_list_) return *std::exchange(fail_list_, std::nullopt);
    std::vector<std::pair<std::string, std::string>> wanted;
    size_t at = 0;
    while (at < label_selector.size()) {
      size_t comma = label_selector.find(',', at);
      if (comma == std::string::npos) comma = label_selector.size();
      std::string term = label_selector.substr(at, comma - at);
      size_t eq = term.find('=');
      if (eq == std::string::npos) return InvalidArgumentError("bad selector " + label_selector);
      wanted.push_back({term.substr(0, eq), term.substr(eq + 1)});
      at = comma + 1;
    }
    std::vector<nlohmann::json> out;
    for (const auto& [key, pod] : pods_) {
      const nlohmann::json& meta = pod["metadata"];
      if (meta.value("namespace", "") != ns) continue;
      bool match = true;
      for (const auto& [k, v] : wanted) {
        match = match && meta.contains("labels") && meta["labels"].value(k, "") == v;
      }
      if (match) out.push_back(pod);
    }
    return out;
  }

  void PodEvent(const nlohmann::json& pod, const std::string& reason, const std::string& message,
                bool warning) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string ns = "", name = "";
    if (pod.contains("metadata")) {
      ns = pod["metadata"].value("namespace", "");
      name = pod["metadata"].value("name", "");
    }
    events_.push_back({ns + "/" + name, reason, message, warning});
  }

 private:
  // Sets each annotation of `set` on `object`, and removes those set to "" (as a merge patch does).
  static void SetAnnotations(nlohmann::json& object,
                             const std::vector<std::pair<std::string, std::string>>& set) {
    nlohmann::json& annotations = object["metadata"]["annotations"];
    if (!annotations.is_object()) annotations = nlohmann::json::object();
    for (const auto& [k, v] : set) {
      if (v.empty()) {
        annotations.erase(k);
      } else {
        annotations[k] = v;
      }
    }
  }
  static std::string Key(const std::string& ns, const std::string& name) { return ns + "/" + name; }
  std::string NextVersion() { return std::to_string(++version_); }

  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> pods_;
  std::map<std::string, nlohmann::json> nodes_;
  std::map<std::string, std::map<std::string, std::string>> namespace_labels_;
  int namespace_gets_ = 0;
  std::vector<Event> events_;
  uint64_t version_ = 0;
  uint64_t next_uid_ = 0;
  int bind_calls_ = 0;
  int annotate_calls_ = 0;
  int annotate_node_calls_ = 0;
  int create_calls_ = 0;
  int delete_calls_ = 0;
  std::string delete_before_annotate_;
  std::string delete_before_bind_;
  bool conflict_on_annotate_ = false;
  std::optional<Status> fail_bind_;
  std::optional<Status> fail_create_;
  std::optional<Status> fail_delete_;
  std::optional<Status> fail_list_;
  std::function<void()> before_bind_;
  std::function<void()> before_annotate_node_;
};

}  // namespace gpufrac::k8s::testing
