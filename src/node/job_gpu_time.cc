// Giving the driver's per-process GPU time to jobs (see job_gpu_time.h).
#include "node/job_gpu_time.h"

#include <time.h>

#include <algorithm>
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

std::optional<JobGpuTime::Used> JobGpuTime::UsedNs(int64_t job, int gpu) const {
  if (meter_ == nullptr) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job);
  auto until = counted_until_ms_.find(gpu);
  if (it == jobs_.end() || !it->second.found || unmeasured_gpus_.count(gpu) != 0 ||
      until == counted_until_ms_.end()) {
    return std::nullopt;
  }
  auto used = it->second.used_ns.find(gpu);
  return Used{.ns = used == it->second.used_ns.end() ? 0 : used->second, .until_ms = until->second};
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
  // The driver stamps samples on the real-time clock; shares are taken on the steady one.
  timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  const int64_t real_ms = int64_t{real.tv_sec} * 1000 + real.tv_nsec / 1'000'000;
  const int64_t steady_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count();
  for (const auto& [gpu, until_us] : meter_->CountedUntilUs()) {
    if (until_us == 0) continue;
    const int64_t until_ms = steady_ms - (real_ms - static_cast<int64_t>(until_us / 1000));
    int64_t& counted = counted_until_ms_[gpu];
    counted = std::max(counted, until_ms);
  }
}

}  // namespace gpufrac::node
