// The node service's queue scheduler: strict priority between queues, quotas, backfill around
// blocked jobs with sticky reservations, starvation relief, and GPU choice by the placement
// library's policy on a one-node-per-GPU-model placement::Cluster.
#include "node/queue_scheduler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/text.h"
#include "common/units.h"
#include "node/request_shapes.h"
#include "placement/cluster.h"
#include "placement/fit.h"
#include "placement/host_gpus.h"
#include "placement/workload_mix.h"

namespace gpufrac::node {
namespace {

namespace pl = ::gpufrac::placement;

// Host CPU and memory are not the scheduler's business: the per-model placement nodes get so
// much that they never limit, and requests ask for none.
constexpr uint64_t kHostPlenty = uint64_t{1} << 50;
// Groups of GPUs are tracked in 64-bit masks (there are at most that many placement models).
constexpr int kMaxGroups = pl::kMaxModels;
// Besides after enough new requests (placement/workload_mix.h), the policy's mix is rebuilt
// after this much of the caller's time with any change.
constexpr int64_t kTypicalMaxAgeMs = 300'000;
// Once no unreserved GPU has free share, nothing more can start in a pass; it still goes on
// giving reservations (they show who waits for what, and keep the choice stable) until every
// GPU is reserved or this many jobs in a row got none, so that a long queue of jobs that cannot
// reserve what is left (e.g. 2-GPU jobs and 1 unreserved GPU) is not walked for nothing.
constexpr int kFruitlessLimit = 64;

std::string GpuCountText(uint64_t milli) {
  return FormatMilli(static_cast<uint32_t>(milli)) + (milli == kMilliPerGpu ? " GPU" : " GPUs");
}

std::string JoinAnd(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

struct QueueScheduler::Impl {
  // The GPUs of one model (same name, memory and context size): one placement node. Its
  // members are positions in `gpus`; placement GPU g is members[g].
  using Group = pl::GpuGroup;

  using Shape = RequestShape;

  enum class Reason { kReserved, kQuota, kBehind, kNoRoom, kNever };

  struct Pending {
    int64_t id = 0;
    int queue = 0;
    int64_t submitted_ms = 0;
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
    uint64_t milli = 0;
    std::vector<Held> held;
    std::vector<int> gpu_pos;
    pl::Request typical;  // What it counts as in the policy's mix.
  };

  struct Queue {
    std::list<Pending*> jobs;
    size_t running = 0;
    uint64_t in_use = 0;
    uint64_t quota = 0;
    bool limited = false;  // quota is below the node's capacity (1 means no limit).
    // Set by a pass: the queue's head is held back by its quota, so nothing behind it starts.
    uint64_t blocked_pass = 0;
    int64_t blocked_by = 0;
    // Quota kept (during pass reserved_pass) for the queue's jobs that hold reservations, so a
    // later job of the same queue cannot take it and delay them.
    uint64_t reserved_pass = 0;
    uint64_t reserved = 0;
  };

  std::vector<NodeGpu> gpus;  // By NVML index.
  QueueConfig config;
  SchedulerOptions options;
  std::vector<Group> groups;  // Smallest GPU memory first: the preference among models.
  std::vector<int> gpu_group, gpu_slot;
  std::unordered_map<int, int> pos_of_index;
  std::optional<pl::Cluster> cluster;

  // The placement policy and the mix of requests (pending and running) it measures against.
  std::optional<pl::PolicyWithMix> policy;

  std::vector<Queue> queues;
  std::unordered_map<int64_t, Pending> pending;
  std::set<AgeKey> by_age;
  RequestShapes shapes{&groups};  // Of pending jobs; refers to `groups`, set up before any use.
  std::unordered_map<int64_t, Running> running;
  std::vector<std::vector<int64_t>> gpu_jobs;  // By position in gpus.

  // The current (or last) pass.
  uint64_t pass = 0;
  std::vector<pl::Node> views;       // Per group: the cluster node less reserved GPUs.
  std::vector<pl::GpuSet> reserved;  // Per group: GPUs reserved in this pass.
  std::vector<int> open_in_group;    // Unreserved GPUs with some free share, per group.
  int open = 0;                      // Their sum: 0 means nothing more can start.
  int unreserved = 0;                // GPUs not reserved in this pass.
  int fruitless = 0;                 // Jobs in a row that got nothing since open reached 0.
  std::vector<std::optional<int64_t>> reserved_for;  // By position in gpus.

  // ---- Pass state ----

  void RefreshGroup(int g) {
    pl::Node& v = views[g];
    v = cluster->node(g);
    int open_here = 0;
    for (int i = 0; i < v.spec.gpu_count; ++i) {
      if (reserved[g] >> i & 1) {
        v.gpu_free_milli[i] = 0;
        v.gpu_free_memory[i] = 0;
      } else if (v.gpu_free_milli[i] > 0) {
        ++open_here;
      }
    }
    open += open_here - open_in_group[g];
    open_in_group[g] = open_here;
  }

  void BeginPass() {
    ++pass;
    open = 0;
    fruitless = 0;
    unreserved = static_cast<int>(gpus.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      reserved[g] = 0;
      open_in_group[g] = 0;
      RefreshGroup(static_cast<int>(g));
    }
    std::fill(reserved_for.begin(), reserved_for.end(), std::nullopt);
  }

  // ---- Starting and reserving ----

  // Starts `j` if it fits now on an eligible group (smallest GPUs first, then the policy's
  // score). On success `j` is gone (moved to running) and its decision is in `out`.
  bool TryStart(Pending& j, uint64_t eligible, std::vector<StartDecision>& out) {
    Shape& s = *j.shape;
    if (s.failed_pass != pass) {
      s.failed_pass = pass;
      s.failed_groups = 0;
    }
    int best = -1;
    double best_score = 0;
    bool best_scored = false;
    for (uint64_t left = eligible & ~s.failed_groups; left != 0; left &= left - 1) {
      int g = std::countr_zero(left);
      if (best >= 0 && groups[g].memory_bytes != groups[best].memory_bytes) break;
      const pl::Request& r = s.on[g].request;
      if (!pl::Fits(views[g], r)) {
        s.failed_groups |= uint64_t{1} << g;
        continue;
      }
      if (best < 0) {
        best = g;
        continue;
      }
      // Two models with GPUs of the same size: the policy decides.
      if (!best_scored) {
        best_score = policy->policy().Score(views[best], s.on[best].request);
        best_scored = true;
      }
      double score = policy->policy().Score(views[g], r);
      if (score > best_score) {
        best = g;
        best_score = score;
      }
    }
    if (best < 0) return false;

    const pl::Request& r = s.on[best].request;
    pl::GpuSet chosen = policy->policy().ChooseGpus(views[best], r);
    if (!pl::PlacementFits(views[best], r, chosen)) chosen = pl::TightestGpus(views[best], r);
    cluster->Apply({.node = best, .gpus = chosen}, r);

    Queue& q = queues[j.queue];
    Running run;
    run.queue = j.queue;
    run.milli = s.on[best].total_milli;
    run.held.push_back({best, chosen, r});
    run.typical = r;
    StartDecision decision{.id = j.id, .gpus = {}};
    for (pl::GpuSet left = chosen; left != 0; left &= left - 1) {
      int pos = groups[best].members[std::countr_zero(left)];
      run.gpu_pos.push_back(pos);
      gpu_jobs[pos].push_back(j.id);
      decision.gpus.push_back({.index = gpus[pos].index,
                               .uuid = gpus[pos].uuid,
                               .milli = r.gpu_milli,
                               .memory_bytes = r.gpu_memory_bytes});
    }
    q.in_use += run.milli;
    ++q.running;
    if (auto key = s.MixKey()) policy->Count(*key, -1);
    policy->Count(run.typical, +1);
    int64_t id = j.id;
    RemovePending(j);
    running.emplace(id, std::move(run));
    out.push_back(std::move(decision));
    RefreshGroup(best);
    return true;
  }

  // Gives `j`, which does not fit now, a reservation: its old one while none of those GPUs is
  // taken by an earlier job of this pass, else the unreserved GPUs of one eligible group that
  // are closest to holding it.
  bool Reserve(Pending& j, uint64_t eligible) {
    const Shape& s = *j.shape;
    int group = -1;
    pl::GpuSet set = 0;
    if (j.reserved_group >= 0 && (eligible >> j.reserved_group & 1) &&
        (reserved[j.reserved_group] & j.reserved_gpus) == 0 &&
        std::popcount(j.reserved_gpus) ==
            static_cast<int>(s.on[j.reserved_group].request.gpu_count)) {
      group = j.reserved_group;
      set = j.reserved_gpus;
    } else {
      uint64_t best_free = 0;
      size_t best_jobs = 0;
      for (uint64_t left = eligible; left != 0; left &= left - 1) {
        int g = std::countr_zero(left);
        const pl::Node& n = cluster->node(g);
        int count = static_cast<int>(s.on[g].request.gpu_count);
        if (n.spec.gpu_count - std::popcount(reserved[g]) < count) continue;
        // The `count` unreserved GPUs with the most free share, then the fewest running jobs.
        std::array<int, pl::kMaxGpusPerNode> candidates;
        int open_slots = 0;
        for (int i = 0; i < n.spec.gpu_count; ++i) {
          if (!(reserved[g] >> i & 1)) candidates[open_slots++] = i;
        }
        auto closer = [&](int a, int b) {
          if (n.gpu_free_milli[a] != n.gpu_free_milli[b]) {
            return n.gpu_free_milli[a] > n.gpu_free_milli[b];
          }
          size_t ja = gpu_jobs[groups[g].members[a]].size(),
                 jb = gpu_jobs[groups[g].members[b]].size();
          if (ja != jb) return ja < jb;
          return a < b;
        };
        std::partial_sort(candidates.begin(), candidates.begin() + count,
                          candidates.begin() + open_slots, closer);
        uint64_t free = 0;
        size_t jobs = 0;
        pl::GpuSet pick = 0;
        for (int k = 0; k < count; ++k) {
          free += n.gpu_free_milli[candidates[k]];
          jobs += gpu_jobs[groups[g].members[candidates[k]]].size();
          pick |= pl::GpuSet{1} << candidates[k];
        }
        // Groups come smallest GPUs first, so among equals the smaller GPU keeps the job.
        if (group < 0 || free > best_free || (free == best_free && jobs < best_jobs)) {
          group = g;
          set = pick;
          best_free = free;
          best_jobs = jobs;
        }
      }
    }
    j.reserved_group = group;
    j.reserved_gpus = set;
    if (group < 0) {
      j.reason = Reason::kNoRoom;
      return false;
    }
    j.reason = Reason::kReserved;
    reserved[group] |= set;
    unreserved -= std::popcount(set);
    for (pl::GpuSet left = set; left != 0; left &= left - 1) {
      reserved_for[groups[group].members[std::countr_zero(left)]] = j.id;
    }
    Queue& q = queues[j.queue];
    if (q.reserved_pass != pass) {
      q.reserved_pass = pass;
      q.reserved = 0;
    }
    q.reserved += s.on[group].total_milli;
    RefreshGroup(group);
    return true;
  }

  // Starts `j` or gives it a reservation (true), or records why it gets neither (false).
  bool Consider(Pending& j, std::vector<StartDecision>& out) {
    j.pass = pass;
    Queue& q = queues[j.queue];
    if (q.blocked_pass == pass) {
      j.reason = Reason::kBehind;
      j.behind = q.blocked_by;
      return false;
    }
    const Shape& s = *j.shape;
    uint64_t kept = q.reserved_pass == pass ? q.reserved : 0;
    uint64_t possible = 0, eligible = 0;
    for (uint64_t left = s.valid; left != 0; left &= left - 1) {
      int g = std::countr_zero(left);
      uint64_t milli = s.on[g].total_milli;
      if (q.limited && milli > q.quota) continue;
      possible |= uint64_t{1} << g;
      if (!q.limited || q.in_use + kept + milli <= q.quota) eligible |= uint64_t{1} << g;
    }
    if (possible == 0) {
      // CheckFeasible would have refused it; it must not hold its queue up forever.
      j.reason = Reason::kNever;
      return false;
    }
    if (eligible == 0) {
      q.blocked_pass = pass;
      q.blocked_by = j.id;
      j.reason = Reason::kQuota;
      return false;
    }
    if (open > 0 && TryStart(j, eligible, out)) return true;
    return Reserve(j, eligible);
  }

  bool KeepGoing() const { return unreserved > 0 && (open > 0 || fruitless < kFruitlessLimit); }

  void Count(bool progress) { fruitless = progress || open > 0 ? 0 : fruitless + 1; }

  std::vector<StartDecision> Schedule(int64_t now_ms) {
    policy->Refresh(now_ms, &*cluster, /*force=*/false, kTypicalMaxAgeMs);
    BeginPass();
    std::vector<StartDecision> out;
    // Starving jobs, oldest first. Erasing a started job leaves the other iterators valid.
    for (auto it = by_age.begin(); it != by_age.end() && KeepGoing();) {
      if (now_ms - it->submitted_ms <= options.starvation_ms) break;
      Pending* j = (it++)->job;
      Count(Consider(*j, out));
    }
    for (Queue& q : queues) {
      for (auto it = q.jobs.begin(); it != q.jobs.end() && KeepGoing();) {
        if (q.blocked_pass == pass) break;
        Pending* j = *it++;
        if (j->pass != pass) Count(Consider(*j, out));
      }
      if (!KeepGoing()) break;
    }
    return out;
  }

  // ---- Bookkeeping ----

  void RemovePending(Pending& j) {
    queues[j.queue].jobs.erase(j.in_queue);
    by_age.erase({j.submitted_ms, j.id, &j});
    shapes.Release(j.shape);
    for (auto& r : reserved_for) {
      if (r == j.id) r.reset();
    }
    pending.erase(j.id);
  }

  void ReleaseRunning(Running& run, int64_t id) {
    for (const Held& h : run.held) cluster->Release({.node = h.group, .gpus = h.gpus}, h.request);
    for (int pos : run.gpu_pos) {
      auto& jobs = gpu_jobs[pos];
      jobs.erase(std::find(jobs.begin(), jobs.end(), id));
    }
    if (run.queue >= 0) {
      queues[run.queue].in_use -= run.milli;
      --queues[run.queue].running;
    }
    if (!run.held.empty()) policy->Count(run.typical, -1);
  }

  // ---- Why a request cannot run here (CheckFeasible) ----

  // The groups of the request's model that can take it: kInvalidArgument naming the models here
  // when there is no such model, or when it shares a GPU and all of them are whole-only.
  StatusOr<uint64_t> AllowedGroups(const GpuRequest& request) const {
    const std::string flags = FormatGpuRequest(request);
    uint64_t allowed = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (request.gpu_model.empty() || EqualsIgnoreCase(groups[g].model, request.gpu_model)) {
        allowed |= uint64_t{1} << g;
      }
    }
    if (allowed == 0) {
      std::vector<std::string> names;
      for (size_t pos = 0; pos < gpus.size(); ++pos) {
        std::string name = ModelName(gpu_group[pos]);
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
      }
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      return InvalidArgumentError("--gpu-model " + request.gpu_model + ": no such GPU here (" +
                                  list + ")");
    }

    if (request.kind != GpuRequest::Kind::kWholeGpus) {
      uint64_t shared = 0;
      for (size_t g = 0; g < groups.size(); ++g) {
        if (!groups[g].whole_only) shared |= uint64_t{1} << g;
      }
      if ((allowed & shared) == 0) {
        return InvalidArgumentError(
            flags + " needs a GPU that can be shared; " +
            (request.gpu_model.empty() ? "every GPU" : "every " + request.gpu_model) +
            " here takes whole-GPU jobs only (ask for --gpus 1)");
      }
      allowed &= shared;
    }
    return allowed;
  }

  // Why no group of `allowed` holds the request: more GPUs than a model has, more memory than
  // the largest GPU, or too little to hold the CUDA context.
  Status WhyNoGroupHolds(const GpuRequest& request, uint64_t allowed) const {
    const std::string flags = FormatGpuRequest(request);
    const uint64_t all_groups = (uint64_t{1} << groups.size()) - 1;
    // Groups are smallest first: the last allowed one has the largest GPUs.
    int largest = 63 - std::countl_zero(allowed);
    const Group& big = groups[largest];
    switch (request.kind) {
      case GpuRequest::Kind::kWholeGpus: {
        size_t most = 0;
        uint64_t total = 0;
        for (uint64_t left = allowed; left != 0; left &= left - 1) {
          most = std::max(most, groups[std::countr_zero(left)].members.size());
          total += groups[std::countr_zero(left)].members.size();
        }
        if (request.gpus > most) {
          return InvalidArgumentError(
              flags + " asks for " + std::to_string(request.gpus) + " GPUs" +
              (request.gpus <= total ? " of one model" : "") + "; this node has " +
              ModelSummary(request.gpu_model.empty() ? all_groups : allowed));
        }
        break;
      }
      case GpuRequest::Kind::kMemory:
        if (request.memory_bytes > big.memory_bytes) {
          return InvalidArgumentError(
              flags + " is more than any GPU here has (largest: " + ModelName(largest) + ", " +
              FormatSize(big.memory_bytes) + ")");
        }
        [[fallthrough]];
      case GpuRequest::Kind::kFraction: {
        // Too small: name the largest GPU it would fit on, with that GPU's context size.
        for (int g = largest; g >= 0; --g) {
          if (!(allowed >> g & 1)) continue;
          const Group& group = groups[g];
          uint64_t limit = request.memory_bytes;
          std::string what = flags;
          if (request.kind == GpuRequest::Kind::kFraction) {
            limit = BytesOfShare(group.memory_bytes, request.fraction_milli);
            what += " (" + FormatSize(limit) + " on " + ModelName(g) + ")";
          }
          if (limit > group.memory_bytes) continue;
          return InvalidArgumentError(what + " cannot hold even the CUDA context on " +
                                      ModelName(g) + " (about " + FormatSize(group.context_bytes) +
                                      "); ask for more");
        }
        break;
      }
      case GpuRequest::Kind::kMigProfile:
        break;
    }
    return InvalidArgumentError(flags + " cannot run on any GPU of this node (" +
                                ModelSummary(all_groups) + ")");
  }

  // Whether the queue's quota could ever hold the request on its cheapest group of `valid`.
  Status CheckQuota(int queue, const GpuRequest& request, uint64_t valid) const {
    const std::string flags = FormatGpuRequest(request);
    const Queue& q = queues[queue];
    uint64_t least = UINT64_MAX;
    int least_group = 0;
    for (uint64_t left = valid; left != 0; left &= left - 1) {
      int g = std::countr_zero(left);
      uint64_t milli = TranslateOnGroup(request, groups[g]).total_milli;
      if (milli < least) {
        least = milli;
        least_group = g;
      }
    }
    if (least > q.quota) {
      std::string need = flags;
      if (request.kind == GpuRequest::Kind::kMemory) {
        need += " (" + FormatMilli(static_cast<uint32_t>(least)) + " of a " +
                ModelName(least_group) + ")";
      }
      const QueueSpec& spec = config.queues[queue];
      return InvalidArgumentError(
          "queue " + spec.name + "'s quota (" + FormatMilli(FractionToMilli(spec.quota)) + " of " +
          GpuCountText(uint64_t{kMilliPerGpu} * gpus.size()) + ") is less than " + need);
    }
    return OkStatus();
  }

  std::string GpuList(int group, pl::GpuSet set) const {
    std::string out;
    for (pl::GpuSet left = set; left != 0; left &= left - 1) {
      if (!out.empty()) out += ", ";
      out += std::to_string(gpus[groups[group].members[std::countr_zero(left)]].index);
    }
    return out;
  }

  // "at its quota (1.5 of 2 GPUs in use)".
  std::string QuotaState(const Queue& q) const {
    std::string out = "at its quota (" + FormatMilli(static_cast<uint32_t>(q.in_use)) + " of " +
                      GpuCountText(q.quota) + " in use";
    if (q.reserved_pass == pass && q.reserved > 0) {
      out += ", " + FormatMilli(static_cast<uint32_t>(q.reserved)) +
             " kept for its jobs waiting for GPUs";
    }
    return out + ")";
  }

  std::string ModelSummary(uint64_t group_mask) const {
    std::vector<std::pair<std::string, int>> counts;  // In GPU index order.
    for (size_t pos = 0; pos < gpus.size(); ++pos) {
      int g = gpu_group[pos];
      if (!(group_mask >> g & 1)) continue;
      std::string name = groups[g].model.empty() ? "unknown-model" : groups[g].model;
      auto it = std::find_if(counts.begin(), counts.end(),
                             [&](const auto& c) { return c.first == name; });
      if (it == counts.end()) {
        counts.emplace_back(name, 1);
      } else {
        ++it->second;
      }
    }
    std::vector<std::string> parts;
    for (const auto& [name, n] : counts) parts.push_back(std::to_string(n) + " " + name);
    return JoinAnd(parts);
  }

  std::string ModelName(int g) const {
    return groups[g].model.empty() ? "a GPU of unknown model" : groups[g].model;
  }
};

QueueScheduler::QueueScheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
QueueScheduler::~QueueScheduler() = default;

StatusOr<std::unique_ptr<QueueScheduler>> QueueScheduler::Create(std::vector<NodeGpu> gpus,
                                                                 QueueConfig queues,
                                                                 SchedulerOptions options) {
  // No GPUs is allowed: on a node whose GPUs are all in MIG mode, the MIG lane serves everything.
  if (queues.queues.empty()) return InvalidArgumentError("the queue configuration has no queues");
  std::sort(gpus.begin(), gpus.end(),
            [](const NodeGpu& a, const NodeGpu& b) { return a.index < b.index; });
  for (size_t i = 1; i < gpus.size(); ++i) {
    if (gpus[i].index == gpus[i - 1].index) {
      return InvalidArgumentError("GPU index " + std::to_string(gpus[i].index) + " appears twice");
    }
  }

  auto impl = std::make_unique<Impl>();
  Impl& s = *impl;
  s.config = std::move(queues);
  s.options = std::move(options);
  // Group GPUs by model; smallest GPUs first, so that bit order is the preference order.
  std::vector<pl::HostGpu> host;
  for (const NodeGpu& gpu : gpus) {
    host.push_back(
        {gpu.model, gpu.memory_bytes, gpu.context_bytes, gpu.mode == gpu::GpuMode::kWhole});
  }
  s.groups = pl::GroupHostGpus(host);
  std::stable_sort(
      s.groups.begin(), s.groups.end(),
      [](const Impl::Group& a, const Impl::Group& b) { return a.memory_bytes < b.memory_bytes; });
  if (s.groups.size() > static_cast<size_t>(kMaxGroups)) {
    return InvalidArgumentError("more than " + std::to_string(kMaxGroups) +
                                " different GPU models on one node");
  }
  s.gpus = std::move(gpus);
  s.gpu_group.resize(s.gpus.size());
  s.gpu_slot.resize(s.gpus.size());
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const std::vector<int>& members = s.groups[g].members;
    for (size_t slot = 0; slot < members.size(); ++slot) {
      s.gpu_group[members[slot]] = static_cast<int>(g);
      s.gpu_slot[members[slot]] = static_cast<int>(slot);
    }
  }
  for (size_t pos = 0; pos < s.gpus.size(); ++pos) {
    s.pos_of_index[s.gpus[pos].index] = static_cast<int>(pos);
  }

