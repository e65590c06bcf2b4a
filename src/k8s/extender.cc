// The extender's three verbs and its view of pods and nodes. kube-scheduler's Go types carry no
// JSON tags, so their fields travel under their Go names ("Pod", "NodeNames", "FailedNodes",
// "Host", "Score", "PodName", ...); Go reads them back ignoring case, and so do we.
#include "k8s/extender.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.h"
#include "common/text.h"
#include "common/units.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;

constexpr int64_t kMaxExtenderPriority = 10;  // k8s.io/kube-scheduler/extender/v1.

// ExtenderArgs as read: the document, and the candidate nodes, from NodeNames
// (nodeCacheCapable) or Nodes.items. Node names are taken out while the body is parsed rather
// than kept as a JSON array: at thousands of nodes that array would be most of the parse's work.
struct Args {
  json doc;
  bool has_names = false;  // NodeNames was a list.
  bool bad_name = false;   // It held something other than strings.
  std::vector<std::string> names;
  const json* items = nullptr;  // Node objects when sent, in the order of `names`.
};

StatusOr<Args> ParseArgs(const std::string& body) {
  Args a;
  bool in_names = false;
  a.doc = json::parse(
      body,
      [&a, &in_names](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key) {
          in_names = parsed.is_string() &&
                     EqualsIgnoreCase(parsed.get_ref<const std::string&>(), "NodeNames");
        } else if (in_names && depth == 1 && event == json::parse_event_t::array_start) {
          a.has_names = true;
        } else if (in_names && depth == 2 && event == json::parse_event_t::value) {
          if (parsed.is_string()) {
            a.names.push_back(std::move(parsed.get_ref<std::string&>()));
          } else {
            a.bad_name = true;
          }
          return false;  // Not kept in the document.
        }
        return true;
      },
      /*allow_exceptions=*/false);
  if (a.doc.is_discarded() || FieldOf(a.doc, "Pod") == nullptr) {
    return InvalidArgumentError("the body is not ExtenderArgs");
  }
  if (a.has_names) {
    if (a.bad_name) return InvalidArgumentError("NodeNames holds a non-string");
    return a;
  }
  const json* nodes = FieldOf(a.doc, "Nodes");
  const json* items = nodes != nullptr ? FieldOf(*nodes, "items") : nullptr;
  if (items == nullptr || !items->is_array()) {
    return InvalidArgumentError("ExtenderArgs has neither NodeNames nor Nodes.items");
  }
  for (const json& n : *items) a.names.push_back(MetaOf(n, "name"));
  a.items = items;
  return a;
}

std::string ErrorBody(const std::string& message) { return json{{"Error", message}}.dump(); }

// The pod as a log line names it, escaped: its name is the user's.
std::string PodName(const json& pod) {
  return Printable(MetaOf(pod, "namespace") + "/" + MetaOf(pod, "name"));
}

// "node: text; node: text ..." for a --verbose line, the first kMaxLoggedNodes of them.
constexpr size_t kMaxLoggedNodes = 8;
std::string NodeList(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxLoggedNodes; ++i) {
    out += (i ? "; " : "") + Printable(items[i].first) + ": " + Printable(items[i].second);
  }
  if (items.size() > kMaxLoggedNodes) {
    out += "; and " + std::to_string(items.size() - kMaxLoggedNodes) + " more";
  }
  return out;
}

// The booking a pod holds according to its own record, if it holds one: bound to the node of
// its assignment and not finished.
std::optional<Assignment> HeldAssignment(const json& pod) {
  if (PodFinished(pod)) return std::nullopt;
  std::optional<Assignment> a = AssignmentOf(pod);
  if (!a || PodNodeName(pod) != a->node) return std::nullopt;
  return a;
}

// spec.schedulerName, which the API server defaults.
std::string SchedulerOf(const json& pod) {
  const json* spec = FieldOf(pod, "spec");
  std::string name = spec ? StringOf(*spec, "schedulerName") : "";
  return name.empty() ? "default-scheduler" : name;
}

