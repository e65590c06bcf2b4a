// The extender's books. Each node's non-MIG GPUs form one placement-library node per group of
// alike GPUs (model, memory, whole-only), all in one placement::Cluster that is rebuilt when the
// set of nodes or their GPUs change (rare) and into which every booking is applied, so that the
// placement Scheduler's per-node score cache answers Evaluate for thousands of nodes cheaply.
// MIG GPUs are kept as the MIG planner's slice maps, built per node when asked.
#include "k8s/ledger.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "common/compute_share.h"
#include "common/log.h"
#include "common/text.h"
#include "common/units.h"
#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"
#include "k8s/unfit_reasons.h"
#include "mig/demand.h"
#include "mig/planner.h"
#include "placement/cluster.h"
#include "placement/fit.h"
#include "placement/host_gpus.h"
#include "placement/policies.h"
#include "placement/scheduler.h"
#include "placement/workload_mix.h"

namespace gpufrac::k8s {
namespace {

namespace pl = placement;

constexpr double kPackingTieBreak = 1e-3;  // Of a score: see Decide.

// Alike GPUs of one node: one placement node.
struct Group : pl::GpuGroup {
  std::vector<int> gpus;  // Slot -> GPU index.
  int cluster_node = -1;
};

struct NodeEntry {
  NodeInventory inventory;
  std::vector<Group> groups;
  // Why the node's shared and whole GPUs are not placed at all ("" when they are): they break
  // placement::GroupHostGpus's rule (more alike GPUs than a placement node holds).
  std::string ungrouped;
  bool has_mig = false;  // Some healthy GPU in MIG mode.
};

// Who the bookings on a node's MPS GPUs run as, by GPU index.
using MpsUsers = std::map<int, std::set<std::string>>;

// What a booking took from the cluster, so that it is given back exactly.
struct Taken {
  int cluster_node;
  int slot;
  pl::Request request;
};

struct Booking {
  Assignment assignment;
  std::vector<Taken> taken;
  bool overbooked = false;
};

// A copy of a placement node in which `gpus` have nothing free.
pl::Node WithoutGpus(pl::Node n, pl::GpuSet gpus) {
  pl::Withhold(n, gpus);
  return n;
}

}  // namespace

struct Ledger::Impl {
  LedgerOptions options;
  std::unordered_map<std::string, NodeEntry> nodes;
  std::unordered_map<std::string, Booking> bookings;
  // Pods with bookings per node, for the MIG slice maps.
  std::map<std::string, std::set<std::string>> pods_on_node;

  // Built by Rebuild when `dirty`.
  bool dirty = true;
  // Bumped by every change that can change a verdict; the last Evaluate is reused while it
  // stands (kube-scheduler asks prioritize about the nodes filter just passed).
  uint64_t version = 0;
  struct LastEvaluate {
    PodRequest request;
    uint64_t version = 0;
    // The nodes asked about, as the keys of `nodes` (stable while the version stands; null for
    // a node without an entry, which never matches), and whether each fit and its score.
    std::vector<const std::string*> nodes;
    std::vector<std::pair<bool, double>> fits;
  };
  // Decide's reason for a busy node, for the container it was last built for.
  std::string busy_reason;
  const ContainerRequest* busy_reason_for = nullptr;
  std::optional<LastEvaluate> last;
  std::optional<pl::Cluster> cluster;
  // The policy and the mix of bookings it measures against, counted as they are applied.
  std::optional<pl::PolicyWithMix> policy;
  std::unique_ptr<pl::Scheduler> scheduler;
  // Recent MIG requests by profile, so the planner keeps room for what is in demand.
  mig::DemandTracker mig_demand;

  // ---- Building ----

