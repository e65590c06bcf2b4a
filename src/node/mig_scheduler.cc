// The MIG lane of the node service (see mig_scheduler.h): queue order, the planner's choice,
// and the driver as the record of which instances exist.
#include "node/mig_scheduler.h"

#include <algorithm>
#include <tuple>

#include "common/log.h"
#include "common/units.h"

namespace gpufrac::node {
namespace {

std::string SlicesText(gpu::MigPlacement p) {
  return std::to_string(p.start) + "-" + std::to_string(p.start + p.size - 1);
}

}  // namespace

MigScheduler::MigScheduler(std::vector<MigGpuSpec> gpus, mig::MigBackend* backend)
    : gpus_(std::move(gpus)), backend_(backend) {}

Status MigScheduler::CheckFeasible(const GpuRequest& request) const {
  if (gpus_.empty()) {
    return FailedPreconditionError(FormatGpuRequest(request) +
                                   " needs a GPU in MIG mode; no GPU on this node is");
  }
  Status last = FailedPreconditionError("--gpu-model " + request.gpu_model +
                                        ": no GPU of that model is in MIG mode here");
  for (const MigGpuSpec& g : gpus_) {
    if (!request.gpu_model.empty() &&
        !(g.model->model &&
          gpu::NamesEqualIgnoringCase(g.model->model->short_name, request.gpu_model))) {
      continue;
    }
    auto profile = mig::SmallestProfile(*g.model, request);
    if (profile.ok()) return OkStatus();
    last = profile.status();
  }
  return last;
}

void MigScheduler::Enqueue(int64_t id, int queue, const GpuRequest& request, int64_t submitted_ms) {
  Pending p{id, queue, request, submitted_ms};
  std::vector<const gpu::MigModel*> models;
  for (const MigGpuSpec& g : gpus_) models.push_back(g.model);
  demand_.Observe(request, models);
  auto before = [](const Pending& a, const Pending& b) {
    return std::tie(a.queue, a.submitted_ms, a.id) < std::tie(b.queue, b.submitted_ms, b.id);
  };
  pending_.insert(std::upper_bound(pending_.begin(), pending_.end(), p, before), p);
}

bool MigScheduler::Dequeue(int64_t id) {
  auto it =
      std::find_if(pending_.begin(), pending_.end(), [id](const Pending& p) { return p.id == id; });
  if (it == pending_.end()) return false;
  pending_.erase(it);
  waiting_.erase(id);
  return true;
}

void MigScheduler::AddRunning(int64_t id, int gpu, const std::string& uuid) {
  busy_[uuid] = id;
  running_[id] = {gpu, uuid};
}

bool MigScheduler::Busy(int gpu) const {
  for (const auto& [job, where] : running_) {
    if (where.gpu == gpu) return true;
  }
  return false;
}

bool MigScheduler::Finish(int64_t id) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  busy_.erase(it->second.uuid);
  running_.erase(it);
  return true;
}

// The driver's instances as a pass sees them: the planner's view and, per GPU and instance,
// the driver's record and whether a process gpufrac did not start holds it. Instances are in the
// order List gave them, so that a plan's indexes name the same instances in `found`.
struct MigScheduler::DriverView {
  std::vector<mig::MigGpu> state;
  std::vector<std::vector<mig::MigBackend::InstanceInfo>> found;
  std::vector<std::vector<bool>> foreign;
  std::map<std::string, std::vector<unsigned>> foreign_now;  // MIG UUID -> pids.
};

void MigScheduler::ReadGpu(size_t g, DriverView& view) {
  auto list = backend_->List(gpus_[g].index);
  if (!list.ok()) {
    LogWarning("MIG GPU %d: %s", gpus_[g].index, list.status().message().c_str());
    list = std::vector<mig::MigBackend::InstanceInfo>{};
  }
  mig::MigGpu gpu{gpus_[g].index, gpus_[g].model, {}};
  std::vector<mig::MigBackend::InstanceInfo> usable;
  view.foreign[g].clear();
  for (const mig::MigBackend::InstanceInfo& info : *list) {
    // An instance without a compute instance (a creation cut short) can run nothing: clear it
    // away rather than hand it to a job. If the driver refuses, keep clear of it.
    if (info.uuid.empty() && !info.in_use && backend_->Destroy(gpus_[g].index, info.gi_id).ok()) {
      continue;
    }
    const bool ours = busy_.count(info.uuid) > 0;
    // A process we did not start (by hand, or a job whose record was lost) shares nothing with a
    // new job and loses nothing to us: the instance is as busy as one of our own.
    const bool stranger = info.in_use && !ours;
    bool busy =
        info.uuid.empty() || ours || stranger || refused_.count({gpus_[g].index, info.gi_id}) > 0;
    if (stranger) {
      view.foreign_now[info.uuid] = info.pids;
      auto seen = foreign_.find(info.uuid);
      if (seen == foreign_.end() || seen->second != info.pids) {
        LogInfo(
            "MIG GPU %d: %s instance at slices %s (%s) is %s; it is neither reused nor "
            "destroyed while that runs",
            gpus_[g].index,
            gpu::MigProfileName(*gpus_[g].model, gpus_[g].model->profiles[info.profile]).c_str(),
            SlicesText(info.placement).c_str(), info.uuid.c_str(),
            mig::ForeignUseText(info.pids).c_str());
      }
    }
    gpu.instances.push_back({info.profile, info.placement, busy});
    view.foreign[g].push_back(stranger);
    usable.push_back(info);
  }
  view.state[g] = gpu;
  view.found[g] = std::move(usable);
}