  pl::ModelNames names;
  std::vector<pl::NodeSpec> specs;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    Impl::Group& group = s.groups[g];
    if (group.members.size() > static_cast<size_t>(pl::kMaxGpusPerNode)) {
      return InvalidArgumentError("more than " + std::to_string(pl::kMaxGpusPerNode) + " " +
                                  s.ModelName(static_cast<int>(g)) +
                                  " GPUs on one node are not supported");
    }
    GPUFRAC_ASSIGN_OR_RETURN(group.model_id,
                             names.Intern(group.model.empty() ? "unknown-model" : group.model));
    specs.push_back({.name = "g" + std::to_string(g),
                     .cpu_milli = kHostPlenty,
                     .memory_bytes = kHostPlenty,
                     .model = group.model_id,
                     .gpu_count = static_cast<int>(group.members.size()),
                     .gpu_memory_bytes = group.memory_bytes});
  }
  GPUFRAC_ASSIGN_OR_RETURN(pl::Cluster cluster, pl::Cluster::Create(names, std::move(specs)));
  s.cluster = std::move(cluster);

  GPUFRAC_ASSIGN_OR_RETURN(s.policy, pl::PolicyWithMix::Create(s.options.policy, &*s.cluster));

  uint64_t capacity = uint64_t{kMilliPerGpu} * s.gpus.size();
  for (const QueueSpec& spec : s.config.queues) {
    Impl::Queue q;
    q.quota = static_cast<uint64_t>(
        std::llround(std::clamp(spec.quota, 0.0, 1.0) * static_cast<double>(capacity)));
    q.limited = q.quota < capacity;
    s.queues.push_back(std::move(q));
  }
  s.gpu_jobs.resize(s.gpus.size());
  s.reserved_for.resize(s.gpus.size());
  s.views.resize(s.groups.size());
  s.reserved.assign(s.groups.size(), 0);
  s.open_in_group.assign(s.groups.size(), 0);
  return std::unique_ptr<QueueScheduler>(new QueueScheduler(std::move(impl)));
}

