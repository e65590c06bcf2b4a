// The node service's queue scheduler: strict priority between queues, quotas, backfill around
// blocked jobs with sticky reservations, starvation relief, and GPU choice by the placement
// library's policy on a one-node-per-GPU-model placement::Cluster.
#include "node/queue_scheduler.h"

#include <algorithm>
#include <bit>
#include <list>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/units.h"
#include "node/model_groups.h"
#include "node/queue_usage.h"
#include "node/request_shapes.h"
#include "node/scheduling_pass.h"
#include "placement/cluster.h"
#include "placement/fit.h"
#include "placement/workload_mix.h"

namespace gpufrac::node {
namespace {

namespace pl = ::gpufrac::placement;

// Besides after enough new requests (placement/workload_mix.h), the policy's mix is rebuilt
// after this much of the caller's time with any change.
constexpr int64_t kTypicalMaxAgeMs = 300'000;

}  // namespace

struct QueueScheduler::Impl {
  using Shape = RequestShape;

  enum class Reason { kReserved, kQuota, kBehind, kNoRoom, kNever };

  struct Pending {
    int64_t id = 0;
    int queue = 0;
    int64_t submitted_ms = 0;
    uid_t uid = 0;
    Shape* shape = nullptr;
    std::list<Pending*>::iterator in_queue;
    // Its reservation: GPUs of one group. Kept across passes (sticky) until it starts.
    int reserved_group = -1;
    pl::GpuSet reserved_gpus = 0;
    // What the last pass that looked at it decided.
    uint64_t pass = 0;
    Reason reason = Reason::kNoRoom;
    int64_t behind = 0;  // kBehind: the job at the head of its queue.
  };

  // Oldest first, for starvation.
  struct AgeKey {
    int64_t submitted_ms;
    int64_t id;
    Pending* job;
    bool operator<(const AgeKey& o) const {
      return std::tie(submitted_ms, id) < std::tie(o.submitted_ms, o.id);
    }
  };

  // What a running job took from the cluster, exactly, so that Finish gives back the same.
  struct Held {
    int group = 0;
    pl::GpuSet gpus = 0;
    pl::Request request;
  };

  struct Running {
    int queue = -1;
    uid_t uid = 0;
    uint64_t milli = 0;
    std::vector<Held> held;
    std::vector<int> gpu_pos;
    pl::Request typical;  // What it counts as in the policy's mix.
  };

  struct Queue {
    std::list<Pending*> jobs;
    QueueUsage usage;
  };

  Impl(ModelGroups model_groups, pl::Cluster cluster_, QueueConfig queue_config,
       SchedulerOptions scheduler_options)
      : node(std::move(model_groups)),
        config(std::move(queue_config)),
        options(std::move(scheduler_options)),
        cluster(std::move(cluster_)),
        gpu_jobs(node.gpus().size()),
        masked_views(node.groups().size()) {
    for (const QueueSpec& spec : config.queues) {
      queues.push_back({.jobs = {}, .usage = QueueUsage(spec.quota, node.gpus().size())});
    }
  }

  const ModelGroups node;  // Its GPUs by model; `shapes` and `pass` refer to it.
  const QueueConfig config;
  const SchedulerOptions options;
  pl::Cluster cluster;  // One node per group.
  // The placement policy and the mix of requests (pending and running) it measures against.
  std::optional<pl::PolicyWithMix> policy;

  std::vector<Queue> queues;
  std::unordered_map<int64_t, Pending> pending;
  std::set<AgeKey> by_age;
  RequestShapes shapes{&node.groups()};  // Of pending jobs.
  std::unordered_map<int64_t, Running> running;
  std::vector<std::vector<int64_t>> gpu_jobs;  // By position in node.gpus().
  std::vector<pl::Node> masked_views;          // By group: ViewFor's storage.
  SchedulingPass pass{&node, &cluster};        // The current (or last) pass.

  const std::vector<pl::GpuGroup>& groups() const { return node.groups(); }

  // ---- Starting and reserving ----

  // Whether GPU `pos` runs a job of another user than `uid`.
  bool OtherUserOn(int pos, uid_t uid) const {
    for (int64_t id : gpu_jobs[pos]) {
      if (running.at(id).uid != uid) return true;
    }
    return false;
  }