// Whether the node advertises nvidia.com/gpu (NVIDIA's device plugin, or gpufrac's agent serving
// its names): only there does a pod asking for it take a GPU from the count.
bool AdvertisesNvidiaGpu(const json& node) {
  const json* status = FieldOf(node, "status");
  if (status == nullptr) return false;
  for (const char* field : {"allocatable", "capacity"}) {
    const json* list = FieldOf(*status, field);
    if (list == nullptr || !list->is_object()) continue;
    auto it = list->find("nvidia.com/gpu");
    if (it != list->end() && it->is_string() && !it->get<std::string>().empty() &&
        it->get<std::string>() != "0") {
      return true;
    }
  }
  return false;
}

}  // namespace

Extender::Extender(Ledger* ledger, ClusterApi* api, ExtenderOptions options)
    : ledger_(ledger),
      api_(api),
      options_(std::move(options)),
      schedulers_(options_.scheduler_names),
      agent_pods_(options_.agent_pods) {}

Extender::Stats Extender::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

StatusOr<PodRequest> Extender::RequestOf(const json& pod) {
  GPUFRAC_ASSIGN_OR_RETURN(PodRequest request, ParsePodRequest(pod));
  if (request.unenforced.empty() || options_.allow_unenforced) {
    request.unenforced.clear();
    return request;
  }
  const std::string ns = MetaOf(pod, "namespace");
  StatusOr<json> space = api_->GetNamespace(ns);
  if (space.ok() && LabelOf(*space, kLabelAllowUnenforced) == "true") {
    request.unenforced.clear();
  } else if (!space.ok()) {
    LogWarning(
        "cannot read namespace %s for its label %s (pods that can remove their limits "
        "share no GPU meanwhile): %s",
        Printable(ns).c_str(), std::string(kLabelAllowUnenforced).c_str(),
        Printable(space.status().message()).c_str());
  }
  return request;
}

std::string Extender::Filter(const std::string& body) {
  StatusOr<Args> candidates = ParseArgs(body);
  if (!candidates.ok()) return ErrorBody("filter: " + candidates.status().message());
  const json* pod = FieldOf(candidates->doc, "Pod");
  json failed = json::object();
  json unresolvable = json::object();
  std::vector<bool> keep(candidates->names.size(), false);
  StatusOr<PodRequest> request = RequestOf(*pod);
  // Said on the pod once, not at every retry.
  auto first_warning = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    if (warned_.size() > 10000) warned_.clear();
    return warned_.insert(MetaOf(*pod, "uid")).second;
  };
  if (request.ok() && !request->unenforced.empty() && first_warning()) {
    api_->PodEvent(*pod, std::string(kReasonUnenforced), UnenforcedMessage(request->unenforced),
                   /*warning=*/true);
  }
  if (!request.ok()) {
    // Nothing will change this on any node: say so on the pod, and to the scheduler.
    if (first_warning()) {
      api_->PodEvent(*pod, "GpufracInvalidRequest", request.status().message(), /*warning=*/true);
    }
    for (const std::string& n : candidates->names) unresolvable[n] = request.status().message();
    LogDebug("filter %s: no node: %s", PodName(*pod).c_str(),
             Printable(request.status().message()).c_str());
  } else {
    std::vector<Ledger::Verdict> verdicts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.filters;
      verdicts = ledger_->Evaluate(*request, candidates->names);
      if (!request->empty()) {
        for (size_t i = 0; i < verdicts.size(); ++i) {
          if (verdicts[i].fits && !agent_pods_.Open(candidates->names[i])) {
            verdicts[i] = {.fits = false, .score = 0, .reason = std::string(kReasonAgentNotReady)};
          }
        }
      }
    }
    std::vector<std::pair<std::string, std::string>> refused;
    for (size_t i = 0; i < verdicts.size(); ++i) {
      keep[i] = verdicts[i].fits;
      if (!keep[i]) {
        failed[candidates->names[i]] = verdicts[i].reason;
        refused.emplace_back(candidates->names[i], verdicts[i].reason);
      }
    }
    FilterAnswered(*pod, refused.size() == verdicts.size());
    LogDebug("filter %s: %zu of %zu nodes fit%s%s", PodName(*pod).c_str(),
             verdicts.size() - refused.size(), verdicts.size(), refused.empty() ? "" : "; ",
             NodeList(refused).c_str());
  }
  json result = {
      {"FailedNodes", failed}, {"FailedAndUnresolvableNodes", unresolvable}, {"Error", ""}};
  if (candidates->items != nullptr) {
    json items = json::array();
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i]) items.push_back((*candidates->items)[i]);
    }
    result["Nodes"] = {{"metadata", json::object()}, {"items", std::move(items)}};
    result["NodeNames"] = nullptr;
  } else {
    json names = json::array();
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i]) names.push_back(candidates->names[i]);
    }
    result["NodeNames"] = std::move(names);
    result["Nodes"] = nullptr;
  }
  return result.dump();
}

