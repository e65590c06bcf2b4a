// Judging workloads' measured parts of a GPU's time against their shares (see compute_guard.h).
#include "node/compute_guard.h"

#include <algorithm>

namespace gpufrac::node {
namespace {

double Milli(uint32_t milli) { return milli / 1000.0; }

// The part frozen that brings a workload using `used` while held `held` to `target`; none below
// kLeastHeld (less than a tick of the watch's cycle, and what the samples' noise alone asks).
double HoldFor(double used, double held, double target) {
  const double unheld = used / (1 - held);
  if (unheld <= 0) return 0;
  const double part = 1 - target / unheld;
  return part < ComputeGuard::kLeastHeld ? 0 : std::min(part, ComputeGuard::kMostHeld);
}

}  // namespace

const char* OverName(ComputeGuard::Over over) {
  switch (over) {
    case ComputeGuard::Over::kNo:
      return "no";
    case ComputeGuard::Over::kLimit:
      return "limit";
    case ComputeGuard::Over::kRequest:
      return "request";
  }
  return "no";
}

void ComputeGuard::Observe(int gpu, int64_t until_ms, const std::vector<Workload>& workloads) {
  auto [it, first] = gpus_.try_emplace(gpu);
  Gpu& base = it->second;
  if (!first) {
    // Not a window yet: a workload that arrived since starts at the next.
    if (until_ms - base.base_ms < kWindowMs) return;
    Judge(gpu, until_ms, static_cast<double>(until_ms - base.base_ms), workloads, base);
  }
  base.base_ms = until_ms;
  base.base_ns.clear();
  for (const Workload& w : workloads) base.base_ns[w.job] = w.used_ns;
}

void ComputeGuard::Judge(int gpu, int64_t until_ms, double window_ms,
                         const std::vector<Workload>& workloads, const Gpu& base) {
  struct Part {
    const Workload* w;
    double used;
  };
  std::vector<Part> parts;
  double busy = 0;
  for (const Workload& w : workloads) {
    auto b = base.base_ns.find(w.job);
    if (b == base.base_ns.end()) continue;  // new in this window: judged from the next
    const double used = w.used_ns >= b->second ? (w.used_ns - b->second) / 1e6 / window_ms : 0;
    parts.push_back({&w, used});
    busy += used;
  }
  // Idle time shows what a neighbour wants only while a hold made it (a workload starting up
  // leaves some too), and only of a neighbour not held itself that took no more than in the
  // window before: one that took more of the freed time wanted it (what it could not take was
  // kept from it some other way, e.g. by a turn the held workload was frozen in).
  bool holding = false;
  for (const Part& p : parts) holding = holding || judged_[{p.w->job, gpu}].verdict.held > 0;
  double shortfall = 0;
  for (const Part& p : parts) {
    Judged& j = judged_[{p.w->job, gpu}];
    if (busy < kBusy && holding && j.verdict.held == 0 && p.used <= j.verdict.used + kTolerance) {
      j.satisfied_ms = until_ms;  // it could have had more, and took this
      j.satisfied_used = p.used;
    }
    const double request = Milli(p.w->compute.request_milli);
    const bool wants_no_more = j.satisfied_ms != 0 && until_ms - j.satisfied_ms <= kRememberMs &&
                               p.used <= j.satisfied_used + kTolerance;
    if (p.used >= kActive && p.used < request - kTolerance && !wants_no_more) {
      shortfall += request - p.used;
    }
  }
  const bool contended = busy >= kBusy && shortfall > 0;
  // The shortfall is made up by those over their requests, in proportion to how far over.
  double excess = 0;
  for (const Part& p : parts) {
    const double request = Milli(p.w->compute.request_milli);
    if (p.used > request + kTolerance) excess += p.used - request;
  }
  for (const Part& p : parts) {
    const double request = Milli(p.w->compute.request_milli);
    const double limit = Milli(p.w->compute.limit_milli);
    Over now = Over::kNo;
    if (p.used > limit + kTolerance) {
      now = Over::kLimit;
    } else if (contended && p.used > request + kTolerance) {
      now = Over::kRequest;
    }
    Judged& j = judged_[{p.w->job, gpu}];
    j.verdict.used = p.used;
    if (now != Over::kNo) {
      ++j.over_streak;
      j.within_streak = 0;
      if (j.over_streak >= kWindowsToFlag) j.verdict.over = now;
    } else {
      ++j.within_streak;
      j.over_streak = 0;
      if (j.within_streak >= kWindowsToFlag) j.verdict.over = Over::kNo;
    }
    if (!enforce_) continue;
    // A first hold waits for the flag; a hold is then set again at every window.
    double& held = j.verdict.held;
    const bool holds = held > 0 || j.verdict.over != Over::kNo;
    if (now == Over::kLimit && holds) {
      held = HoldFor(p.used, held, limit);
    } else if (now == Over::kRequest && holds) {
      const double give = shortfall * (p.used - request) / excess;
      held = HoldFor(p.used, held, std::min(limit, std::max(request, p.used - give)));
    } else if (held > 0 && j.within_streak >= kWindowsToFlag && p.used < request - kTolerance) {
      held = std::min(held, HoldFor(p.used, held, request));  // never below its request
    } else if (held > 0 && busy - p.used < kActive) {
      held = HoldFor(p.used, held, limit);  // no neighbour uses the GPU: held to its limit only
    } else if (held > 0 && busy < kBusy) {
      held = HoldFor(p.used, held, std::min(limit, p.used + (1 - busy)));
    }
  }
}

std::optional<ComputeGuard::Verdict> ComputeGuard::Of(int64_t job, int gpu) const {
  auto it = judged_.find({job, gpu});
  if (it == judged_.end()) return std::nullopt;
  return it->second.verdict;
}

double ComputeGuard::Held(int64_t job, int64_t now_ms) const {
  double most = 0;
  for (auto it = judged_.lower_bound({job, INT32_MIN}); it != judged_.end() && it->first.first == job;
       ++it) {
    auto gpu = gpus_.find(it->first.second);
    if (gpu == gpus_.end() || now_ms - gpu->second.base_ms > kStaleMs) continue;
    most = std::max(most, it->second.verdict.held);
  }
  return most;
}

void ComputeGuard::Forget(int64_t job) {
  std::erase_if(judged_, [job](const auto& entry) { return entry.first.first == job; });
  for (auto& [gpu, base] : gpus_) base.base_ns.erase(job);
}

}  // namespace gpufrac::node