  // The node's alike GPUs as groups; the error of placement::GroupHostGpus (the one rule for
  // more alike GPUs than a placement node holds, as gpufracd follows it) when it has too many.
  static StatusOr<std::vector<Group>> GroupsOf(const NodeInventory& inventory) {
    std::vector<int> index;  // Of each GPU placement may use.
    std::vector<pl::HostGpu> usable;
    for (const GpuInfo& gpu : inventory.gpus) {
      if (gpu.mode == GpuMode::kMig || !gpu.healthy) continue;
      index.push_back(gpu.index);
      usable.push_back({.model = gpu.model,
                        .memory_bytes = gpu.memory_bytes,
                        .context_bytes = gpu::ContextChargeBytes(gpu::FindModel(gpu.model)),
                        .whole_only = gpu.mode == GpuMode::kWhole,
                        // A share there is of one GPU, as gpufracd places it.
                        .mps = gpu.mode == GpuMode::kMps});
    }
    GPUFRAC_ASSIGN_OR_RETURN(std::vector<pl::GpuGroup> alike, pl::GroupHostGpus(usable));
    std::vector<Group> groups;
    for (pl::GpuGroup& a : alike) {
      Group g;
      static_cast<pl::GpuGroup&>(g) = std::move(a);
      for (int pos : g.members) g.gpus.push_back(index[pos]);
      groups.push_back(std::move(g));
    }
    return groups;
  }

  void Rebuild() {
    pl::ModelNames names;
    std::vector<pl::NodeSpec> specs;
    for (auto& [name, entry] : nodes) {
      for (Group& g : entry.groups) {
        StatusOr<int> model = names.Intern(g.model.empty() ? "unknown-model" : g.model);
        if (!model.ok()) {  // More than 64 models in one cluster: leave the rest out.
          g.cluster_node = -1;
          continue;
        }
        // g.model_id stays -1: the extender's requests name no model set (its groups are
        // per model already), as before the shared adapter.
        g.cluster_node = static_cast<int>(specs.size());
        specs.push_back(pl::GroupNodeSpec(name, g, *model));
      }
    }
    scheduler.reset();
    policy.reset();
    StatusOr<pl::Cluster> made = pl::Cluster::Create(std::move(names), std::move(specs));
    cluster = std::move(*made);  // The specs are valid by construction.
    policy = std::move(*pl::PolicyWithMix::Create(options.policy, &*cluster));  // Checked.
    for (auto& [pod, booking] : bookings) Apply(booking);
    policy->Refresh(0, &*cluster);  // From the bookings' mix, if the policy measures one.
    NewScheduler();
    dirty = false;
  }

  // The scheduler refers to the policy: made again whenever the policy is.
  void NewScheduler() {
    std::vector<int> rank(cluster->size());
    std::iota(rank.begin(), rank.end(), 0);
    scheduler = std::make_unique<pl::Scheduler>(&*cluster, &policy->policy(), std::move(rank));
    ++version;
  }

  void Ensure() {
    if (dirty) {
      Rebuild();
    } else if (policy->Refresh(0, &*cluster)) {
      NewScheduler();
    }
  }

  // ---- Bookings in the cluster ----

  // Where GPU `index` of `node` sits in the cluster: (cluster node, slot), or nullopt.
  std::optional<std::pair<int, int>> SlotOf(const std::string& node, int index) const {
    auto it = nodes.find(node);
    if (it == nodes.end()) return std::nullopt;
    for (const Group& g : it->second.groups) {
      if (g.cluster_node < 0) continue;
      for (size_t s = 0; s < g.gpus.size(); ++s) {
        if (g.gpus[s] == index) return std::make_pair(g.cluster_node, static_cast<int>(s));
      }
    }
    return std::nullopt;
  }

  // Takes a booking's shares (clamped to what is free, so that the books never go negative).
  void Apply(Booking& b) {
    b.taken.clear();
    b.overbooked = false;
    if (dirty && !cluster) return;
    const std::string& node = b.assignment.node;
    for (const ContainerAssignment& c : b.assignment.containers) {
      for (const GpuGrant& g : c.gpus) {
        if (g.mig) continue;  // In the MIG slice maps instead.
        std::optional<std::pair<int, int>> at = SlotOf(node, g.index);
        if (!at) {
          b.overbooked |= nodes.count(node) > 0;
          continue;
        }
        const pl::Node& n = cluster->node(at->first);
        pl::Request r;
        r.gpu_count = 1;
        r.gpu_milli = std::min(g.milli, n.gpu_free_milli[at->second]);
        r.gpu_memory_bytes = std::min(g.memory_bytes, n.gpu_free_memory[at->second]);
        if (r.gpu_milli < g.milli || r.gpu_memory_bytes < g.memory_bytes) b.overbooked = true;
        if (r.gpu_milli == 0) continue;
        pl::Placement p{at->first, pl::GpuSet{1} << at->second};
        cluster->Apply(p, r);
        policy->Count(r, +1);
        b.taken.push_back({at->first, at->second, r});
      }
    }
  }