std::string Extender::Prioritize(const std::string& body) {
  // HostPriorityList has no error field: a bad body is answered with no scores, which the
  // scheduler treats as all zero.
  StatusOr<Args> candidates = ParseArgs(body);
  if (!candidates.ok()) return "[]";
  const json* pod = FieldOf(candidates->doc, "Pod");
  StatusOr<PodRequest> request = RequestOf(*pod);
  std::vector<Ledger::Verdict> verdicts(candidates->names.size());
  if (request.ok() && !request->empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.prioritizes;
    verdicts = ledger_->Evaluate(*request, candidates->names);
  }
  // The policy's scores mean nothing on their own: spread the fitting nodes over 0..10, best
  // at 10, so that kube-scheduler's weighted sum ranks them in the policy's order.
  double lo = 0, hi = 0;
  bool any = false;
  for (const Ledger::Verdict& v : verdicts) {
    if (!v.fits) continue;
    lo = any ? std::min(lo, v.score) : v.score;
    hi = any ? std::max(hi, v.score) : v.score;
    any = true;
  }
  // ordered_json keeps each small object in a vector rather than a tree: at thousands of nodes
  // this answer is a good part of the call's time.
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  std::vector<std::pair<std::string, std::string>> scores;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    int64_t score = 0;
    if (verdicts[i].fits) {
      score = hi > lo ? std::llround((verdicts[i].score - lo) / (hi - lo) * kMaxExtenderPriority)
                      : kMaxExtenderPriority;
    }
    nlohmann::ordered_json host;
    host["Host"] = candidates->names[i];
    host["Score"] = score;
    list.push_back(std::move(host));
    scores.emplace_back(candidates->names[i], std::to_string(score));
  }
  LogDebug("prioritize %s: %s", PodName(*pod).c_str(), NodeList(scores).c_str());
  return list.dump();
}

