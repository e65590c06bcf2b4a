// Giving the driver's per-process GPU time to jobs (see job_gpu_time.h).
#include "node/job_gpu_time.h"

#include <vector>

#include "launch/cgroup.h"

namespace gpufrac::node {

JobGpuTime::JobGpuTime(std::unique_ptr<gpu::GpuTimeMeter> meter) : meter_(std::move(meter)) {
  if (meter_ != nullptr) thread_ = std::thread([this] { Run(); });
}

JobGpuTime::~JobGpuTime() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobGpuTime::Track(int64_t job, std::string workload) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_[job].workload = std::move(workload);
}

void JobGpuTime::Forget(int64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.erase(job);
}

std::optional<uint64_t> JobGpuTime::UsedNs(int64_t job, int gpu) const {
  if (meter_ == nullptr) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || !it->second.found || unmeasured_gpus_.count(gpu) != 0) {
    return std::nullopt;
  }
  auto used = it->second.used_ns.find(gpu);
  return used == it->second.used_ns.end() ? 0 : used->second;
}

void JobGpuTime::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, kPollInterval, [this] { return stopping_; })) {
    if (jobs_.empty()) continue;  // an idle service asks the driver nothing
    lock.unlock();
    PollOnce();
    lock.lock();
  }
}

void JobGpuTime::PollOnce() {
  const std::vector<gpu::GpuTimeMeter::Use> uses = meter_->Poll();
  std::vector<std::pair<int64_t, std::string>> tracked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [job, t] : jobs_) tracked.emplace_back(job, t.workload);
  }
  // Whose process each is, read from the cgroups outside the lock.
  const auto now = std::chrono::steady_clock::now();
  std::set<int64_t> found;
  for (const auto& [job, workload] : tracked) {
    if (std::optional<launch::WorkloadCgroup> cgroup = launch::WorkloadCgroup::Find(workload)) {
      found.insert(job);
      for (pid_t pid : cgroup->Members()) owners_[pid] = {.job = job, .seen = now};
    }
  }
  std::erase_if(owners_, [&](const auto& entry) { return now - entry.second.seen > kKeepOwnerFor; });
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t job : found) {
    if (auto it = jobs_.find(job); it != jobs_.end()) it->second.found = true;
  }
  for (const gpu::GpuTimeMeter::Use& use : uses) {
    auto who = owners_.find(use.pid);
    if (who == owners_.end()) continue;
    auto job = jobs_.find(who->second.job);
    if (job != jobs_.end()) job->second.used_ns[use.gpu] += use.ns;
  }
  const std::vector<int> unmeasured = meter_->Unmeasured();
  unmeasured_gpus_ = std::set<int>(unmeasured.begin(), unmeasured.end());
}

}  // namespace gpufrac::node