  void Release(Booking& b) {
    if (!cluster) return;
    for (const Taken& t : b.taken) {
      cluster->Release(pl::Placement{t.cluster_node, pl::GpuSet{1} << t.slot}, t.request);
      policy->Count(t.request, -1);
    }
    b.taken.clear();
  }

  // ---- MIG slice maps ----

  std::vector<mig::MigGpu> MigGpusOf(const std::string& name, const NodeEntry& entry) const {
    std::vector<mig::MigGpu> out;
    for (const GpuInfo& gpu : entry.inventory.gpus) {
      if (gpu.mode != GpuMode::kMig || !gpu.healthy) continue;
      const gpu::MigModel* model = gpu::FindMigModel(gpu.model);
      if (model == nullptr) continue;
      mig::MigGpu g{.gpu = gpu.index, .model = model, .instances = {}};
      for (const MigInstanceInfo& m : gpu.mig) {
        const gpu::MigProfile* p = gpu::FindMigProfile(*model, m.profile);
        if (p == nullptr) continue;
        g.instances.push_back({static_cast<int>(p - model->profiles),
                               {m.start, m.size},
                               /*busy=*/!m.pod.empty()});
      }
      out.push_back(std::move(g));
    }
    auto pods = pods_on_node.find(name);
    if (pods == pods_on_node.end()) return out;
    for (const std::string& pod : pods->second) {
      for (const ContainerAssignment& c : bookings.at(pod).assignment.containers) {
        for (const GpuGrant& grant : c.gpus) {
          if (grant.mig) AddBookedInstance(out, grant);
        }
      }
    }
    return out;
  }

  // A booked MIG placement is busy whether or not the agent has created the instance yet.
  static void AddBookedInstance(std::vector<mig::MigGpu>& gpus, const GpuGrant& grant) {
    for (mig::MigGpu& g : gpus) {
      if (g.gpu != grant.index) continue;
      const gpu::MigProfile* p = gpu::FindMigProfile(*g.model, grant.mig->profile);
      if (p == nullptr) return;
      int profile = static_cast<int>(p - g.model->profiles);
      for (mig::Instance& i : g.instances) {
        if (i.profile == profile && i.placement.start == grant.mig->start) {
          i.busy = true;
          return;
        }
      }
      // Idle instances in its way will be destroyed by the agent when it creates this one.
      std::erase_if(g.instances, [&](const mig::Instance& i) {
        return !i.busy && i.placement.start < grant.mig->start + grant.mig->size &&
               grant.mig->start < i.placement.start + i.placement.size;
      });
      g.instances.push_back({profile, {grant.mig->start, grant.mig->size}, true});
      return;
    }
  }

  // ---- MPS GPUs: one user at a time ----

  MpsUsers MpsUsersOf(const std::string& name) const {
    MpsUsers users;
    auto pods = pods_on_node.find(name);
    if (pods == pods_on_node.end()) return users;
    for (const std::string& pod : pods->second) {
      for (const ContainerAssignment& c : bookings.at(pod).assignment.containers) {
        if (c.mps_user.empty()) continue;
        for (const GpuGrant& g : c.gpus) {
          if (!g.mig) users[g.index].insert(c.mps_user);
        }
      }
    }
    return users;
  }

  // The slots of MPS group `g` held by a user other than `user`.
  static pl::GpuSet HeldByOthers(const Group& g, const MpsUsers& users, const std::string& user) {
    pl::GpuSet held = 0;
    for (size_t s = 0; s < g.gpus.size(); ++s) {
      auto it = users.find(g.gpus[s]);
      if (it == users.end()) continue;
      for (const std::string& other : it->second) {
        if (other != user) held |= pl::GpuSet{1} << s;
      }
    }
    return held;
  }