MigScheduler::DriverView MigScheduler::ReadDriver() {
  DriverView view;
  view.state.resize(gpus_.size());
  view.found.resize(gpus_.size());
  view.foreign.resize(gpus_.size());
  refused_.clear();
  for (size_t g = 0; g < gpus_.size(); ++g) ReadGpu(g, view);
  foreign_ = view.foreign_now;
  return view;
}

// Why a job that cannot be planned waits, when instances holding strangers' processes are in its
// way: plans again as if they were idle, and names those the plan would have reused or destroyed.
std::string MigScheduler::BlockedByStrangers(const DriverView& view,
                                             const GpuRequest& request) const {
  std::vector<mig::MigGpu> relaxed = view.state;
  bool any = false;
  for (size_t g = 0; g < relaxed.size(); ++g) {
    for (size_t k = 0; k < relaxed[g].instances.size(); ++k) {
      if (!view.foreign[g][k]) continue;
      relaxed[g].instances[k].busy = refused_.count({gpus_[g].index, view.found[g][k].gi_id}) > 0;
      any = true;
    }
  }
  if (!any) return "";
  auto plan = mig::PlanRequest(relaxed, request, mig::PlacementRule::kGpufrac, demand_.demand());
  if (!plan.ok()) return "";
  size_t g = GpuPosition(plan->gpu);
  std::vector<int> touched = plan->destroy;
  if (plan->reuse) touched.push_back(*plan->reuse);
  std::string named;
  for (int k : touched) {
    if (!view.foreign[g][k]) continue;
    const mig::MigBackend::InstanceInfo& info = view.found[g][k];
    named += std::string(named.empty() ? "" : "; ") + "the " +
             gpu::MigProfileName(*gpus_[g].model, gpus_[g].model->profiles[info.profile]) +
             " instance on GPU " + std::to_string(plan->gpu) + " (slices " +
             SlicesText(info.placement) + ", " + info.uuid + ") is " +
             mig::ForeignUseText(info.pids);
  }
  if (named.empty()) return "";
  return named + "; gpufrac leaves it alone until that ends";
}

size_t MigScheduler::GpuPosition(int index) const {
  size_t g = 0;
  while (g < gpus_.size() && gpus_[g].index != index) ++g;
  return g;
}

// Carries out `plan`: the instance to reuse, or destroys those in its way and creates one. The
// new instance's UUID, or the driver's error; `replan` when an instance turned out to be in use
// (it is then off limits for this pass and the job can be planned again around it).
StatusOr<std::string> MigScheduler::Realise(const mig::Plan& plan, const DriverView& view,
                                            bool* replan) {
  const size_t g = GpuPosition(plan.gpu);
  if (plan.reuse) return view.found[g][*plan.reuse].uuid;
  for (int victim : plan.destroy) {
    Status failed = backend_->Destroy(plan.gpu, view.found[g][victim].gi_id);
    if (!failed.ok()) {
      refused_.insert({plan.gpu, view.found[g][victim].gi_id});
      *replan = true;
      return failed;
    }
  }
  GPUFRAC_ASSIGN_OR_RETURN(mig::MigBackend::InstanceInfo created,
                           backend_->Create(plan.gpu, plan.profile, plan.placement));
  return created.uuid;
}

std::vector<MigScheduler::Start> MigScheduler::Schedule() {
  waiting_.clear();
  std::vector<Start> started;
  if (pending_.empty()) return started;
  DriverView view = ReadDriver();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto plan =
        mig::PlanRequest(view.state, it->request, mig::PlacementRule::kGpufrac, demand_.demand());
    if (!plan.ok()) {
      std::string strangers;
      if (plan.status().code() == StatusCode::kResourceExhausted) {
        strangers = BlockedByStrangers(view, it->request);
      }
      waiting_[it->id] =
          strangers.empty() ? plan.status().message() : plan.status().message() + "; " + strangers;
      ++it;
      continue;
    }
    const size_t g = GpuPosition(plan->gpu);
    bool replan = false;
    StatusOr<std::string> uuid = Realise(*plan, view, &replan);
    if (!uuid.ok()) {
      waiting_[it->id] = uuid.status().message();
      ReadGpu(g, view);
      if (!replan) ++it;
      continue;
    }
    const gpu::MigProfile& profile = gpus_[g].model->profiles[plan->profile];
    busy_[*uuid] = it->id;
    running_[it->id] = {plan->gpu, *uuid};
    started.push_back({it->id, plan->gpu, *uuid, profile.memory_bytes,
                       mig::ProfileMilli(*gpus_[g].model, profile),
                       gpu::MigProfileName(*gpus_[g].model, profile)});
    ReadGpu(g, view);  // Now with the instance busy: later jobs of this pass see it taken.
    it = pending_.erase(it);
  }
  return started;
}

std::vector<MigScheduler::SliceView> MigScheduler::Slices() {
  std::vector<SliceView> out;
  for (const MigGpuSpec& g : gpus_) {
    SliceView view;
    view.gpu = g.index;
    view.model = std::string(g.model->model ? g.model->model->short_name : "");
    view.memory_slices = g.model->memory_slices;
    auto list = backend_->List(g.index);
    if (list.ok()) {
      for (const mig::MigBackend::InstanceInfo& info : *list) {
        auto busy = busy_.find(info.uuid);
        view.instances.push_back({gpu::MigProfileName(*g.model, g.model->profiles[info.profile]),
                                  info.placement, info.uuid, busy == busy_.end() ? 0 : busy->second,
                                  info.in_use, info.pids});
      }
    }
    out.push_back(std::move(view));
  }
  return out;
}

std::string MigScheduler::WaitReason(int64_t id) const {
  auto it = waiting_.find(id);
  if (it != waiting_.end()) return it->second;
  for (const Pending& p : pending_) {
    if (p.id == id) return "waiting for a MIG instance";
  }
  return "";
}

}  // namespace gpufrac::node