const QueueConfig& QueueScheduler::queues() const { return impl_->config; }
const std::vector<NodeGpu>& QueueScheduler::gpus() const { return impl_->gpus; }

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
  if (s.gpus.empty()) {
    return FailedPreconditionError(FormatGpuRequest(request) +
                                   " needs a GPU that is not in MIG mode; every GPU here is");
  }
  GPUFRAC_ASSIGN_OR_RETURN(uint64_t allowed, s.AllowedGroups(request));
  uint64_t valid = 0;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    if ((allowed >> g & 1) && TranslateOnGroup(request, s.groups[g]).ok) valid |= uint64_t{1} << g;
  }
  if (valid == 0) return s.WhyNoGroupHolds(request, allowed);
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

void QueueScheduler::AddRunning(int64_t id, int queue, const std::vector<GpuShare>& shares) {
  Impl& s = *impl_;
  Dequeue(id);
  Finish(id);
  Impl::Running run;
  run.queue = queue >= 0 && queue < static_cast<int>(s.queues.size()) ? queue : -1;
  // Shares alike on GPUs of one group are one placement, as if the scheduler had made it.
  std::map<std::tuple<int, uint32_t, uint64_t>, pl::GpuSet> alike;
  for (const GpuShare& share : shares) {
    auto pos = s.pos_of_index.find(share.index);
    if (pos == s.pos_of_index.end()) continue;  // That GPU is gone.
    int slot = s.gpu_slot[pos->second];
    uint32_t milli = std::min(share.milli, kMilliPerGpu);
    alike[{s.gpu_group[pos->second], milli, share.memory_bytes}] |= pl::GpuSet{1} << slot;
    run.milli += milli;
    if (std::find(run.gpu_pos.begin(), run.gpu_pos.end(), pos->second) == run.gpu_pos.end()) {
      run.gpu_pos.push_back(pos->second);
    }
  }
  for (const auto& [key, set] : alike) {
    auto [group, milli, memory] = key;
    pl::Request r;
    r.gpu_count = static_cast<uint32_t>(std::popcount(set));
    r.gpu_milli = milli;
    r.gpu_memory_bytes = memory;
    const pl::Node& n = s.cluster->node(group);
    if (pl::PlacementFits(n, r, set)) {
      s.cluster->Apply({.node = group, .gpus = set}, r);
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
      s.cluster->Apply({.node = group, .gpus = gpu}, one);
      run.held.push_back({group, gpu, one});
    }
  }
  for (int pos : run.gpu_pos) s.gpu_jobs[pos].push_back(id);
  if (run.queue >= 0) {
    s.queues[run.queue].in_use += run.milli;
    ++s.queues[run.queue].running;
  }
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
  out.reserve(s.gpus.size());
  for (size_t pos = 0; pos < s.gpus.size(); ++pos) {
    const pl::Node& n = s.cluster->node(s.gpu_group[pos]);
    int slot = s.gpu_slot[pos];
    GpuView v;
    v.gpu = s.gpus[pos];
    v.allocated_milli = kMilliPerGpu - n.gpu_free_milli[slot];
    v.allocated_memory = n.spec.gpu_memory_bytes - n.gpu_free_memory[slot];
    v.jobs = s.gpu_jobs[pos];
    v.reserved_for = s.reserved_for[pos];
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
                   .running = q.running,
                   .milli_in_use = q.in_use,
                   .quota_milli = q.quota});
  }
  return out;
}