std::string Extender::Bind(const std::string& body) {
  json args = json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::string name = StringOf(args, "PodName");
  std::string ns = StringOf(args, "PodNamespace");
  std::string uid = StringOf(args, "PodUID");
  std::string node = StringOf(args, "Node");
  if (args.is_discarded() || name.empty() || node.empty()) {
    return ErrorBody("bind: the body is not ExtenderBindingArgs");
  }
  StatusOr<json> pod = api_->GetPod(ns, name);
  Status result = pod.status();
  if (result.ok() && !uid.empty() && MetaOf(*pod, "uid") != uid) {
    result = NotFoundError("pod " + ns + "/" + name + " was deleted and created again");
  }
  if (result.ok()) {
    std::string assigned;
    bool unreserved = false;
    result = BindOnNode(*pod, node, &assigned, &unreserved);
    if (result.ok() && !assigned.empty()) {
      api_->PodEvent(*pod, "GpufracAssigned", "on " + node + ": " + assigned, false);
      if (unreserved) {
        api_->PodEvent(*pod, "GpufracNotReserved",
                       "node " + node +
                           " advertises no nvidia.com/gpu, so no reservation pod holds this "
                           "GPU: schedulers counting nvidia.com/gpu do not see its fractions",
                       false);
      }
    }
    if (result.ok()) {
      LogDebug("bind %s to %s: %s", PodName(*pod).c_str(), Printable(node).c_str(),
               assigned.empty() ? "no GPU asked for" : Printable(assigned).c_str());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.binds;
  if (result.ok()) return json{{"Error", ""}}.dump();
  ++stats_.bind_failures;
  LogWarning("bind %s to %s: %s", Printable(ns + "/" + name).c_str(), Printable(node).c_str(),
             Printable(result.message()).c_str());
  return ErrorBody("gpufrac: " + result.message());
}

namespace {

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "main: GPU 1 x 250/1000, sidecar: GPU 2 MIG 1g.10gb at 3".
// "main: GPU 0 x 600/1000, side: GPU 2 MIG 2g.20gb at 4 (19.62 GiB ...)". A MIG instance has
// its profile's memory: for a memory or a fraction the smallest profile that holds it by its
// name's size or its slices, which can be a little less than asked (for a fraction: than that
// share of the GPU's memory, from `node`, the node's GPUs); the event says how much.
std::string AssignmentSummary(const Assignment& assignment, const PodRequest& request,
                              const std::optional<NodeInventory>& node) {
  std::string summary;
  for (const ContainerAssignment& c : assignment.containers) {
    const GpuRequest* asked = nullptr;
    for (const ContainerRequest& r : request.containers) {
      if (r.container == c.container) asked = &r.request;
    }
    for (const GpuGrant& g : c.gpus) {
      if (!summary.empty()) summary += ", ";
      summary += c.container + ": GPU " + std::to_string(g.index);
      if (g.mig) {
        summary += " MIG " + g.mig->profile + " at " + std::to_string(g.mig->start) + " (" +
                   FormatSize(g.memory_bytes);
        if (asked != nullptr && asked->kind == GpuRequest::Kind::kMemory &&
            g.memory_bytes < asked->memory_bytes) {
          summary += ", " + FormatSize(asked->memory_bytes - g.memory_bytes) + " less than the " +
                     FormatSize(asked->memory_bytes) +
                     " asked: the smallest profile whose name's " + "size holds it";
        } else if (asked != nullptr && asked->kind == GpuRequest::Kind::kFraction) {
          const GpuInfo* gpu = node ? FindGpu(*node, g.index) : nullptr;
          const uint64_t share =
              gpu != nullptr ? gpu->memory_bytes / 1000 * asked->fraction_milli : 0;
          summary += " for " + FormatMilli(asked->fraction_milli);
          if (g.memory_bytes < share) {
            summary += ", " + FormatSize(share - g.memory_bytes) + " less than " +
                       FormatMilli(asked->fraction_milli) + " of the GPU's " +
                       FormatSize(gpu->memory_bytes) +
                       ": the smallest profile whose name's size and compute slices hold that "
                       "share";
          } else {
            summary += ": the smallest profile with that share of the memory and compute slices";
          }
        }
        summary += ")";
      } else if (g.milli < 1000) {
        summary += " x " + std::to_string(g.milli) + "/1000";
      }
    }
  }
  return summary;
}

}  // namespace

Status Extender::StillPending(const std::string& node,
                              std::chrono::steady_clock::time_point written) const {
  if (std::chrono::steady_clock::now() - written + options_.pending_margin < options_.pending_ttl) {
    return OkStatus();
  }
  return AbortedError("the pending booking on node " + node +
                      " ran out before the bind was done (the API server is slow); "
                      "kube-scheduler will try again");
}

Status Extender::BindOnNode(const json& pod, const std::string& node, std::string* assigned,
                            bool* unreserved) {
  const std::string ns = MetaOf(pod, "namespace"), name = MetaOf(pod, "name");
  // A bind that kube-scheduler retries may already have happened, and choosing GPUs again would
  // overwrite the record of the ones the pod holds.
  GPUFRAC_ASSIGN_OR_RETURN(bool done, AlreadyBound(pod, node));
  if (done) return OkStatus();
  GPUFRAC_RETURN_IF_ERROR(YieldToAnotherBind(pod, node));
  GPUFRAC_ASSIGN_OR_RETURN(PodRequest request, RequestOf(pod));
  if (request.empty()) return api_->BindPod(ns, name, MetaOf(pod, "uid"), node);
  // Filtered while the agent was Ready, bound after it was killed: the kubelet would fail it.
  // kube-scheduler may keep the pod in its unschedulable queue, so it counts as refused by the
  // filter and is tried again when the agent is Ready (RetryWaiting).
  bool open = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open = agent_pods_.Open(node);
  }
  if (!open) {
    FilterAnswered(pod, /*refused=*/true);
    return UnavailableError("node " + node + ": " + std::string(kReasonAgentNotReady) +
                            "; kube-scheduler will try again");
  }

  std::chrono::steady_clock::time_point written;
  GPUFRAC_ASSIGN_OR_RETURN(PendingBooking pending, BookPending(pod, request, node, &written));
  Status result = WriteAssignment(pod, pending.assignment, AnnotationOf(pod, kAnnotationAssignment),
                                  node, written);
  if (result.ok()) result = StillPending(node, written);
  if (result.ok()) result = api_->BindPod(ns, name, MetaOf(pod, "uid"), node);
  if (!result.ok()) {
    EraseAssignment(ns, name);
    DropPending(node, pending.id);
    return result;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_.count(MetaOf(pod, "uid")) == 0) BookLocked(PodKey(pod), pending.assignment);
  }
  std::optional<NodeInventory> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gpus = ledger_->InventoryOf(node);
  }
  *assigned = AssignmentSummary(pending.assignment, request, gpus);
  if (options_.reservations != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (without_nvidia_gpu_.count(node) > 0) {
      for (const ContainerAssignment& c : pending.assignment.containers) {
        for (const GpuGrant& g : c.gpus) *unreserved |= NeedsReservation(g);
      }
    }
  }
  return OkStatus();
}