  // Group g as a job of user `uid` may start on it in this pass: its GPUs in MPS mode that run
  // another user's jobs have nothing free for it.
  const pl::Node& ViewFor(int g, uid_t uid) {
    const pl::Node& view = pass.view(g);
    if (!groups()[g].mps) return view;
    pl::GpuSet others = 0;
    for (size_t slot = 0; slot < groups()[g].members.size(); ++slot) {
      if (OtherUserOn(groups()[g].members[slot], uid)) others |= pl::GpuSet{1} << slot;
    }
    if (others == 0) return view;
    masked_views[g] = view;
    pl::Withhold(masked_views[g], others);
    return masked_views[g];
  }

  // Starts `j` if it fits now on an eligible group (smallest GPUs first, then the policy's
  // score). On success `j` is gone (moved to running) and its decision is in `out`.
  bool TryStart(Pending& j, uint64_t eligible, std::vector<StartDecision>& out) {
    Shape& s = *j.shape;
    if (s.failed_pass != pass.number()) {
      s.failed_pass = pass.number();
      s.failed_groups = 0;
    }
    int best = -1;
    double best_score = 0;
    bool best_scored = false;
    for (uint64_t left = eligible & ~s.failed_groups; left != 0; left &= left - 1) {
      int g = std::countr_zero(left);
      if (best >= 0 && groups()[g].memory_bytes != groups()[best].memory_bytes) break;
      const pl::Request& r = s.on[g].request;
      if (!pl::Fits(ViewFor(g, j.uid), r)) {
        s.failed_groups |= uint64_t{1} << g;
        continue;
      }
      if (best < 0) {
        best = g;
        continue;
      }
      // Two models with GPUs of the same size: the policy decides.
      if (!best_scored) {
        best_score = policy->policy().Score(ViewFor(best, j.uid), s.on[best].request);
        best_scored = true;
      }
      double score = policy->policy().Score(ViewFor(g, j.uid), r);
      if (score > best_score) {
        best = g;
        best_score = score;
      }
    }
    if (best < 0) return false;

    const pl::Request& r = s.on[best].request;
    const pl::Node& view = ViewFor(best, j.uid);
    pl::GpuSet chosen = policy->policy().ChooseGpus(view, r);
    if (!pl::PlacementFits(view, r, chosen)) chosen = pl::TightestGpus(view, r);
    cluster.Apply({.node = best, .gpus = chosen}, r);

    Running run;
    run.queue = j.queue;
    run.uid = j.uid;
    run.milli = s.on[best].total_milli;
    run.held.push_back({best, chosen, r});
    run.typical = r;
    StartDecision decision{.id = j.id, .gpus = {}};
    for (pl::GpuSet left = chosen; left != 0; left &= left - 1) {
      int pos = groups()[best].members[std::countr_zero(left)];
      const NodeGpu& gpu = node.gpus()[pos];
      run.gpu_pos.push_back(pos);
      gpu_jobs[pos].push_back(j.id);
      decision.gpus.push_back({.index = gpu.index,
                               .uuid = gpu.uuid,
                               .milli = r.gpu_milli,
                               .memory_bytes = r.gpu_memory_bytes});
    }
    queues[j.queue].usage.Start(run.milli);
    if (auto key = s.MixKey()) policy->Count(*key, -1);
    policy->Count(run.typical, +1);
    int64_t id = j.id;
    RemovePending(j);
    running.emplace(id, std::move(run));
    out.push_back(std::move(decision));
    pass.Refresh(best);
    return true;
  }

  // Gives `j`, which does not fit now, a reservation (SchedulingPass::Reserve), and keeps its
  // cost from its queue's later jobs.
  bool Reserve(Pending& j, uint64_t eligible) {
    SchedulingPass::Reservation r =
        pass.Reserve(j.id, *j.shape, eligible, j.reserved_group, j.reserved_gpus, gpu_jobs);
    j.reserved_group = r.group;
    j.reserved_gpus = r.gpus;
    if (r.group < 0) {
      j.reason = Reason::kNoRoom;
      return false;
    }
    j.reason = Reason::kReserved;
    queues[j.queue].usage.Keep(pass.number(), j.shape->on[r.group].total_milli);
    return true;
  }

