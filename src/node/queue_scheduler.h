// The node service's scheduling decisions: which pending jobs start now, and on which GPUs.
// Pure and single-threaded (no I/O, no clock: the caller passes the time), so it is tested and
// benchmarked by itself and the service replays it after a restart.
//
// Rules:
//  - Strict priority between queues (the queue file's order), FIFO inside a queue.
//  - A queue never holds more than its quota (a share of the node's GPU capacity, counted in
//    thousandths) in running jobs. A queue whose first job is held back by its quota starts
//    nothing else (FIFO); other queues go on.
//  - Backfill with reservations: a job that does not fit now reserves the GPUs it will get (those
//    of an allowed model that are closest to holding it). A reservation sticks to its job until
//    the job starts, and no job placed after it in the order may start on reserved GPUs, so a
//    lower job starts ahead of a blocked higher one only on capacity the blocked job cannot use,
//    and never delays it.
//  - No starvation: a job that has waited longer than `starvation_ms` goes ahead of every queue
//    (oldest first), so capacity for it cannot keep going to higher-priority arrivals.
//  - GPUs are chosen by the placement library's policy (best packing of shares, least
//    fragmentation); a multi-GPU job gets GPUs of one model.
//  - A GPU in MPS mode runs one user's jobs at a time (an MPS daemon serves one user's clients
//    at once): while it runs a user's jobs, other users' jobs do not start there.
//
// A request is translated per GPU model: --gpu-memory X is X bytes and ceil(1000·X/T)
// thousandths of a GPU with T bytes; --gpu-fraction F is F thousandths and floor(F·T/1000)
// bytes; --gpus N is N whole GPUs (limit: all of each GPU's memory).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "machine/node_gpu.h"
#include "node/job.h"
#include "node/queue_config.h"
#include "placement/policies.h"

namespace gpufrac::node {

// One GPU of the node as the scheduler sees it.
using machine::NodeGpu;

struct SchedulerOptions {
  // A placement policy name (placement/policies.h).
  std::string policy = std::string(placement::kDefaultPolicy);
  int64_t starvation_ms = 10 * 60 * 1000;  // Waited longer than this: goes first.
};

struct PendingJob {
  int64_t id = 0;
  int queue = 0;  // Index into the queue config.
  GpuRequest request;
  int64_t submitted_ms = 0;
  uid_t uid = 0;  // Its user: a GPU in MPS mode serves one user's jobs at a time.
};

struct StartDecision {
  int64_t id = 0;
  std::vector<GpuGrant> gpus;  // In GPU index order.
};

class QueueScheduler {
 public:
  // Fails on duplicate indexes or an unknown policy. With no GPUs (all in MIG mode) nothing is
  // ever feasible or started here.
  static StatusOr<std::unique_ptr<QueueScheduler>> Create(std::vector<NodeGpu> gpus,
                                                          QueueConfig queues,
                                                          SchedulerOptions options = {});
  ~QueueScheduler();

  const QueueConfig& queues() const;
  const std::vector<NodeGpu>& gpus() const;
  // Index of the queue called `name`, or nullopt.
  std::optional<int> QueueIndex(const std::string& name) const;

  // OK when `request` could run in queue `queue` on this node once it is idle; otherwise a
  // kInvalidArgument (or kFailedPrecondition for MIG, which needs a GPU in MIG mode) error with
  // one line saying why and what would fit, e.g. "--gpus 3 asks for 3 GPUs; this node has 2
  // H100-80GB and 1 A30-24GB", "--gpu-memory 100GiB is more than any GPU here has (largest:
  // H100-80GB, 79.6 GiB)", "--gpu-model L4: no such GPU here (H100-80GB, A30-24GB)",
  // "queue interactive's quota (0.25 of 4 GPUs) is less than --gpus 2".
  // With `check_quota` false, the queue's quota is left out (whether the GPUs could hold it).
  Status CheckFeasible(int queue, const GpuRequest& request, bool check_quota = true) const;

  // A pending job joins the end of its queue. Requires CheckFeasible to have passed.
  void Enqueue(const PendingJob& job);
  // Removes a pending job (cancelled); false if it is not pending here.
  bool Dequeue(int64_t id);
  // A job of user `uid` that already holds `shares` (re-adopted after a restart): counted as
  // running.
  void AddRunning(int64_t id, int queue, const std::vector<GpuGrant>& shares, uid_t uid = 0);
  // A running job ended: its shares are free again. False if it was not running here.
  bool Finish(int64_t id);

  // Starts what can start now. Every returned job counts as running from here on (its shares
  // are taken); the caller launches it, or calls Finish if launching fails.
  std::vector<StartDecision> Schedule(int64_t now_ms);

  // For status listings.
  struct GpuView {
    NodeGpu gpu;
    uint32_t allocated_milli = 0;
    uint64_t allocated_memory = 0;
    std::vector<int64_t> jobs;            // Running jobs on this GPU.
    std::optional<int64_t> reserved_for;  // A blocked job waiting for this GPU.
  };
  std::vector<GpuView> Gpus() const;
  struct QueueView {
    std::string name;
    size_t pending = 0;
    size_t running = 0;
    uint64_t milli_in_use = 0;  // Thousandths of a GPU held by its running jobs.
    uint64_t quota_milli = 0;   // Its quota in the same unit.
  };
  std::vector<QueueView> Queues() const;
  // Why pending job `id` has not started, in words, as of the last Schedule ("waiting for GPU
  // 2 (reserved for it)", "queue batch is at its quota (2 of 2 GPUs)", "behind job 12 in queue
  // batch"); "" when it is not pending.
  std::string WaitReason(int64_t id) const;
  size_t pending_count() const;

 private:
  struct Impl;
  explicit QueueScheduler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufrac::node