  // ---- Decisions ----

  struct Outcome {
    bool fits = false;
    double score = 0;
    std::string reason;
    Assignment assignment;  // Filled when `choose`.
  };

  // What one Decide works on: the node, and for a pod of several containers copies of its
  // placement nodes, on which each container is taken before the next is placed (they must fit
  // together). Who holds the MPS GPUs and the MIG slice maps are read when first needed.
  struct Pass {
    const std::string& name;
    const NodeEntry& entry;
    bool single;                  // The pod has one container: judged on the cluster itself.
    std::vector<pl::Node> views;  // By group; for a pod of several containers.
    std::optional<MpsUsers> mps_users;
    std::optional<std::vector<mig::MigGpu>> mig_gpus;
  };

  Pass StartPass(const std::string& name, const NodeEntry& entry, const PodRequest& request) {
    Pass pass{name, entry, request.containers.size() == 1, {}, std::nullopt, std::nullopt};
    if (!pass.single) {
      for (const Group& g : entry.groups) {
        pass.views.push_back(g.cluster_node >= 0 ? cluster->node(g.cluster_node) : pl::Node{});
      }
    }
    return pass;
  }

  MpsUsers& UsersOf(Pass& pass) const {
    if (!pass.mps_users) pass.mps_users = MpsUsersOf(pass.name);
    return *pass.mps_users;
  }

  // The placement node a container of the pass is judged on: the cluster's, or the pod's copy.
  const pl::Node& NodeOf(const Pass& pass, int group) const {
    const Group& g = pass.entry.groups[group];
    return pass.single ? cluster->node(g.cluster_node) : pass.views[group];
  }

  // A container's best group of shared or whole GPUs by the policy's score, and what the search
  // learnt for the reason when there is none.
  struct GroupChoice {
    int group = -1;  // -1: none has room now.
    double score = 0;
    pl::Request request;          // What it takes on each GPU there.
    pl::GpuSet held = 0;          // The group's MPS GPUs that serve other users.
    bool could_ever = false;      // Some group could hold it were it free.
    bool held_by_others = false;  // It would fit on MPS GPUs that other users hold.
    bool unenforced = false;      // A share it may not have: the pod can remove the limits.
  };

  GroupChoice BestGroup(Pass& pass, const ContainerRequest& c, const PodRequest& request) {
    GroupChoice best;
    for (size_t gi = 0; gi < pass.entry.groups.size(); ++gi) {
      const Group& g = pass.entry.groups[gi];
      if (g.cluster_node < 0) continue;
      std::optional<pl::Request> p = pl::RequestOnGroup(c.request, g);
      if (!p) continue;
      if (p->gpu_milli < pl::kMilli && !request.unenforced.empty()) {
        best.unenforced = true;
        continue;
      }
      best.could_ever = true;
      const pl::Node& whole = NodeOf(pass, static_cast<int>(gi));
      const pl::GpuSet held = g.mps ? HeldByOthers(g, UsersOf(pass), c.run_as) : 0;
      std::optional<double> score;
      if (held != 0) {  // Rare (MPS GPUs of several users): judged on a copy.
        const pl::Node view = WithoutGpus(whole, held);
        if (pl::Fits(view, *p)) {
          score = policy->policy().Score(view, *p);
        } else if (pl::Fits(whole, *p)) {
          best.held_by_others = true;
        }
      } else if (pass.single) {
        score = scheduler->Score(g.cluster_node, *p);
      } else if (pl::Fits(whole, *p)) {
        score = policy->policy().Score(whole, *p);
      }
      if (score && (best.group < 0 || *score > best.score)) {
        best.group = static_cast<int>(gi);
        best.score = *score;
        best.request = *p;
        best.held = held;
      }
    }
    return best;
  }