  // Starts `j` or gives it a reservation (true), or records why it gets neither (false).
  bool Consider(Pending& j, std::vector<StartDecision>& out) {
    j.pass = pass.number();
    QueueUsage& usage = queues[j.queue].usage;
    if (usage.BlockedIn(pass.number())) {
      j.reason = Reason::kBehind;
      j.behind = usage.blocked_by();
      return false;
    }
    const Shape& s = *j.shape;
    uint64_t possible = 0, eligible = 0;
    for (uint64_t left = s.valid; left != 0; left &= left - 1) {
      int g = std::countr_zero(left);
      uint64_t milli = s.on[g].total_milli;
      if (!usage.CouldHold(milli)) continue;
      possible |= uint64_t{1} << g;
      if (usage.Allows(pass.number(), milli)) eligible |= uint64_t{1} << g;
    }
    if (possible == 0) {
      // CheckFeasible would have refused it; it must not hold its queue up forever.
      j.reason = Reason::kNever;
      return false;
    }
    if (eligible == 0) {
      usage.Block(pass.number(), j.id);
      j.reason = Reason::kQuota;
      return false;
    }
    if (pass.can_start() && TryStart(j, eligible, out)) return true;
    return Reserve(j, eligible);
  }

  std::vector<StartDecision> Schedule(int64_t now_ms) {
    policy->Refresh(now_ms, &cluster, /*force=*/false, kTypicalMaxAgeMs);
    pass.Begin();
    std::vector<StartDecision> out;
    // Starving jobs, oldest first. Erasing a started job leaves the other iterators valid.
    for (auto it = by_age.begin(); it != by_age.end() && pass.KeepGoing();) {
      if (now_ms - it->submitted_ms <= options.starvation_ms) break;
      Pending* j = (it++)->job;
      pass.Count(Consider(*j, out));
    }
    for (Queue& q : queues) {
      for (auto it = q.jobs.begin(); it != q.jobs.end() && pass.KeepGoing();) {
        if (q.usage.BlockedIn(pass.number())) break;
        Pending* j = *it++;
        if (j->pass != pass.number()) pass.Count(Consider(*j, out));
      }
      if (!pass.KeepGoing()) break;
    }
    return out;
  }

  // ---- Bookkeeping ----

  void RemovePending(Pending& j) {
    queues[j.queue].jobs.erase(j.in_queue);
    by_age.erase({j.submitted_ms, j.id, &j});
    shapes.Release(j.shape);
    pass.Forget(j.id);
    pending.erase(j.id);
  }

  void ReleaseRunning(Running& run, int64_t id) {
    for (const Held& h : run.held) cluster.Release({.node = h.group, .gpus = h.gpus}, h.request);
    for (int pos : run.gpu_pos) {
      auto& jobs = gpu_jobs[pos];
      jobs.erase(std::find(jobs.begin(), jobs.end(), id));
    }
    if (run.queue >= 0) queues[run.queue].usage.End(run.milli);
    if (!run.held.empty()) policy->Count(run.typical, -1);
  }

