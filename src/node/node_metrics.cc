#include "node/node_metrics.h"

namespace gpufrac::node {
namespace {

// The gauges set from a snapshot at each render.
constexpr const char* kSnapshotGauges[] = {"gpufrac_gpu_memory_bytes",
                                           "gpufrac_gpu_memory_allocated_bytes",
                                           "gpufrac_gpu_memory_used_bytes",
                                           "gpufrac_gpu_share_allocated",
                                           "gpufrac_gpu_workloads",
                                           "gpufrac_queue_pending_jobs",
                                           "gpufrac_queue_running_jobs",
                                           "gpufrac_workload_gpu_seconds_total",
                                           "gpufrac_workload_charged_seconds_total",
                                           "gpufrac_gpu_compute_busy_ratio",
                                           "gpufrac_workload_memory_limit_bytes",
                                           "gpufrac_workload_memory_used_bytes",
                                           "gpufrac_workload_compute_share",
                                           "gpufrac_workload_compute_limit",
                                           "gpufrac_workload_compute_used_share",
                                           "gpufrac_workload_over_share",
                                           "gpufrac_workload_compute_held_ratio"};

}  // namespace

NodeMetrics::NodeMetrics() {
  metrics_.Declare("gpufrac_gpu_memory_bytes", "gauge", "Total memory of each GPU");
  metrics_.Declare("gpufrac_gpu_memory_allocated_bytes", "gauge",
                   "GPU memory promised to running jobs (their limits)");
  metrics_.Declare("gpufrac_gpu_memory_used_bytes", "gauge",
                   "GPU memory running jobs hold now, as the limiter counts it");
  metrics_.Declare("gpufrac_gpu_share_allocated", "gauge",
                   "Share of each GPU held by running jobs (1 = the whole GPU)");
  metrics_.Declare("gpufrac_gpu_workloads", "gauge", "Running jobs on each GPU");
  metrics_.Declare("gpufrac_workload_gpu_seconds_total", "counter",
                   "GPU time each running job's processes used on a shared GPU, as the driver "
                   "measured it");
  metrics_.Declare("gpufrac_workload_charged_seconds_total", "counter",
                   "GPU time each arbitrated job was charged by its GPU's compute arbiter");
  metrics_.Declare("gpufrac_gpu_compute_busy_ratio", "gauge",
                   "Share of each shared GPU's time its running jobs used over the last "
                   "interval (at least a second)");
  metrics_.Declare("gpufrac_workload_memory_limit_bytes", "gauge",
                   "GPU memory each running job may hold on each of its GPUs (its limit)");
  metrics_.Declare("gpufrac_workload_memory_used_bytes", "gauge",
                   "GPU memory each running job holds now on each of its GPUs");
  metrics_.Declare("gpufrac_workload_compute_share", "gauge",
                   "Share of each GPU's time each running job booked (its compute request)");
  metrics_.Declare("gpufrac_workload_compute_limit", "gauge",
                   "Most of each shared GPU's time each arbitrated job may take");
  metrics_.Declare("gpufrac_workload_compute_used_share", "gauge",
                   "Share of each shared GPU's time each running job used over the last "
                   "interval (at least a second), as the driver measured it");
  metrics_.Declare("gpufrac_workload_over_share", "gauge",
                   "1 while an arbitrated job takes more of a shared GPU's time than its share "
                   "(over its limit, or over its request while a neighbour is starved), as the "
                   "driver measured it");
  metrics_.Declare("gpufrac_workload_compute_held_ratio", "gauge",
                   "Part of the time the service holds an arbitrated job frozen for taking more "
                   "than its share (--gpu-compute-enforce)");
  metrics_.Declare("gpufrac_queue_pending_jobs", "gauge", "Jobs waiting in each queue");
  metrics_.Declare("gpufrac_queue_running_jobs", "gauge", "Running jobs of each queue");
  metrics_.Declare("gpufrac_jobs_submitted_total", "counter", "Jobs accepted");
  metrics_.Declare("gpufrac_jobs_finished_total", "counter", "Jobs that ended, by final state");
  metrics_.DeclareHistogram("gpufrac_scheduling_decision_seconds",
                            "Time of one scheduling pass over the queues",
                            {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1});
  metrics_.DeclareHistogram("gpufrac_job_wait_seconds", "Time from submission to start",
                            {0.01, 0.1, 1, 10, 60, 600, 3600, 36000});
}

void NodeMetrics::JobSubmitted() { metrics_.Add("gpufrac_jobs_submitted_total", {}, 1); }

void NodeMetrics::JobStarted(double waited_seconds) {
  metrics_.Observe("gpufrac_job_wait_seconds", waited_seconds);
}

void NodeMetrics::JobFinished(JobState state) {
  metrics_.Add("gpufrac_jobs_finished_total", {{"state", std::string(JobStateName(state))}}, 1);
}

void NodeMetrics::SchedulingPass(double seconds) {
  metrics_.Observe("gpufrac_scheduling_decision_seconds", seconds);
}

std::string NodeMetrics::Render(const std::vector<GpuStatus>& gpus,
                                const std::vector<QueueScheduler::QueueView>& queues) {
  std::lock_guard<std::mutex> render(render_mu_);
  for (const char* name : kSnapshotGauges) metrics_.Clear(name);
  for (const GpuStatus& g : gpus) {
    Labels labels = {
        {"gpu", std::to_string(g.gpu.index)}, {"uuid", g.gpu.uuid}, {"model", g.gpu.model}};
    metrics_.Set("gpufrac_gpu_memory_bytes", labels, static_cast<double>(g.gpu.memory_bytes));
    metrics_.Set("gpufrac_gpu_memory_allocated_bytes", labels,
                 static_cast<double>(g.allocated_memory));
    metrics_.Set("gpufrac_gpu_memory_used_bytes", labels, static_cast<double>(g.used_memory));
    metrics_.Set("gpufrac_gpu_share_allocated", labels, g.allocated_milli / 1000.0);
    metrics_.Set("gpufrac_gpu_workloads", labels, static_cast<double>(g.workloads.size()));
    if (g.compute_in_use) metrics_.Set("gpufrac_gpu_compute_busy_ratio", labels, *g.compute_in_use);
    for (const WorkloadStatus& w : g.workloads) {
      const Labels job = {
          {"gpu", std::to_string(g.gpu.index)}, {"job", std::to_string(w.job)}, {"user", w.user}};
      metrics_.Set("gpufrac_workload_memory_limit_bytes", job, static_cast<double>(w.memory_limit));
      metrics_.Set("gpufrac_workload_memory_used_bytes", job, static_cast<double>(w.memory_used));
      metrics_.Set("gpufrac_workload_compute_share", job, w.milli / 1000.0);
      const Labels counter = {{"gpu", std::to_string(g.gpu.index)}, {"job", std::to_string(w.job)}};
      if (w.gpu_seconds) metrics_.Set("gpufrac_workload_gpu_seconds_total", counter, *w.gpu_seconds);
      if (w.charged_seconds) {
        metrics_.Set("gpufrac_workload_charged_seconds_total", counter, *w.charged_seconds);
      }
      if (w.measured_share)
        metrics_.Set("gpufrac_workload_compute_used_share", job, *w.measured_share);
      if (!w.compute) continue;
      metrics_.Set("gpufrac_workload_compute_limit", job, w.compute->limit_milli / 1000.0);
      metrics_.Set("gpufrac_workload_over_share", job,
                   w.over_share == ComputeGuard::Over::kNo ? 0.0 : 1.0);
      metrics_.Set("gpufrac_workload_compute_held_ratio", job, w.held);
    }
  }
  for (const QueueScheduler::QueueView& q : queues) {
    metrics_.Set("gpufrac_queue_pending_jobs", {{"queue", q.name}}, static_cast<double>(q.pending));
    metrics_.Set("gpufrac_queue_running_jobs", {{"queue", q.name}}, static_cast<double>(q.running));
  }
  return metrics_.Render();
}

}  // namespace gpufrac::node
