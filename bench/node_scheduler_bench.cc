// Speed of the node service's queue scheduler (not a test): 10,000 queued jobs of a realistic
// mix on 8 simulated H100-80GB GPUs, in steady churn (a running job ends, a new job arrives,
// Schedule runs). Reports p50/p99/max of one Schedule() and of one Enqueue() as counters.
// Run: build-dir/bin/node_scheduler_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "node/queue_scheduler.h"

namespace gpufrac::node {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int kGpus = 8;
constexpr size_t kQueued = 10'000;
constexpr int kSteps = 20'000;

using Clock = std::chrono::steady_clock;

// Fractions 0.1-0.5, memory 4-40 GiB, some whole-GPU and 2-GPU jobs; three queues, most work
// in batch.
PendingJob RandomJob(std::mt19937_64& rng, int64_t id, int64_t now_ms) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  PendingJob j;
  j.id = id;
  j.submitted_ms = now_ms;
  int64_t q = uniform(0, 9);
  j.queue = q < 2 ? 0 : q < 8 ? 1 : 2;
  int64_t kind = uniform(0, 19);
  if (kind < 10) {
    j.request.kind = GpuRequest::Kind::kFraction;
    j.request.fraction_milli = static_cast<uint32_t>(uniform(2, 10) * 50);
  } else if (kind < 16) {
    j.request.kind = GpuRequest::Kind::kMemory;
    j.request.memory_bytes = static_cast<uint64_t>(uniform(4, 40)) * kGiB;
  } else {
    j.request.kind = GpuRequest::Kind::kWholeGpus;
    j.request.gpus = kind < 19 ? 1 : 2;
  }
  return j;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// One iteration: a random running job finishes, a new job is enqueued (keeping 10,000 queued),
// and Schedule runs. Only Schedule counts as the iteration's time. `ms_per_step` is how much
// the caller's clock moves per step: 0 keeps every job young; 1000 lets the queue age past
// starvation_ms (10 min), so that most queued jobs are starving, as under sustained overload.
void BM_ScheduleChurn(benchmark::State& state, const char* policy, int64_t ms_per_step) {
  std::vector<NodeGpu> gpus;
  for (int i = 0; i < kGpus; ++i) {
    gpus.push_back({i, "GPU-bench-" + std::to_string(i), "H100-80GB", 81559 * kMiB, 500 * kMiB});
  }
  QueueConfig queues;
  for (auto [name, quota] : {std::pair{"interactive", 0.5}, {"batch", 1.0}, {"scavenger", 1.0}}) {
    QueueSpec q;
    q.name = name;
    q.default_request.kind = GpuRequest::Kind::kWholeGpus;
    q.default_request.gpus = 1;
    q.quota = quota;
    queues.queues.push_back(q);
  }
  auto made = QueueScheduler::Create(gpus, queues, {.policy = policy});
  if (!made.ok()) {
    state.SkipWithError(made.status().ToString().c_str());
    return;
  }
  QueueScheduler& s = **made;
  std::mt19937_64 rng(42);
  int64_t next_id = 1, now = 0;
  std::vector<int64_t> running;
  auto submit = [&] {
    PendingJob j = RandomJob(rng, next_id++, now);
    if (s.CheckFeasible(j.queue, j.request).ok()) s.Enqueue(j);
  };
  while (s.pending_count() < kQueued) submit();
  for (const StartDecision& d : s.Schedule(now)) running.push_back(d.id);
  // Warm up into the steady state (reservations made, typical workload built, jobs aged).
  for (int i = 0; i < 2000; ++i) {
    if (!running.empty()) {
      size_t k = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
      s.Finish(running[k]);
      running[k] = running.back();
      running.pop_back();
    }
    while (s.pending_count() < kQueued) submit();
    now += ms_per_step;
    for (const StartDecision& d : s.Schedule(now)) running.push_back(d.id);
  }

  std::vector<double> schedule_us, enqueue_us;
  schedule_us.reserve(kSteps);
  enqueue_us.reserve(kSteps);
  size_t started = 0;
  for (auto _ : state) {
    if (!running.empty()) {
      size_t k = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
      s.Finish(running[k]);
      running[k] = running.back();
      running.pop_back();
    }
    while (s.pending_count() < kQueued) {
      PendingJob j = RandomJob(rng, next_id++, now);
      if (!s.CheckFeasible(j.queue, j.request).ok()) continue;
      Clock::time_point t0 = Clock::now();
      s.Enqueue(j);
      enqueue_us.push_back(Micros(Clock::now() - t0));
    }
    now += ms_per_step;
    Clock::time_point t0 = Clock::now();
    std::vector<StartDecision> decisions = s.Schedule(now);
    Clock::duration took = Clock::now() - t0;
    schedule_us.push_back(Micros(took));
    state.SetIterationTime(std::chrono::duration<double>(took).count());
    started += decisions.size();
    for (const StartDecision& d : decisions) running.push_back(d.id);
  }
  state.counters["queued"] = static_cast<double>(s.pending_count());
  state.counters["running"] = static_cast<double>(running.size());
  state.counters["started_per_call"] =
      static_cast<double>(started) / static_cast<double>(schedule_us.size());
  state.counters["schedule_p50_us"] = Percentile(schedule_us, 0.50);
  state.counters["schedule_p99_us"] = Percentile(schedule_us, 0.99);
  state.counters["schedule_p999_us"] = Percentile(schedule_us, 0.999);
  state.counters["schedule_max_us"] = Percentile(schedule_us, 1.0);
  state.counters["enqueue_p50_us"] = Percentile(enqueue_us, 0.50);
  state.counters["enqueue_p99_us"] = Percentile(enqueue_us, 0.99);
}

BENCHMARK_CAPTURE(BM_ScheduleChurn, gpufrac_young, "gpufrac", 0)
    ->Iterations(kSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ScheduleChurn, gpufrac_starving, "gpufrac", 1000)
    ->Iterations(kSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ScheduleChurn, bestfit_young, "bestfit", 0)
    ->Iterations(kSteps)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpufrac::node

BENCHMARK_MAIN();
