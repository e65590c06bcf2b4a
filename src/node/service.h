// The node service's state machine: accepts jobs into the store, asks the queue scheduler what
// starts, launches through the job runner, notices when jobs end, and on start-up takes over
// from a previous instance (re-adopting jobs that kept running, recording the outcome of those
// that ended meanwhile, freeing their shares exactly once). Thread-safe: the API's threads call
// in while the service's own loop runs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/posix.h"
#include "common/status.h"
#include "machine/node_gpus.h"
#include "node/compute_samples.h"
#include "node/compute_watch.h"
#include "node/gpu_status.h"
#include "node/job.h"
#include "node/job_gpu_time.h"
#include "node/job_runner.h"
#include "node/mig_hardware.h"
#include "node/mig_scheduler.h"
#include "node/mps_gpus.h"
#include "node/node_metrics.h"
#include "node/queue_scheduler.h"
#include "node/store.h"
#include "node/submission.h"

namespace gpufrac::node {

struct ServiceConfig {
  std::string state_dir;         // Created if missing (0711): gpufracd.db, jobs/<id>/.
  QueueConfig queues;            // Parsed queue file (or DefaultQueueConfig()).
  machine::Inventory inventory;  // The GPUs to schedule.
  SchedulerOptions scheduler;    // Policy, starvation limit.
  std::string shim_path;         // gpufrac-shim, absolute.
  std::string limiter_path;      // libgpufrac.so, absolute.
  int kill_grace_seconds = 10;   // Cancel: SIGTERM, then SIGKILL after this long.
  // How shared GPUs' time is divided, for queues that do not say (common/compute_share.h).
  ComputePolicy compute_policy = ComputePolicy::kFair;
  // Hold a job whose processes take more of a GPU's time than its share (as the driver measured
  // it) by freezing its cgroup part of the time (node/compute_watch.h); else only flag it.
  bool compute_enforce = false;
  // Bytes of output one job's logs keep (stdout and stderr together); the rest is dropped.
  uint64_t max_log_bytes = kDefaultMaxLogBytes;
  // What one user may have waiting, so that no user can fill the disk or the queues for others
  // (root is not limited): pending jobs, and the bytes of their commands, environments, working
  // directories and names; and the bytes of any one job.
  size_t max_pending_per_user = 1000;
  uint64_t max_pending_bytes_per_user = uint64_t{64} << 20;
  uint64_t max_job_bytes = uint64_t{256} << 10;
  // The driver's MIG operations; must outlive the service. Null: MIG is not available (GPUs
  // in MIG mode are then left alone).
  mig::MigBackend* mig_backend = nullptr;
  // Per GPU index, the MIG tables its driver reported (must outlive the service); GPUs not
  // listed use the built-in catalogue.
  std::map<int, const gpu::MigModel*> mig_models;
  // NVIDIA's nvidia-cuda-mps-control, absolute; "" when there is none (GPUs cannot be in MPS
  // mode then).
  std::string mps_control;
};

class Service {
 public:
  // Opens the store, checks the GPUs against what running jobs hold, recovers unfinished jobs,
  // and starts the scheduling loop.
  static StatusOr<std::unique_ptr<Service>> Start(ServiceConfig config);
  ~Service();  // Stops the loop; running jobs keep running (a later service re-adopts them).
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Validates and records a job for user uid/gid. Errors: kInvalidArgument (bad command, cwd,
  // env, a job larger than max_job_bytes, unknown queue, a request that can never fit here),
  // kResourceExhausted (the user's pending jobs at their limits), with one line saying what to
  // fix.
  StatusOr<Job> Submit(const Submission& submission, uid_t uid, gid_t gid);
  // Pending: removed and cancelled at once. Running: SIGTERM now, SIGKILL after the grace; the
  // job ends as cancelled. Final: kFailedPrecondition. Unknown: kNotFound.
  StatusOr<Job> Cancel(int64_t id);
  StatusOr<Job> GetJob(int64_t id);
  // Store::List under the service's lock.
  StatusOr<std::vector<Job>> ListJobs(const JobFilter& filter, bool* truncated = nullptr);
  // Why a pending job waits ("" otherwise).
  std::string WaitReason(int64_t id);
  // The job's directory (logs: JobRunner::kStdout / kStderr).
  std::string JobDir(int64_t id) const;

  std::vector<GpuStatus> Gpus();
  std::vector<QueueScheduler::QueueView> Queues();
  // Every GPU in MIG mode and its instances (which job each serves).
  std::vector<MigScheduler::SliceView> MigSlices();
  // Turns MIG mode on or off on GPU `gpu`: refused (kFailedPrecondition) while a job runs on it.
  // Returns true when the change waits for a GPU reset. Pending jobs that only the old mode
  // could serve fail.
  StatusOr<bool> SetMigMode(int gpu, bool enabled);
  // Puts GPU `gpu` in MPS mode (its shares run side by side under an MPS daemon of the
  // service's) or back to shared; refused (kFailedPrecondition) while a job runs on it, for a
  // GPU in MIG mode or serving whole GPUs only, and without nvidia-cuda-mps-control. Kept across
  // restarts (the state directory's mps-gpus). Pending jobs that only the old mode could serve
  // fail. Returns false when the GPU was already in that mode.
  StatusOr<bool> SetMpsMode(int gpu, bool enabled);
  // Applies configuration `config` of a mig-parted file to the matching GPUs in MIG mode
  // (MigHardware::Apply): all is checked first (profiles, layouts, idle GPUs); then each GPU's
  // idle instances are replaced by the layout; a failure destroys what the apply created.
  // Returns a line per GPU changed.
  StatusOr<std::vector<std::string>> ApplyMigParted(const std::string& yaml,
                                                    const std::string& config);
  // The current layout as a mig-parted file with one configuration called `name`.
  StatusOr<std::string> ExportMigParted(const std::string& name);
  const QueueConfig& queue_config() const { return config_.queues; }
  bool simulated() const { return config_.inventory.simulated; }
  // Prometheus exposition of the current state.
  std::string RenderMetrics();

 private:
  Service(ServiceConfig config, std::unique_ptr<Store> store, launch::BudgetDir budgets);
  Status Recover();
  void Loop();
  // Under mu_:
  void CheckRunning();
  void ScheduleAndLaunch();
  // Records the start; a job with a share of a GPU in MPS mode then waits (kStarting) for that
  // GPU's daemon, which mps_ readies off the lock, and goes on in TakeMpsOutcomes; any other
  // goes on at once (LaunchPrepared).
  void Launch(Job& job, const StartDecision& decision);
  // Records the final state, frees what the job held and forgets it; returns the final record.
  // If the store fails, nothing changes (and the next pass settles a running job again).
  StatusOr<Job> Finish(Job& job, JobState state, const std::string& reason, int exit_code,
                       int signal);
  // Back to its queue after a start that did not happen: removes what the attempt left, frees
  // its shares. A job whose queue is gone from the queue file fails instead.
  void ReturnToQueue(Job& job);
  // The lanes: shared/whole GPUs through the queue scheduler, MIG GPUs through the MIG lane.
  // MIG profiles always go to MIG; memory and fraction requests go to MIG only when no other
  // GPU here could ever hold them.
  bool UsesMig(int queue, const GpuRequest& request) const;
  Status CheckFeasible(int queue, const GpuRequest& request) const;
  void EnqueueJob(const Job& job, int queue);
  void AddRunningToLane(const Job& job, int queue);
  void ReleaseShares(int64_t id);
  // Logs that the store failed for `job`, at most once a minute for the same failure (mu_ held).
  void LogStoreFailure(int64_t job, const Status& status);
  // kResourceExhausted when user `uid` may not queue another job of `bytes` (mu_ held).
  Status CheckUserRoom(uid_t uid, uint64_t bytes) const;
  // (Re)creates both lanes from config_.inventory and the current MIG modes, and puts every
  // active job back in its lane.
  Status BuildLanes();
  // Fails the pending jobs no GPU in its current mode could ever serve (after a mode change).
  void FailStrandedJobs();
  std::string WorkloadName(int64_t id) const;
  // The rest of Launch, once the MPS daemons of the job's GPUs in MPS mode are ready (mps_pipes)
  // or could not be (the job fails).
  void LaunchPrepared(Job& job, const StatusOr<std::map<int, std::string>>& mps_pipes);
  // Launches the starting jobs whose MPS daemons the MPS workers have made ready.
  void TakeMpsOutcomes();
  // Notes on the running jobs of GPU `index` that its MPS daemon ended (`how`).
  void NoteMpsDaemonEnded(int index, const std::string& how);
  // The compute policy of queue `queue`: its own, else the node's.
  ComputePolicy QueueComputePolicy(const std::string& queue) const;
  int64_t NowMs() const;

  // flock on STATE/gpufracd.lock, held for the service's life: first, so released last.
  UniqueFd lock_fd_;
  ServiceConfig config_;
  std::string instance_;  // Distinguishes this state directory's workloads from others'.
  std::mutex mu_;
  std::condition_variable wake_;
  bool kicked_ = false;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Store> store_;
  std::unique_ptr<QueueScheduler> scheduler_;
  std::unique_ptr<MigScheduler> mig_;
  JobRunner runner_;
  std::map<int64_t, Job> active_;  // Pending and running jobs, by id.
  StoreFailureLog store_failures_;
  MigHardware mig_hardware_;
  // After mu_, wake_ and kicked_, which its workers' wake-ups use until it is destroyed.
  MpsGpus mps_;
  NodeMetrics metrics_;
  ComputeSamples compute_samples_;  // measured compute shares (status, metrics)
  JobGpuTime gpu_time_;             // what the driver measured of each job (status, metrics)
  ComputeWatch compute_watch_;      // who is over its share, by gpu_time_; holds them if enforcing
  std::thread loop_;
};

}  // namespace gpufrac::node
