// Watching and holding jobs' compute shares from outside (see compute_watch.h).
#include "node/compute_watch.h"

#include <cstdio>

namespace gpufrac::node {
namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Format(const char* format, double a, double b, double c) {
  char text[200];
  std::snprintf(text, sizeof(text), format, a, b, c);
  return text;
}

}  // namespace

ComputeWatch::ComputeWatch(const JobGpuTime& gpu_time, bool enforce, HoldsTurn holds_turn,
                           std::function<void(bool warning, const std::string&)> log)
    : gpu_time_(gpu_time),
      holds_turn_(std::move(holds_turn)),
      log_(std::move(log)),
      guard_(enforce) {
  thread_ = std::thread([this] { Run(); });
}

ComputeWatch::~ComputeWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [job, w] : jobs_) SetFrozen(w, false);
  }
  stop_cv_.notify_all();
  thread_.join();
}

void ComputeWatch::Track(int64_t job, std::string workload, std::map<int, ArbitratedGpu> gpus) {
  if (gpus.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Watched& w = jobs_[job];
  w.workload = std::move(workload);
  w.gpus = std::move(gpus);
  w.cgroup = launch::WorkloadCgroup::Find(w.workload);  // none: a service without cgroups
  // A job re-adopted after a service stopped while holding it is thawed first (where nothing
  // can freeze, nothing was frozen: no word).
  if (w.cgroup) (void)w.cgroup->Freeze(false);
  w.frozen = false;
}

void ComputeWatch::Forget(int64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  SetFrozen(it->second, false);
  jobs_.erase(it);
  guard_.Forget(job);
}

std::optional<ComputeGuard::Verdict> ComputeWatch::Of(int64_t job, int gpu) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<ComputeGuard::Verdict> verdict = guard_.Of(job, gpu);
  // What is held is what the service does, not what the guard asks for.
  auto it = jobs_.find(job);
  if (verdict && (it == jobs_.end() || it->second.cannot_hold)) verdict->held = 0;
  return verdict;
}

void ComputeWatch::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, kTick, [this] { return stopping_; })) {
    if (jobs_.empty()) continue;
    Judge();
    Hold(SteadyMs());
  }
}

void ComputeWatch::Judge() {
  // Each GPU's jobs, with the driver's totals counted up to one time for all of them.
  std::map<int, std::vector<ComputeGuard::Workload>> by_gpu;
  std::map<int, int64_t> until;
  for (const auto& [job, w] : jobs_) {
    for (const auto& [gpu, arbitrated] : w.gpus) {
      std::optional<JobGpuTime::Used> used = gpu_time_.UsedNs(job, gpu);
      if (!used) continue;  // not measured (yet): neither judged nor counted as a neighbour
      by_gpu[gpu].push_back({.job = job, .compute = arbitrated.compute, .used_ns = used->ns});
      until[gpu] = std::max(until[gpu], used->until_ms);
    }
  }
  for (const auto& [gpu, workloads] : by_gpu) guard_.Observe(gpu, until[gpu], workloads);
  for (auto& [job, w] : jobs_) {
    for (const auto& [gpu, arbitrated] : w.gpus) {
      const ComputePair& pair = arbitrated.compute;
      std::optional<ComputeGuard::Verdict> v = guard_.Of(job, gpu);
      if (!v || v->over == w.logged) continue;
      const std::string who = "job " + std::to_string(job) + " ";
      const std::string where = " on GPU " + std::to_string(gpu);
      if (v->over == ComputeGuard::Over::kNo) {
        log_(false, who + "is within its compute share again" + where +
             Format(" (it used %.2f of the GPU's time)", v->used, 0, 0));
      } else {
        log_(true, who + "is over its compute " + OverName(v->over) + where +
             Format(": it used %.2f of the GPU's time for a request of %.2f and a limit of %.2f",
                    v->used, pair.request_milli / 1000.0, pair.limit_milli / 1000.0));
      }
      w.logged = v->over;
    }
  }
}

void ComputeWatch::Hold(int64_t now_ms) {
  for (auto& [job, w] : jobs_) {
    if (w.cannot_hold) continue;
    // Each job's cycle starts at its own time, so that two held jobs are not frozen together.
    const int64_t phase = (now_ms + job * 97) % kCycle.count();
    const double held = guard_.Held(job, now_ms);
    if ((held > 0) != w.logged_held) {
      log_(held > 0, held > 0 ? "holding job " + std::to_string(job) +
                          Format(" frozen %.0f%% of the time, from outside", held * 100, 0, 0)
                    : "no longer holding job " + std::to_string(job));
      w.logged_held = held > 0;
    }
    const bool freeze = phase < held * static_cast<double>(kCycle.count());
    if (!freeze || w.frozen) {
      SetFrozen(w, freeze);
      continue;
    }
    if (w.deferred < kMostDeferred && HoldsAnyTurn(w)) {
      ++w.deferred;
      continue;
    }
    SetFrozen(w, true);
    if (w.deferred < kMostDeferred && HoldsAnyTurn(w)) {
      SetFrozen(w, false);  // it took a turn as it was frozen
      ++w.deferred;
      continue;
    }
    w.deferred = 0;
  }
}

bool ComputeWatch::HoldsAnyTurn(const Watched& w) const {
  for (const auto& [gpu, arbitrated] : w.gpus) {
    if (holds_turn_(w.workload, arbitrated.uuid)) return true;
  }
  return false;
}

void ComputeWatch::SetFrozen(Watched& w, bool frozen) {
  if (w.frozen == frozen) return;
  if (!w.cgroup) return;
  if (Status s = w.cgroup->Freeze(frozen); !s.ok()) {
    // Said once; the job is not held again (and frozen as it is, it is not frozen further).
    if (!w.cannot_hold) log_(true, "cannot hold " + w.workload + ": " + std::string(s.message()));
    w.cannot_hold = true;
    return;
  }
  w.frozen = frozen;
}

}  // namespace gpufrac::node