  // Gives `c` the GPUs of its chosen group, takes them on the pod's copy so that its later
  // containers see them taken, and fills `granted` when `choose`. (A filter of a pod of one
  // container needs only the score: not called.)
  void TakeGroup(Pass& pass, const ContainerRequest& c, const GroupChoice& best, bool choose,
                 ContainerAssignment& granted) {
    const Group& g = pass.entry.groups[best.group];
    const pl::Node& n = NodeOf(pass, best.group);
    const pl::GpuSet gpus =
        policy->policy().ChooseGpus(best.held != 0 ? WithoutGpus(n, best.held) : n, best.request);
    if (!pass.single) pl::Take(pass.views[best.group], gpus, best.request);
    for (size_t s = 0; s < g.gpus.size(); ++s) {
      if (!(gpus >> s & 1)) continue;
      granted.gpus.push_back({.index = g.gpus[s],
                              .uuid = UuidOf(pass.entry, g.gpus[s]),
                              .milli = best.request.gpu_milli,
                              .memory_bytes = best.request.gpu_memory_bytes,
                              .mig = std::nullopt});
      // Later containers of the pod see the GPU taken by this one's user.
      if (g.mps) UsersOf(pass)[g.gpus[s]].insert(c.run_as);
    }
    if (g.mps) granted.mps_user = c.run_as;
    // Only a share has a compute limit and pair (a whole GPU has all of its time).
    if (choose && best.request.gpu_milli < pl::kMilli) {
      granted.compute_limit_milli = c.request.compute_limit_milli;
      DecideComputePairs(pass.entry, granted);
    }
  }

  // The pair of each of the container's shares, by the node's policy, decided once here and
  // carried in the assignment; none where the node's agent publishes no policy (it decides them).
  static void DecideComputePairs(const NodeEntry& entry, ContainerAssignment& granted) {
    if (!entry.inventory.compute_policy) return;
    for (GpuGrant& g : granted.gpus) {
      g.compute =
          DecideComputePair(g.milli, granted.compute_limit_milli, *entry.inventory.compute_policy);
    }
  }

  // Dynamic MIG: a MIG profile, or one GPU's memory or fraction, on a GPU in MIG mode. True when
  // placed (the grant in `granted`, and the instance busy for the pod's later containers); else
  // sets `could_ever` when some MIG GPU here could hold it once free.
  bool PlaceOnMig(Pass& pass, const ContainerRequest& c, ContainerAssignment& granted,
                  bool& could_ever) {
    if (c.request.gpus != 1 || c.request.kind == GpuRequest::Kind::kWholeGpus) return false;
    if (!pass.mig_gpus) {
      pass.mig_gpus =
          pass.entry.has_mig ? MigGpusOf(pass.name, pass.entry) : std::vector<mig::MigGpu>{};
    }
    std::vector<mig::MigGpu>& gpus = *pass.mig_gpus;
    if (gpus.empty()) return false;
    StatusOr<mig::Plan> plan =
        mig::PlanRequest(gpus, c.request, mig::PlacementRule::kGpufrac, mig_demand.demand());
    if (!plan.ok()) {
      for (const mig::MigGpu& g : gpus) {
        if (WhyNeverOnMig(c, *g.model).empty()) could_ever = true;
      }
      return false;
    }
    const mig::MigGpu& g = *std::find_if(gpus.begin(), gpus.end(),
                                         [&](const mig::MigGpu& m) { return m.gpu == plan->gpu; });
    const gpu::MigProfile& profile = g.model->profiles[plan->profile];
    GpuGrant grant{.index = plan->gpu,
                   .uuid = UuidOf(pass.entry, plan->gpu),
                   .milli = mig::ProfileMilli(*g.model, profile),
                   .memory_bytes = profile.memory_bytes,
                   .mig = MigGrant{gpu::MigProfileName(*g.model, profile), plan->placement.start,
                                   plan->placement.size}};
    AddBookedInstance(gpus, grant);
    granted.gpus.push_back(std::move(grant));
    return true;
  }