Extender::NodeWrites* Extender::WritesOf(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<NodeWrites>& writes = node_writes_[node];
  if (!writes) writes = std::make_unique<NodeWrites>();
  return writes.get();
}

StatusOr<PendingBooking> Extender::BookPending(const json& pod, const PodRequest& request,
                                               const std::string& node,
                                               std::chrono::steady_clock::time_point* written) {
  const auto deadline = std::chrono::steady_clock::now() + options_.node_wait;
  PendingWrite mine;
  mine.request = &request;
  mine.booking.pod = PodKey(pod);
  mine.booking.uid = MetaOf(pod, "uid");
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine.booking.id = options_.holder + "/" + mine.booking.uid + "/" +
                      std::to_string(WallClockMs()) + "-" + std::to_string(++attempts_);
  }
  // The binds that wait while another writes the node are written together by the first of
  // them to get its turn: one write for the lot.
  NodeWrites* writes = WritesOf(node);
  std::unique_lock<std::mutex> queue(writes->mu);
  writes->waiting.push_back(&mine);
  for (;;) {
    if (mine.done || (!writes->busy && !mine.taken)) break;  // Written, or this one's turn.
    if (mine.taken) {
      writes->changed.wait(queue);  // Another bind is writing this one's booking.
    } else if (writes->changed.wait_until(queue, deadline) == std::cv_status::timeout &&
               !mine.taken && writes->busy) {
      std::erase(writes->waiting, &mine);
      return AbortedError("other binds to node " + node + " took the " +
                          std::to_string(options_.node_wait.count()) +
                          " ms this one may wait; kube-scheduler will try again");
    }
  }
  if (!mine.done) {
    std::vector<PendingWrite*> batch = std::move(writes->waiting);
    writes->waiting.clear();
    for (PendingWrite* w : batch) w->taken = true;
    writes->busy = true;
    queue.unlock();
    WriteBatch(node, batch, deadline);
    queue.lock();
    for (PendingWrite* w : batch) w->done = true;
    writes->busy = false;
    writes->changed.notify_all();
  }
  if (!mine.result.ok()) return mine.result;
  *written = mine.written;
  return mine.booking;
}