  // Whether the queue's quota could ever hold the request on its cheapest group of `valid`.
  Status CheckQuota(int queue, const GpuRequest& request, uint64_t valid) const {
    uint64_t least = UINT64_MAX;
    int least_group = 0;
    for (uint64_t left = valid; left != 0; left &= left - 1) {
      int g = std::countr_zero(left);
      uint64_t milli = TranslateOnGroup(request, groups()[g]).total_milli;
      if (milli < least) {
        least = milli;
        least_group = g;
      }
    }
    std::string need = FormatGpuRequest(request);
    if (request.kind == GpuRequest::Kind::kMemory) {
      need += " (" + FormatMilli(static_cast<uint32_t>(least)) + " of a " +
              node.ModelName(least_group) + ")";
    }
    return QueueUsage::CheckHolds(config.queues[queue], node.gpus().size(), least, need);
  }
};

QueueScheduler::QueueScheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
QueueScheduler::~QueueScheduler() = default;

StatusOr<std::unique_ptr<QueueScheduler>> QueueScheduler::Create(std::vector<NodeGpu> gpus,
                                                                 QueueConfig queues,
                                                                 SchedulerOptions options) {
  // No GPUs is allowed: on a node whose GPUs are all in MIG mode, the MIG lane serves everything.
  if (queues.queues.empty()) return InvalidArgumentError("the queue configuration has no queues");
  GPUFRAC_ASSIGN_OR_RETURN(ModelGroups node, ModelGroups::Create(std::move(gpus)));
  GPUFRAC_ASSIGN_OR_RETURN(pl::Cluster cluster, node.MakeCluster());
  auto impl = std::make_unique<Impl>(std::move(node), std::move(cluster), std::move(queues),
                                     std::move(options));
  GPUFRAC_ASSIGN_OR_RETURN(impl->policy,
                           pl::PolicyWithMix::Create(impl->options.policy, &impl->cluster));
  return std::unique_ptr<QueueScheduler>(new QueueScheduler(std::move(impl)));
}

const QueueConfig& QueueScheduler::queues() const { return impl_->config; }
const std::vector<NodeGpu>& QueueScheduler::gpus() const { return impl_->node.gpus(); }

std::optional<int> QueueScheduler::QueueIndex(const std::string& name) const {
  const auto& q = impl_->config.queues;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i].name == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

Status QueueScheduler::CheckFeasible(int queue, const GpuRequest& request, bool check_quota) const {
  const Impl& s = *impl_;
  if (queue < 0 || queue >= static_cast<int>(s.config.queues.size())) {
    return InvalidArgumentError("no queue number " + std::to_string(queue) + " here");
  }
  if (request.kind == GpuRequest::Kind::kMigProfile) {
    return FailedPreconditionError("--mig-profile " + request.mig_profile +
                                   " needs a GPU in MIG mode; no GPU on this node is");
  }
  if (s.node.gpus().empty()) {
    return FailedPreconditionError(FormatGpuRequest(request) +
                                   " needs a GPU that is not in MIG mode; every GPU here is");
  }
  GPUFRAC_ASSIGN_OR_RETURN(uint64_t allowed, s.node.AllowedGroups(request));
  uint64_t valid = 0;
  for (size_t g = 0; g < s.groups().size(); ++g) {
    if ((allowed >> g & 1) && TranslateOnGroup(request, s.groups()[g]).ok) {
      valid |= uint64_t{1} << g;
    }
  }
  if (valid == 0) return s.node.WhyNoGroupHolds(request, allowed);
  return check_quota ? s.CheckQuota(queue, request, valid) : OkStatus();
}

void QueueScheduler::Enqueue(const PendingJob& job) {
  Impl& s = *impl_;
  if (job.queue < 0 || job.queue >= static_cast<int>(s.queues.size())) return;
  if (s.pending.contains(job.id) || s.running.contains(job.id)) return;
  Impl::Pending& p = s.pending[job.id];
  p.id = job.id;
  p.queue = job.queue;
  p.submitted_ms = job.submitted_ms;
  p.uid = job.uid;
  p.shape = s.shapes.Acquire(job.request);
  Impl::Queue& q = s.queues[job.queue];
  p.in_queue = q.jobs.insert(q.jobs.end(), &p);
  s.by_age.insert({p.submitted_ms, p.id, &p});
  if (auto key = p.shape->MixKey()) s.policy->Count(*key, +1);
  s.policy->NoteChange();
}

bool QueueScheduler::Dequeue(int64_t id) {
  Impl& s = *impl_;
  auto it = s.pending.find(id);
  if (it == s.pending.end()) return false;
  if (auto key = it->second.shape->MixKey()) s.policy->Count(*key, -1);
  s.RemovePending(it->second);
  return true;
}

void QueueScheduler::AddRunning(int64_t id, int queue, const std::vector<GpuGrant>& shares,
                                uid_t uid) {
  Impl& s = *impl_;
  Dequeue(id);
  Finish(id);
  Impl::Running run;
  run.uid = uid;
  run.queue = queue >= 0 && queue < static_cast<int>(s.queues.size()) ? queue : -1;
  // Shares alike on GPUs of one group are one placement, as if the scheduler had made it.
  std::map<std::tuple<int, uint32_t, uint64_t>, pl::GpuSet> alike;
  for (const GpuGrant& share : shares) {
    int pos = s.node.PositionOf(share.index);
    if (pos < 0) continue;  // That GPU is gone.
    uint32_t milli = std::min(share.milli, kMilliPerGpu);
    alike[{s.node.group_of(pos), milli, share.memory_bytes}] |= pl::GpuSet{1}
                                                                << s.node.slot_of(pos);
    run.milli += milli;
    if (std::find(run.gpu_pos.begin(), run.gpu_pos.end(), pos) == run.gpu_pos.end()) {
      run.gpu_pos.push_back(pos);
    }
  }
  for (const auto& [key, set] : alike) {
    auto [group, milli, memory] = key;
    pl::Request r;
    r.gpu_count = static_cast<uint32_t>(std::popcount(set));
    r.gpu_milli = milli;
    r.gpu_memory_bytes = memory;
    const pl::Node& n = s.cluster.node(group);
    if (pl::PlacementFits(n, r, set)) {
      s.cluster.Apply({.node = group, .gpus = set}, r);
      run.held.push_back({group, set, r});
      continue;
    }
    // The GPUs changed since the job started (or its record is wrong): count only what is free,
    // so the scheduler never believes a GPU holds more than all of it.
    for (pl::GpuSet left = set; left != 0; left &= left - 1) {
      int slot = std::countr_zero(left);
      pl::Request one;
      one.gpu_count = 1;
      one.gpu_milli = std::min(milli, n.gpu_free_milli[slot]);
      one.gpu_memory_bytes =
          n.spec.gpu_memory_bytes > 0 ? std::min(memory, n.gpu_free_memory[slot]) : memory;
      pl::GpuSet gpu = pl::GpuSet{1} << slot;
      s.cluster.Apply({.node = group, .gpus = gpu}, one);
      run.held.push_back({group, gpu, one});
    }
  }
  for (int pos : run.gpu_pos) s.gpu_jobs[pos].push_back(id);
  if (run.queue >= 0) s.queues[run.queue].usage.Start(run.milli);
  if (!run.held.empty()) {
    run.typical = run.held.front().request;
    run.typical.gpu_count = static_cast<uint32_t>(run.gpu_pos.size());
    s.policy->Count(run.typical, +1);
    s.policy->NoteChange();
  }
  s.running.emplace(id, std::move(run));
}

bool QueueScheduler::Finish(int64_t id) {
  Impl& s = *impl_;
  auto it = s.running.find(id);
  if (it == s.running.end()) return false;
  s.ReleaseRunning(it->second, id);
  s.running.erase(it);
  return true;
}

std::vector<StartDecision> QueueScheduler::Schedule(int64_t now_ms) {
  return impl_->Schedule(now_ms);
}

std::vector<QueueScheduler::GpuView> QueueScheduler::Gpus() const {
  const Impl& s = *impl_;
  std::vector<GpuView> out;
  out.reserve(s.node.gpus().size());
  for (size_t pos = 0; pos < s.node.gpus().size(); ++pos) {
    const pl::Node& n = s.cluster.node(s.node.group_of(pos));
    int slot = s.node.slot_of(pos);
    GpuView v;
    v.gpu = s.node.gpus()[pos];
    v.allocated_milli = kMilliPerGpu - n.gpu_free_milli[slot];
    v.allocated_memory = n.spec.gpu_memory_bytes - n.gpu_free_memory[slot];
    v.jobs = s.gpu_jobs[pos];
    v.reserved_for = s.pass.reserved_for(pos);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<QueueScheduler::QueueView> QueueScheduler::Queues() const {
  const Impl& s = *impl_;
  std::vector<QueueView> out;
  for (size_t i = 0; i < s.queues.size(); ++i) {
    const Impl::Queue& q = s.queues[i];
    out.push_back({.name = s.config.queues[i].name,
                   .pending = q.jobs.size(),
                   .running = q.usage.running(),
                   .milli_in_use = q.usage.in_use(),
                   .quota_milli = q.usage.quota()});
  }
  return out;
}

std::string QueueScheduler::WaitReason(int64_t id) const {
  const Impl& s = *impl_;
  auto it = s.pending.find(id);
  if (it == s.pending.end()) return "";
  const Impl::Pending& j = it->second;
  const QueueUsage& q = s.queues[j.queue].usage;
  const uint64_t pass = s.pass.number();
  const std::string& queue_name = s.config.queues[j.queue].name;
  if (pass == 0 || j.pass != pass) {
    // The last pass stopped before this job: its queue was held back, or every GPU was full
    // or reserved for jobs ahead of it.
    if (pass > 0 && q.BlockedIn(pass) && q.blocked_by() != j.id) {
      return "behind job " + std::to_string(q.blocked_by()) + " in queue " + queue_name +
             ", which is " + q.StateText(pass);
    }
    return "waiting for higher-priority work";
  }
  switch (j.reason) {
    case Impl::Reason::kReserved: {
      bool several = std::popcount(j.reserved_gpus) > 1;
      return std::string("waiting for GPU") + (several ? "s " : " ") +
             s.node.GpuList(j.reserved_group, j.reserved_gpus) + " (reserved for it)";
    }
    case Impl::Reason::kQuota:
      return "queue " + queue_name + " is " + q.StateText(pass);
    case Impl::Reason::kBehind:
      return "behind job " + std::to_string(j.behind) + " in queue " + queue_name + ", which is " +
             q.StateText(pass);
    case Impl::Reason::kNoRoom:
      return "waiting for GPUs: those it could use are reserved for jobs ahead of it";
    case Impl::Reason::kNever: {
      Status why = CheckFeasible(j.queue, j.shape->request);
      return "cannot run on this node: " +
             (why.ok() ? std::string("no GPU fits it") : why.message());
    }
  }
  return "";
}

size_t QueueScheduler::pending_count() const { return impl_->pending.size(); }

}  // namespace gpufrac::node