  // Why `c` fits nowhere on the node, from what the search learnt.
  std::string WhyNot(const Pass& pass, const ContainerRequest& c, const PodRequest& request,
                     const GroupChoice& search) {
    if (search.unenforced && !search.could_ever) return UnenforcedMessage(request.unenforced);
    if (search.could_ever && !search.held_by_others) {
      // The same words for every busy node: built once per request (thousands of nodes may be
      // full).
      if (busy_reason_for != &c) {
        busy_reason = Which(c) + "not enough free GPU capacity on this node now";
        busy_reason_for = &c;
      }
      return busy_reason;
    }
    if (search.held_by_others) {
      return Which(c) +
             "the MPS GPUs with room on this node serve other users' containers, and an MPS GPU "
             "serves one user at a time (this container runs as " +
             c.run_as + ")";
    }
    return Which(c) + "no GPU on this node can hold it: " + WhyNeverHere(pass.entry, c);
  }

  // "container main (4 GiB of one GPU): ", the start of a reason about `c`.
  static std::string Which(const ContainerRequest& c) {
    return "container " + c.container + " (" + DescribeRequest(c) + "): ";
  }

  // Whether `request` fits node `name`, its score, and with `choose` the exact GPUs: each
  // container on its best group of shared or whole GPUs, else on a MIG GPU; the first that
  // fits nowhere says why.
  Outcome Decide(const std::string& name, const NodeEntry& entry, const PodRequest& request,
                 bool choose) {
    Outcome out;
    if (choose) {
      out.assignment.node = name;
      out.assignment.compute_policy = entry.inventory.compute_policy;
    }
    Pass pass = StartPass(name, entry, request);
    for (const ContainerRequest& c : request.containers) {
      ContainerAssignment granted;
      if (choose) {
        granted.container = c.container;
        granted.device_plugin = c.device_plugin;
      }
      GroupChoice best = BestGroup(pass, c, request);
      bool placed = best.group >= 0;
      if (placed) {
        out.score += best.score;
        if (choose || !pass.single) TakeGroup(pass, c, best, choose, granted);
      } else {
        placed = PlaceOnMig(pass, c, granted, best.could_ever);
      }
      if (!placed) {
        out.reason = WhyNot(pass, c, request, best);
        return out;
      }
      if (choose) out.assignment.containers.push_back(std::move(granted));
    }
    out.fits = true;
    // Below the policies' resolution (their scores step by whole points): among nodes they score
    // alike, the busier one, so that shares pack onto nodes already in use and whole nodes stay
    // free (the policy's coarse ties would otherwise leave it to kube-scheduler's own scores).
    if (!choose) out.score += kPackingTieBreak * BookedShare(entry);
    return out;
  }

  // The share of the capacity of the node's shared and whole GPUs that is booked, 0 to 1.
  double BookedShare(const NodeEntry& entry) const {
    double total = 0, free = 0;
    for (const Group& g : entry.groups) {
      if (g.cluster_node < 0) continue;
      const pl::Node& n = cluster->node(g.cluster_node);
      for (int s = 0; s < n.spec.gpu_count; ++s) {
        total += pl::kMilli;
        free += n.gpu_free_milli[s];
      }
    }
    return total > 0 ? (total - free) / total : 0;
  }

  static std::string UuidOf(const NodeEntry& entry, int index) {
    const GpuInfo* g = FindGpu(entry.inventory, index);
    return g != nullptr ? g->uuid : "";
  }