std::string QueueScheduler::WaitReason(int64_t id) const {
  const Impl& s = *impl_;
  auto it = s.pending.find(id);
  if (it == s.pending.end()) return "";
  const Impl::Pending& j = it->second;
  const Impl::Queue& q = s.queues[j.queue];
  const std::string& queue_name = s.config.queues[j.queue].name;
  if (s.pass == 0 || j.pass != s.pass) {
    // The last pass stopped before this job: its queue was held back, or every GPU was full
    // or reserved for jobs ahead of it.
    if (s.pass > 0 && q.blocked_pass == s.pass && q.blocked_by != j.id) {
      return "behind job " + std::to_string(q.blocked_by) + " in queue " + queue_name +
             ", which is " + s.QuotaState(q);
    }
    return "waiting for higher-priority work";
  }
  switch (j.reason) {
    case Impl::Reason::kReserved: {
      bool several = std::popcount(j.reserved_gpus) > 1;
      return std::string("waiting for GPU") + (several ? "s " : " ") +
             s.GpuList(j.reserved_group, j.reserved_gpus) + " (reserved for it)";
    }
    case Impl::Reason::kQuota:
      return "queue " + queue_name + " is " + s.QuotaState(q);
    case Impl::Reason::kBehind:
      return "behind job " + std::to_string(j.behind) + " in queue " + queue_name + ", which is " +
             s.QuotaState(q);
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