void Extender::WriteBatch(const std::string& node, const std::vector<PendingWrite*>& batch,
                          std::chrono::steady_clock::time_point deadline) {
  auto fail_all = [&batch](const Status& s) {
    for (PendingWrite* w : batch) {
      if (w->result.ok()) w->result = s;
    }
  };
  for (;;) {
    StatusOr<json> current = api_->GetNode(node);
    if (!current.ok()) return fail_all(current.status());
    const int64_t now_ms = WallClockMs();
    if (std::optional<std::string> holder = LiveLegacyLock(*current, now_ms / 1000)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return fail_all(AbortedError("node " + node + " is locked by " + *holder +
                                     " (an extender of an earlier version; annotation " +
                                     std::string(kAnnotationLegacyLock) + ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    // Listed after the node was read: a pending booking left out below because its pod is
    // bound counts through the pod.
    StatusOr<std::vector<json>> pods = api_->ListPodsOnNode(node);
    if (!pods.ok()) return fail_all(pods.status());
    std::set<std::string> bound;
    for (const json& p : *pods) bound.insert(MetaOf(p, "uid"));
    std::vector<PendingBooking> kept;
    bool any = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      RefreshNodeLocked(node, *pods);
      for (PendingBooking& b : PendingBookingsOf(*current)) {
        if (b.expires_ms > now_ms && bound.count(b.uid) == 0 && gone_.count(b.uid) == 0) {
          kept.push_back(std::move(b));
        }
      }
      // The pending bookings, and those chosen for the batch so far, count as bookings for
      // these choices only.
      for (const PendingBooking& b : kept) ledger_->Book("pending " + b.id, b.assignment);
      for (PendingWrite* w : batch) {
        StatusOr<Assignment> chosen = ledger_->Choose(*w->request, node);
        w->result = chosen.status();
        if (!chosen.ok()) continue;
        w->booking.assignment = std::move(*chosen);
        w->booking.assignment.time_ms = WallClockMs();
        w->booking.expires_ms =
            w->booking.assignment.time_ms +
            std::chrono::duration_cast<std::chrono::milliseconds>(options_.pending_ttl).count();
        ledger_->Book("pending " + w->booking.id, w->booking.assignment);
        kept.push_back(w->booking);
        any = true;
      }
      for (const PendingBooking& b : kept) ledger_->Unbook("pending " + b.id);
    }
    if (!any) return;  // Nothing fits: each bind has its reason.
    std::vector<std::pair<std::string, std::string>> set = {
        {std::string(kAnnotationPending), PendingBookingsValue(kept)}};
    if (!AnnotationOf(*current, kAnnotationLegacyLock).empty()) {
      set.emplace_back(std::string(kAnnotationLegacyLock), "");  // It has expired.
    }
    const auto asked = std::chrono::steady_clock::now();
    Status s = api_->AnnotateNode(node, MetaOf(*current, "resourceVersion"), set);
    if (s.ok()) {
      for (PendingWrite* w : batch) w->written = asked;
      return;
    }
    if (s.code() != StatusCode::kAborted) return fail_all(s);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.pending_conflicts;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return fail_all(AbortedError(
          "node " + node + " changed under every write of its pending bookings for " +
          std::to_string(options_.node_wait.count()) + " ms; kube-scheduler will try again"));
    }
    for (PendingWrite* w : batch) w->result = OkStatus();
  }
}

void Extender::DropPending(const std::string& node, const std::string& id) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    StatusOr<json> current = api_->GetNode(node);
    if (!current.ok()) return;
    std::vector<PendingBooking> bookings = PendingBookingsOf(*current);
    if (std::erase_if(bookings, [&id](const PendingBooking& b) { return b.id == id; }) == 0) return;
    Status s =
        api_->AnnotateNode(node, MetaOf(*current, "resourceVersion"),
                           {{std::string(kAnnotationPending), PendingBookingsValue(bookings)}});
    if (s.code() != StatusCode::kAborted) return;
  }
}

StatusOr<bool> Extender::AlreadyBound(const json& pod, const std::string& node) {
  std::string bound = PodNodeName(pod);
  if (bound.empty()) return false;
  std::optional<Assignment> held = HeldAssignment(pod);
  if (bound == node && (held || ParsePodRequest(pod).value_or(PodRequest{}).empty())) {
    if (held) {
      std::lock_guard<std::mutex> lock(mu_);
      BookLocked(PodKey(pod), *held);
    }
    return true;
  }
  return FailedPreconditionError("pod " + MetaOf(pod, "namespace") + "/" + MetaOf(pod, "name") +
                                 " is already bound to node " + bound);
}

Status Extender::YieldToAnotherBind(const json& pod, const std::string& node) const {
  std::optional<Assignment> other = AssignmentOf(pod);
  if (!other || other->node == node) return OkStatus();
  int64_t ttl_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.pending_ttl).count();
  if (WallClockMs() - other->time_ms >= ttl_ms) return OkStatus();
  return AbortedError("pod " + MetaOf(pod, "namespace") + "/" + MetaOf(pod, "name") +
                      " is being bound to node " + other->node + " by another extender");
}