  // Why `c` can run on no GPU of the node, kind by kind: "2 x H100-80GB shared: <why>; 1 x
  // H100-80GB mig: <why>" (unsafe for a busy node: only when it could never run there).
  static std::string WhyNeverHere(const NodeEntry& entry, const ContainerRequest& c) {
    std::vector<std::pair<std::string, std::string>> kinds;  // kind -> why
    std::vector<int> counts;
    for (const GpuInfo& g : entry.inventory.gpus) {
      const std::string kind = (g.model.empty() ? "unknown GPU" : g.model) + " " +
                               std::string(GpuModeName(g.mode)) + (g.healthy ? "" : " unhealthy");
      auto it = std::find_if(kinds.begin(), kinds.end(), [&](auto& k) { return k.first == kind; });
      if (it != kinds.end()) {
        ++counts[it - kinds.begin()];
        continue;
      }
      std::string why = "unhealthy";
      if (g.healthy && g.mode == GpuMode::kMig) {
        const gpu::MigModel* model = gpu::FindMigModel(g.model);
        why = model ? WhyNeverOnMig(c, *model)
                    : "in MIG mode, of a model gpufrac has no MIG facts of";
      } else if (g.healthy) {
        why = entry.ungrouped;  // Its GPUs are in no group when there is a reason.
        for (const Group& group : entry.groups) {
          if (std::find(group.gpus.begin(), group.gpus.end(), g.index) != group.gpus.end()) {
            why = WhyNeverOnGroup(c, group);
          }
        }
      }
      kinds.emplace_back(kind, why);
      counts.push_back(1);
    }
    std::string s;
    for (size_t i = 0; i < kinds.size(); ++i) {
      s += (i ? "; " : "") + std::to_string(counts[i]) + " x " + kinds[i].first + ": " +
           kinds[i].second;
    }
    return s.empty() ? "it has no GPUs" : s;
  }
};

Ledger::Ledger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Ledger::~Ledger() = default;

StatusOr<std::unique_ptr<Ledger>> Ledger::Create(LedgerOptions options) {
  // Checked here so that making the policy cannot fail later.
  if (pl::FindPolicy(options.policy) == nullptr) {
    return InvalidArgumentError("unknown policy \"" + options.policy + "\"; choose one of " +
                                pl::PolicyNameList());
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  return std::unique_ptr<Ledger>(new Ledger(std::move(impl)));
}

void Ledger::SetNode(const std::string& node, const NodeInventory& inventory) {
  auto it = impl_->nodes.find(node);
  if (it != impl_->nodes.end() && it->second.inventory == inventory) return;
  bool has_mig = std::any_of(inventory.gpus.begin(), inventory.gpus.end(),
                             [](const GpuInfo& g) { return g.mode == GpuMode::kMig && g.healthy; });
  StatusOr<std::vector<Group>> groups = Impl::GroupsOf(inventory);
  NodeEntry& entry = impl_->nodes[node] = NodeEntry{inventory, {}, "", has_mig};
  if (groups.ok()) {
    entry.groups = std::move(*groups);
  } else {
    entry.ungrouped = groups.status().message();
    LogWarning("node %s: its shared and whole GPUs are not offered: %s", node.c_str(),
               entry.ungrouped.c_str());
  }
  impl_->dirty = true;
  ++impl_->version;
}

void Ledger::RemoveNode(const std::string& node) {
  if (impl_->nodes.erase(node) > 0) {
    impl_->dirty = true;
    ++impl_->version;
  }
}

bool Ledger::HasNode(const std::string& node) const { return impl_->nodes.count(node) > 0; }

std::optional<NodeInventory> Ledger::InventoryOf(const std::string& node) const {
  auto it = impl_->nodes.find(node);
  if (it == impl_->nodes.end()) return std::nullopt;
  return it->second.inventory;
}

void Ledger::Book(const std::string& pod, const Assignment& assignment) {
  // Watches report every change of a pod; most leave its booking as it was.
  auto held = impl_->bookings.find(pod);
  if (held != impl_->bookings.end() && held->second.assignment == assignment) return;
  Unbook(pod);
  Booking& b = impl_->bookings[pod];
  b.assignment = assignment;
  impl_->pods_on_node[assignment.node].insert(pod);
  if (!impl_->dirty) impl_->Apply(b);
  if (impl_->policy) impl_->policy->NoteChange();
  ++impl_->version;
}

bool Ledger::Unbook(const std::string& pod) {
  auto it = impl_->bookings.find(pod);
  if (it == impl_->bookings.end()) return false;
  if (!impl_->dirty) impl_->Release(it->second);
  auto on = impl_->pods_on_node.find(it->second.assignment.node);
  if (on != impl_->pods_on_node.end()) {
    on->second.erase(pod);
    // An overbooked neighbour holds more than the books counted for it (they were clamped to
    // what was free): now that there is room, count it again from scratch.
    for (const std::string& other : on->second) {
      if (impl_->bookings.at(other).overbooked) impl_->dirty = true;
    }
    if (on->second.empty()) impl_->pods_on_node.erase(on);
  }
  impl_->bookings.erase(it);
  if (impl_->policy) impl_->policy->NoteChange();
  ++impl_->version;
  return true;
}

std::optional<Assignment> Ledger::BookingOf(const std::string& pod) const {
  auto it = impl_->bookings.find(pod);
  if (it == impl_->bookings.end()) return std::nullopt;
  return it->second.assignment;
}

std::vector<std::string> Ledger::PodsOn(const std::string& node) const {
  auto it = impl_->pods_on_node.find(node);
  if (it == impl_->pods_on_node.end()) return {};
  return {it->second.begin(), it->second.end()};
}

size_t Ledger::booking_count() const { return impl_->bookings.size(); }

std::vector<Ledger::Verdict> Ledger::Evaluate(const PodRequest& request,
                                              const std::vector<std::string>& nodes) {
  if (request.empty()) {  // Not ours to judge: every node will do.
    return std::vector<Verdict>(nodes.size(), Verdict{true, 0, ""});
  }
  impl_->Ensure();
  impl_->busy_reason_for = nullptr;
  std::vector<Verdict> out(nodes.size());
  // The same pod on the same books, about nodes the last call was asked about in the same
  // order (kube-scheduler's prioritize after filter): those that fit keep their answers; the
  // others are decided again, for their reasons.
  std::vector<bool> known(nodes.size(), false);
  if (const auto& last = impl_->last;
      last && last->version == impl_->version && last->request == request) {
    size_t j = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      while (j < last->nodes.size() && (last->nodes[j] == nullptr || *last->nodes[j] != nodes[i])) {
        ++j;
      }
      if (j == last->nodes.size()) break;
      auto [fits, score] = last->fits[j++];
      if (fits) {
        out[i] = {true, score, ""};
        known[i] = true;
      }
    }
  }
  std::vector<const std::string*> keys(nodes.size(), nullptr);
  std::vector<std::pair<bool, double>> fits(nodes.size(), {false, 0});
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto it = impl_->nodes.find(nodes[i]);
    if (it == impl_->nodes.end()) {
      out[i].reason = "no gpufrac agent has published this node's GPUs";
      continue;
    }
    keys[i] = &it->first;
    if (!known[i]) {
      Impl::Outcome o = impl_->Decide(it->first, it->second, request, /*choose=*/false);
      out[i] = {o.fits, o.score, std::move(o.reason)};
    }
    fits[i] = {out[i].fits, out[i].score};
  }
  impl_->last = Impl::LastEvaluate{request, impl_->version, std::move(keys), std::move(fits)};
  return out;
}

