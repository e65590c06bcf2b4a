#include "node/scheduling_pass.h"

#include <algorithm>
#include <array>
#include <bit>

#include "placement/fit.h"

namespace gpufrac::node {

namespace pl = ::gpufrac::placement;

SchedulingPass::SchedulingPass(const ModelGroups* groups, const pl::Cluster* cluster)
    : groups_(groups),
      cluster_(cluster),
      views_(groups->groups().size()),
      reserved_(groups->groups().size(), 0),
      open_in_group_(groups->groups().size(), 0),
      reserved_for_(groups->gpus().size()) {}

void SchedulingPass::Begin() {
  ++number_;
  open_ = 0;
  fruitless_ = 0;
  unreserved_ = static_cast<int>(groups_->gpus().size());
  for (size_t g = 0; g < views_.size(); ++g) {
    reserved_[g] = 0;
    open_in_group_[g] = 0;
    Refresh(static_cast<int>(g));
  }
  std::fill(reserved_for_.begin(), reserved_for_.end(), std::nullopt);
}

void SchedulingPass::Refresh(int g) {
  pl::Node& v = views_[g];
  v = cluster_->node(g);
  pl::Withhold(v, reserved_[g]);
  int open_here = 0;
  for (int i = 0; i < v.spec.gpu_count; ++i) {
    if (v.gpu_free_milli[i] > 0) ++open_here;
  }
  open_ += open_here - open_in_group_[g];
  open_in_group_[g] = open_here;
}

SchedulingPass::Reservation SchedulingPass::Reserve(
    int64_t id, const RequestShape& shape, uint64_t eligible, int previous_group,
    pl::GpuSet previous, const std::vector<std::vector<int64_t>>& jobs_on) {
  Reservation r;
  if (previous_group >= 0 && (eligible >> previous_group & 1) &&
      (reserved_[previous_group] & previous) == 0 &&
      std::popcount(previous) == static_cast<int>(shape.on[previous_group].request.gpu_count)) {
    r = {previous_group, previous};
  } else {
    r = Closest(shape, eligible, jobs_on);
  }
  if (r.group < 0) return r;
  reserved_[r.group] |= r.gpus;
  unreserved_ -= std::popcount(r.gpus);
  const std::vector<int>& members = groups_->groups()[r.group].members;
  for (pl::GpuSet left = r.gpus; left != 0; left &= left - 1) {
    reserved_for_[members[std::countr_zero(left)]] = id;
  }
  Refresh(r.group);
  return r;
}

SchedulingPass::Reservation SchedulingPass::Closest(
    const RequestShape& shape, uint64_t eligible,
    const std::vector<std::vector<int64_t>>& jobs_on) const {
  Reservation best;
  uint64_t best_free = 0;
  size_t best_jobs = 0;
  for (uint64_t left = eligible; left != 0; left &= left - 1) {
    int g = std::countr_zero(left);
    const pl::Node& n = cluster_->node(g);
    const std::vector<int>& members = groups_->groups()[g].members;
    int count = static_cast<int>(shape.on[g].request.gpu_count);
    if (n.spec.gpu_count - std::popcount(reserved_[g]) < count) continue;
    // The `count` unreserved GPUs with the most free share, then the fewest running jobs.
    std::array<int, pl::kMaxGpusPerNode> candidates;
    int open_slots = 0;
    for (int i = 0; i < n.spec.gpu_count; ++i) {
      if (!(reserved_[g] >> i & 1)) candidates[open_slots++] = i;
    }
    auto closer = [&](int a, int b) {
      if (n.gpu_free_milli[a] != n.gpu_free_milli[b]) {
        return n.gpu_free_milli[a] > n.gpu_free_milli[b];
      }
      size_t ja = jobs_on[members[a]].size(), jb = jobs_on[members[b]].size();
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
      jobs += jobs_on[members[candidates[k]]].size();
      pick |= pl::GpuSet{1} << candidates[k];
    }
    // Groups come smallest GPUs first, so among equals the smaller GPU keeps the job.
    if (best.group < 0 || free > best_free || (free == best_free && jobs < best_jobs)) {
      best = {g, pick};
      best_free = free;
      best_jobs = jobs;
    }
  }
  return best;
}

void SchedulingPass::Forget(int64_t id) {
  for (auto& r : reserved_for_) {
    if (r == id) r.reset();
  }
}

bool SchedulingPass::KeepGoing() const {
  return unreserved_ > 0 && (open_ > 0 || fruitless_ < kFruitlessLimit);
}

void SchedulingPass::Count(bool progress) {
  fruitless_ = progress || open_ > 0 ? 0 : fruitless_ + 1;
}

}  // namespace gpufrac::node