Status Extender::WriteAssignment(const json& pod, const Assignment& assignment,
                                 const std::string& before, const std::string& node,
                                 std::chrono::steady_clock::time_point written) {
  const std::string ns = MetaOf(pod, "namespace"), name = MetaOf(pod, "name");
  const std::string record = AssignmentToJson(assignment).dump();
  std::string version = MetaOf(pod, "resourceVersion");
  Status annotated;
  for (int attempt = 0; attempt < 5; ++attempt) {
    GPUFRAC_RETURN_IF_ERROR(StillPending(node, written));
    annotated =
        api_->AnnotatePod(ns, name, version, {{std::string(kAnnotationAssignment), record}});
    if (annotated.code() != StatusCode::kAborted) break;
    GPUFRAC_ASSIGN_OR_RETURN(json now, api_->GetPod(ns, name));
    // Only an unrelated change is written over: not another pod, a bound pod, or another
    // extender's record.
    if (MetaOf(now, "uid") != MetaOf(pod, "uid") || !PodNodeName(now).empty() ||
        AnnotationOf(now, kAnnotationAssignment) != before) {
      break;
    }
    version = MetaOf(now, "resourceVersion");
  }
  return annotated;
}

void Extender::EraseAssignment(const std::string& ns, const std::string& name) {
  StatusOr<json> now = api_->GetPod(ns, name);
  if (now.ok() && PodNodeName(*now).empty()) {
    (void)api_->AnnotatePod(ns, name, MetaOf(*now, "resourceVersion"),
                            {{std::string(kAnnotationAssignment), ""}});
  }
}

void Extender::RefreshNodeLocked(const std::string& node, const std::vector<json>& pods) {
  std::vector<std::string> stale = ledger_->PodsOn(node);
  for (const json& pod : pods) {
    std::string key = PodKey(pod);
    std::erase(stale, key);
    if (std::optional<Assignment> a = HeldAssignment(pod)) {
      BookLocked(key, *a);
    } else {
      UnbookLocked(key);
    }
  }
  for (const std::string& key : stale) UnbookLocked(key);
}

void Extender::BookLocked(const std::string& pod, const Assignment& assignment) {
  ledger_->Book(pod, assignment);
  if (options_.reservations != nullptr) options_.reservations->SetPod(pod, assignment);
}

void Extender::UnbookLocked(const std::string& pod) {
  ledger_->Unbook(pod);
  if (options_.reservations != nullptr) options_.reservations->SetPod(pod, std::nullopt);
}

void Extender::OnPod(const json& pod) {
  std::optional<Assignment> a = HeldAssignment(pod);
  const bool waits = PodNodeName(pod).empty() && !PodFinished(pod) &&
                     !ParsePodRequest(pod).value_or(PodRequest{}).empty();
  std::lock_guard<std::mutex> lock(mu_);
  if (gone_.count(MetaOf(pod, "uid")) > 0) return;  // A late event about a deleted pod.
  if (std::string ready = agent_pods_.OnPod(pod); !ready.empty()) {
    LogInfo("the gpufrac agent on node %s is Ready again", Printable(ready).c_str());
    retry_wanted_ = true;
  }
  if (waits) {
    auto [it, added] = waiting_.try_emplace(MetaOf(pod, "uid"));
    Waiting& w = it->second;
    w.ns = MetaOf(pod, "namespace");
    w.name = MetaOf(pod, "name");
    w.resource_version = MetaOf(pod, "resourceVersion");
    w.scheduler = SchedulerOf(pod);
    const json* spec = FieldOf(pod, "spec");
    const json* gates = spec ? FieldOf(*spec, "schedulingGates") : nullptr;
    w.gated = gates != nullptr && gates->is_array() && !gates->empty();
    if (added) w.at_start = !started_;
  } else {
    waiting_.erase(MetaOf(pod, "uid"));
    refused_.erase(MetaOf(pod, "uid"));
  }
  if (a) {
    BookLocked(PodKey(pod), *a);
  } else if (PodFinished(pod) || !PodNodeName(pod).empty() ||
             AnnotationOf(pod, kAnnotationAssignment).empty()) {
    UnbookLocked(PodKey(pod));
  }
  // Otherwise it is between its assignment and its binding: the bind decides, and a late event
  // from before the binding must not undo what it booked.
}