StatusOr<Assignment> Ledger::Choose(const PodRequest& request, const std::string& node) {
  impl_->Ensure();
  impl_->busy_reason_for = nullptr;
  auto it = impl_->nodes.find(node);
  if (it == impl_->nodes.end()) {
    return NotFoundError("node " + node + ": no gpufrac agent has published its GPUs");
  }
  if (it->second.has_mig) {
    std::vector<const gpu::MigModel*> models;
    for (const GpuInfo& g : it->second.inventory.gpus) {
      if (g.mode == GpuMode::kMig) models.push_back(gpu::FindMigModel(g.model));
    }
    for (const ContainerRequest& c : request.containers) {
      if (c.request.gpus == 1 && c.request.kind != GpuRequest::Kind::kWholeGpus) {
        impl_->mig_demand.Observe(c.request, models);
      }
    }
    ++impl_->version;
  }
  Impl::Outcome o = impl_->Decide(it->first, it->second, request, /*choose=*/true);
  if (!o.fits) return ResourceExhaustedError("node " + node + ": " + o.reason);
  return o.assignment;
}

std::vector<std::string> Ledger::Overbooked() const {
  impl_->Ensure();
  std::vector<std::string> out;
  for (const auto& [pod, b] : impl_->bookings) {
    if (b.overbooked) out.push_back(pod);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gpufrac::k8s