void Extender::OnPodDeleted(const json& pod) {
  std::lock_guard<std::mutex> lock(mu_);
  // Remembered, so that a bind finishing after the deletion does not book it again.
  if (gone_.size() > 100000) gone_.clear();
  gone_.insert(MetaOf(pod, "uid"));
  waiting_.erase(MetaOf(pod, "uid"));
  refused_.erase(MetaOf(pod, "uid"));
  agent_pods_.OnPodDeleted(pod);
  UnbookLocked(PodKey(pod));
}

void Extender::FilterAnswered(const json& pod, bool refused) {
  const std::string uid = MetaOf(pod, "uid");
  std::lock_guard<std::mutex> lock(mu_);
  // A scheduler newly seen may have pods that waited through the extender's start.
  retry_wanted_ |= schedulers_.insert(SchedulerOf(pod)).second && started_;
  if (!refused) {
    refused_.erase(uid);
    return;
  }
  if (refused_.size() > 100000) refused_.clear();
  refused_.insert(uid);
}

void Extender::FilterUnanswered(const std::string& body) {
  StatusOr<Args> args = ParseArgs(body);
  if (args.ok()) FilterAnswered(*FieldOf(args->doc, "Pod"), /*refused=*/true);
}

bool Extender::retry_wanted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retry_wanted_;
}

int Extender::RetryWaiting(std::chrono::milliseconds min_interval) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Waiting> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retry_wanted_ = false;
    started_ = true;
    for (auto& [uid, w] : waiting_) {
      if (w.gated || schedulers_.count(w.scheduler) == 0) continue;
      if (!w.at_start && refused_.count(uid) == 0) continue;
      if (w.retried != std::chrono::steady_clock::time_point{} && now - w.retried < min_interval) {
        continue;
      }
      w.retried = now;
      w.at_start = false;
      due.push_back(w);
    }
  }
  int updated = 0;
  const std::string stamp = std::to_string(WallClockMs());
  for (const Waiting& w : due) {
    // A conflict means the pod changed meanwhile, which kube-scheduler sees as well.
    updated += api_->AnnotatePod(w.ns, w.name, w.resource_version,
                                 {{std::string(kAnnotationRetry), stamp}})
                   .ok();
  }
  if (updated > 0) {
    LogInfo("asked kube-scheduler to try %d waiting pod(s) again (annotation %s)", updated,
            std::string(kAnnotationRetry).c_str());
  }
  return updated;
}

void Extender::OnNode(const json& node) {
  std::string name = MetaOf(node, "name");
  std::string text = AnnotationOf(node, kAnnotationInventory);
  std::optional<NodeInventory> inventory;
  if (!text.empty()) {
    StatusOr<NodeInventory> parsed =
        InventoryFromJson(json::parse(text, nullptr, /*allow_exceptions=*/false));
    if (parsed.ok()) {
      inventory = std::move(*parsed);
    } else {
      LogWarning("node %s: ignoring its GPU inventory: %s", name.c_str(),
                 parsed.status().message().c_str());
    }
  }
  const bool nvidia = AdvertisesNvidiaGpu(node);
  if (options_.reservations != nullptr) {
    options_.reservations->SetNodeReservable(
        name, nvidia && LabelOf(node, kLabelServesNvidiaGpu) != "true");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!text.empty()) {
    std::string& seen = inventories_[name];
    retry_wanted_ |= seen != text;
    seen = text;
  }
  if (nvidia) {
    without_nvidia_gpu_.erase(name);
  } else if (without_nvidia_gpu_.insert(name).second && options_.reservations != nullptr &&
             inventory) {
    LogInfo(
        "node %s advertises no nvidia.com/gpu: no reservation pods there (one would reserve "
        "nothing)",
        Printable(name).c_str());
  }
  if (inventory) {
    ledger_->SetNode(name, *inventory);
  } else {
    ledger_->RemoveNode(name);
  }
}

void Extender::OnNodeDeleted(const json& node) {
  std::lock_guard<std::mutex> lock(mu_);
  inventories_.erase(MetaOf(node, "name"));
  without_nvidia_gpu_.erase(MetaOf(node, "name"));
  ledger_->RemoveNode(MetaOf(node, "name"));
}

}  // namespace gpufrac::k8s
