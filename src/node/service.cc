// The node service's state machine (see service.h). One mutex guards the store, the scheduler
// and the job table (MPS daemons are talked to off it, mps_gpus.h); the loop thread wakes on
// every submission, cancellation and MPS outcome and at least every 100 ms to notice jobs that
// ended.
#include "node/service.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "common/compute_share.h"
#include "common/log.h"
#include "common/text.h"
#include "common/units.h"
#include "launch/budget_dir.h"
#include "launch/grant_limits.h"
#include "launch/limit_file.h"
#include "mig/apply.h"
#include "mig/mig_parted.h"
#include "node/launch_spec.h"
#include "node/paths.h"

namespace gpufrac::node {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);

std::string UserName(uid_t uid) {
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found) return pw.pw_name;
  return std::to_string(uid);
}

// The GPUs a job's time is arbitrated on, by index.
std::map<int, ComputeWatch::ArbitratedGpu> ArbitratedCompute(const std::vector<GpuGrant>& grants) {
  std::map<int, ComputeWatch::ArbitratedGpu> gpus;
  for (const GpuGrant& grant : grants) {
    if (grant.compute) gpus[grant.index] = {.uuid = grant.uuid, .compute = *grant.compute};
  }
  return gpus;
}

std::vector<std::string> Uuids(const Job& job) {
  std::vector<std::string> uuids;
  for (const GpuGrant& g : job.gpus) uuids.push_back(g.uuid);
  return uuids;
}

// "0 (4 GiB), 1 (whole)": the GPUs a job holds, for the log.
std::string SharesText(const std::vector<GpuGrant>& gpus) {
  std::string out;
  for (const GpuGrant& g : gpus) {
    if (!out.empty()) out += ", ";
    out += std::to_string(g.index) +
           (g.milli < kMilliPerGpu ? " (" + FormatSize(g.memory_bytes) + ")" : " (whole)");
  }
  return out;
}

// The driver's per-process GPU time for the node's GPUs; none (with a warning) when its NVML
// cannot give it, or without NVML (an inventory made without a driver).
std::unique_ptr<gpu::GpuTimeMeter> OpenGpuTimeMeter(const machine::Inventory& inventory) {
  if (inventory.nvml_library.empty()) return nullptr;
  std::vector<int> indices;
  for (const machine::NodeGpu& g : inventory.gpus) indices.push_back(g.index);
  StatusOr<std::unique_ptr<gpu::GpuTimeMeter>> meter =
      gpu::GpuTimeMeter::Open(inventory.nvml_library, indices);
  if (meter.ok()) return std::move(*meter);
  LogWarning("status shows no GPU time measured by the driver: %s",
             meter.status().message().c_str());
  return nullptr;
}

}  // namespace

Service::Service(ServiceConfig config, std::unique_ptr<Store> store, launch::BudgetDir budgets)
    : config_(std::move(config)),
      store_(std::move(store)),
      runner_(config_.shim_path, std::move(budgets)),
      mig_hardware_(config_.mig_backend, config_.mig_models),
      mps_({.state_dir = config_.state_dir,
            .control = config_.mps_control,
            .env = config_.inventory.job_env,
            .wake = [this] {
              std::lock_guard<std::mutex> lock(mu_);
              kicked_ = true;
              wake_.notify_one();
            }}),
      gpu_time_(OpenGpuTimeMeter(config_.inventory)),
      compute_watch_(gpu_time_, config_.compute_enforce,
                     [this](const std::string& workload, const std::string& uuid) {
                       return runner_.HoldsComputeTurn(workload, uuid);
                     },
                     [](bool warning, const std::string& line) {
                       if (warning) {
                         LogWarning("%s", line.c_str());
                       } else {
                         LogInfo("%s", line.c_str());
                       }
                     }) {
  instance_ = ServiceInstanceName(config_.state_dir);
}

StatusOr<std::unique_ptr<Service>> Service::Start(ServiceConfig config) {
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir + "/jobs", ec);
  if (ec) {
    return UnavailableError("cannot create the state directory " + config.state_dir + ": " +
                            ec.message());
  }
  chmod(config.state_dir.c_str(), 0711);
  chmod((config.state_dir + "/jobs").c_str(), 0711);
  // Two services on one state directory would run the same jobs twice.
  std::string lock_path = config.state_dir + "/gpufracd.lock";
  UniqueFd lock_fd(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock_fd.valid()) return ErrnoStatus("cannot open " + lock_path, errno);
  if (flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return FailedPreconditionError("another gpufracd is already using the state directory " +
                                   config.state_dir + "; stop it or choose another --state-dir");
  }
  GPUFRAC_ASSIGN_OR_RETURN(auto store, Store::Open(config.state_dir + "/gpufracd.db"));
  GPUFRAC_RETURN_IF_ERROR(CheckStoreAgainstJobDirs(*store, config.state_dir));
  // Every job's environment is in there: owner only, also for files an older version made.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    chmod((config.state_dir + "/gpufracd.db" + suffix).c_str(), 0600);
  }
  // The jobs' budgets, in a directory of the service's own that no user can create names in.
  GPUFRAC_ASSIGN_OR_RETURN(launch::BudgetDir budgets,
                           launch::BudgetDir::ForService(config.state_dir + "/budget-dir"));
  std::unique_ptr<Service> service(
      new Service(std::move(config), std::move(store), std::move(budgets)));
  service->lock_fd_ = std::move(lock_fd);
  GPUFRAC_RETURN_IF_ERROR(service->mps_.Load(&service->config_.inventory.gpus));
  GPUFRAC_RETURN_IF_ERROR(service->BuildLanes());
  GPUFRAC_RETURN_IF_ERROR(service->Recover());
  service->loop_ = std::thread([s = service.get()] { s->Loop(); });
  return service;
}

Service::~Service() {
  stopping_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kicked_ = true;
  }
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
}

int64_t Service::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Service::JobDir(int64_t id) const {
  return config_.state_dir + "/jobs/" + std::to_string(id);
}

std::string Service::WorkloadName(int64_t id) const { return instance_ + "-" + std::to_string(id); }

Status Service::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->LoadUnfinished());
  for (Job& job : jobs) {
    auto queue = scheduler_->QueueIndex(job.spec.queue);
    if (job.state == JobState::kRunning) {
      // Its shares are held again here; a job that ended while no service watched it is settled
      // by CheckRunning below with the outcome its shim recorded, which frees them once.
      active_[job.id] = job;
      gpu_time_.Track(job.id, WorkloadName(job.id));  // from now on
      compute_watch_.Track(job.id, WorkloadName(job.id), ArbitratedCompute(job.gpus));
      AddRunningToLane(job, queue.value_or(0));
      mps_.Keep(job.id, job.gpus, config_.inventory.gpus);
      if (proc::IsRunning(job.shim))
        LogInfo("%s", ("re-adopted running job " + std::to_string(job.id)).c_str());
      continue;
    }
    active_[job.id] = job;
    Job& active = active_[job.id];
    Status feasible = queue ? CheckFeasible(*queue, job.spec.request) : OkStatus();
    if (!feasible.ok()) {
      GPUFRAC_RETURN_IF_ERROR(Finish(active, JobState::kFailed,
                                     "can no longer run on this node: " + feasible.message(), -1, 0)
                                  .status());
      continue;
    }
    if (job.state == JobState::kStarting || !queue) {
      // The service died before letting the job go (its shim exits unstarted): start afresh.
      ReturnToQueue(active);
      continue;
    }
    EnqueueJob(job, *queue);
  }
  CheckRunning();
  return OkStatus();
}

StatusOr<Job> Service::Submit(const Submission& submission, uid_t uid, gid_t gid) {
  GPUFRAC_RETURN_IF_ERROR(CheckSubmission(submission));
  const uint64_t bytes =
      JobTextBytes(submission.command, submission.env, submission.cwd, submission.name);
  if (uid != 0 && bytes > config_.max_job_bytes) {
    return InvalidArgumentError("the job's command, environment, cwd and name take " +
                                FormatSize(bytes) + ", more than the " +
                                FormatSize(config_.max_job_bytes) +
                                " one job may (gpufracd --max-job-bytes); pass less environment");
  }
  std::string user = UserName(uid);  // May ask a directory service: not under the lock.
  std::lock_guard<std::mutex> lock(mu_);
  if (uid != 0) GPUFRAC_RETURN_IF_ERROR(CheckUserRoom(uid, bytes));
  int queue = 0;
  if (!submission.queue.empty()) {
    auto index = scheduler_->QueueIndex(submission.queue);
    if (!index) {
      std::string names;
      for (const QueueSpec& q : config_.queues.queues)
        names += (names.empty() ? "" : ", ") + q.name;
      return InvalidArgumentError("no queue called " + submission.queue + " (queues: " + names +
                                  ")");
    }
    queue = *index;
  }
  JobSpec spec;
  spec.name = submission.name;
  spec.queue = config_.queues.queues[queue].name;
  spec.request =
      submission.request ? *submission.request : config_.queues.queues[queue].default_request;
  GPUFRAC_RETURN_IF_ERROR(CheckFeasible(queue, spec.request));
  spec.command = submission.command;
  spec.cwd = submission.cwd;
  spec.env = submission.env;
  spec.uid = uid;
  spec.gid = gid;
  spec.user = user;
  GPUFRAC_ASSIGN_OR_RETURN(Job job, store_->Insert(spec, NowMs()));
  EnqueueJob(job, queue);
  active_[job.id] = job;
  metrics_.JobSubmitted();
  kicked_ = true;
  wake_.notify_one();
  return job;
}

Status Service::CheckUserRoom(uid_t uid, uint64_t bytes) const {
  size_t pending = 0;
  uint64_t pending_bytes = 0;
  for (const auto& [id, job] : active_) {
    if (job.spec.uid != uid || job.state != JobState::kPending) continue;
    ++pending;
    pending_bytes += JobTextBytes(job.spec.command, job.spec.env, job.spec.cwd, job.spec.name);
  }
  if (pending >= config_.max_pending_per_user) {
    return ResourceExhaustedError("you have " + std::to_string(pending) +
                                  " jobs waiting, the most one user may (gpufracd "
                                  "--max-pending-per-user); wait for some to start or cancel some");
  }
  if (pending_bytes + bytes > config_.max_pending_bytes_per_user) {
    return ResourceExhaustedError(
        "your waiting jobs' commands and environments take " + FormatSize(pending_bytes) +
        "; this one would pass the " + FormatSize(config_.max_pending_bytes_per_user) +
        " one user may have waiting (gpufracd --max-pending-bytes-per-user)");
  }
  return OkStatus();
}

void Service::LogStoreFailure(int64_t job, const Status& status) {
  store_failures_.Log(job, status, NowMs());
}

StatusOr<Job> Service::Cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    GPUFRAC_ASSIGN_OR_RETURN(std::optional<Job> job, store_->Get(id));
    if (!job) return NotFoundError("no job " + std::to_string(id));
    return FailedPreconditionError("job " + std::to_string(id) + " has already ended (" +
                                   std::string(JobStateName(job->state)) + ")");
  }
  Job& job = it->second;
  if (job.state == JobState::kPending) {
    // Recorded first: a job the store still calls pending would run after a restart.
    GPUFRAC_ASSIGN_OR_RETURN(
        Job final_job, Finish(job, JobState::kCancelled, "cancelled before it started", -1, 0));
    if (!scheduler_->Dequeue(id)) mig_->Dequeue(id);
    return final_job;
  }
  // Waiting for its GPU's MPS daemon: it never ran (the daemon's outcome is then ignored).
  if (job.state == JobState::kStarting) {
    return Finish(job, JobState::kCancelled, "cancelled before it started", -1, 0);
  }
  if (!job.cancel_requested) {
    Job updated = job;
    updated.cancel_requested = true;
    GPUFRAC_RETURN_IF_ERROR(store_->Update(updated));
    job = updated;
  }
  Status sent = runner_.Signal(job.shim, SIGTERM);
  if (!sent.ok()) {
    LogWarning("%s", ("cancel of job " + std::to_string(id) + ": " + sent.message()).c_str());
  }
  kicked_ = true;
  wake_.notify_one();
  return job;
}
StatusOr<Job> Service::GetJob(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = active_.find(id); it != active_.end()) return it->second;
  GPUFRAC_ASSIGN_OR_RETURN(std::optional<Job> job, store_->Get(id));
  if (!job) return NotFoundError("no job " + std::to_string(id));
  return *job;
}

StatusOr<std::vector<Job>> Service::ListJobs(const JobFilter& filter, bool* truncated) {
  std::lock_guard<std::mutex> lock(mu_);
  return store_->List(filter, truncated);
}

std::string Service::WaitReason(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reason = scheduler_->WaitReason(id);
  return reason.empty() ? mig_->WaitReason(id) : reason;
}

std::vector<GpuStatus> Service::Gpus() {
  std::vector<GpuStatus> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const QueueScheduler::GpuView& view : scheduler_->Gpus()) {
      GpuStatus g;
      g.gpu = view.gpu;
      g.allocated_milli = view.allocated_milli;
      g.allocated_memory = view.allocated_memory;
      g.reserved_for = view.reserved_for;
      for (int64_t id : view.jobs) {
        auto it = active_.find(id);
        if (it == active_.end()) continue;
        WorkloadStatus w;
        w.job = id;
        w.user = it->second.spec.user;
        for (const GpuGrant& share : it->second.gpus) {
          if (share.index != view.gpu.index) continue;
          w.milli = share.milli;
          w.compute = share.compute;
          if (view.gpu.mode == gpu::GpuMode::kMps && share.milli < kMilliPerGpu) {
            w.mps_thread_percentage = launch::MpsClientOf(share).thread_percentage;
          }
          w.memory_limit = share.memory_bytes;
        }
        g.workloads.push_back(w);
      }
      out.push_back(std::move(g));
    }
  }
  // Read outside the lock: the budgets belong to the jobs' users.
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  std::set<int64_t> live;
  for (GpuStatus& g : out) {
    for (WorkloadStatus& w : g.workloads) {
      w.memory_used = runner_.MemoryInUse(WorkloadName(w.job), g.gpu.uuid);
      g.used_memory += w.memory_used;
      const std::optional<JobGpuTime::Used> measured = gpu_time_.UsedNs(w.job, g.gpu.index);
      std::optional<uint64_t> charged;
      if (w.compute) charged = runner_.ComputeTimeUsed(WorkloadName(w.job), g.gpu.uuid);
      if (measured) w.gpu_seconds = measured->ns / 1e9;
      if (charged) w.charged_seconds = *charged / 1e9;
      if (!measured && !charged) continue;
      w.measured_share =
          measured ? compute_samples_.Share(w.job, g.gpu.index, measured->ns, measured->until_ms,
                                            ComputeSamples::Source::kMeasured)
                   : compute_samples_.Share(w.job, g.gpu.index, *charged, now_ms,
                                            ComputeSamples::Source::kCharged);
      if (w.measured_share) g.compute_in_use = g.compute_in_use.value_or(0) + *w.measured_share;
      if (std::optional<ComputeGuard::Verdict> v = compute_watch_.Of(w.job, g.gpu.index)) {
        w.over_share = v->over;
        w.held = v->held;
      }
      live.insert(w.job);
    }
  }
  compute_samples_.KeepOnly(live);
  return out;
}
std::vector<QueueScheduler::QueueView> Service::Queues() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<QueueScheduler::QueueView> views = scheduler_->Queues();
  // The MIG lane's jobs count in their queues too (the queue scheduler knows only its own).
  for (const auto& [id, job] : active_) {
    std::optional<int> queue = scheduler_->QueueIndex(job.spec.queue);
    if (!queue || *queue >= static_cast<int>(views.size())) continue;
    QueueScheduler::QueueView& view = views[*queue];
    bool on_mig = !job.gpus.empty() && job.gpus[0].uuid.rfind("MIG-", 0) == 0;
    if (job.state == JobState::kRunning && on_mig) {
      ++view.running;
      view.milli_in_use += job.gpus[0].milli;
    } else if (job.state == JobState::kPending && UsesMig(*queue, job.spec.request)) {
      ++view.pending;
    }
  }
  return views;
}

std::string Service::RenderMetrics() { return metrics_.Render(Gpus(), Queues()); }

void Service::Loop() {
  while (!stopping_) {
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, kPollInterval, [this] { return kicked_; });
    kicked_ = false;
    if (stopping_) break;
    runner_.ReapChildren();
    for (const machine::MpsDaemons::Ended& e : mps_.TakeEnded()) NoteMpsDaemonEnded(e.index, e.how);
    TakeMpsOutcomes();
    CheckRunning();
    ScheduleAndLaunch();
  }
}

void Service::CheckRunning() {
  std::vector<int64_t> ended;
  for (auto& [id, job] : active_) {
    if (job.state == JobState::kRunning && !proc::IsRunning(job.shim)) ended.push_back(id);
  }
  for (int64_t id : ended) {
    Job& job = active_[id];
    std::optional<Outcome> outcome = JobRunner::ReadOutcome(JobDir(id));
    // "not-started" next to a pid file is not this attempt's word: the job did start.
    if (outcome && outcome->kind == Outcome::Kind::kNotStarted &&
        std::filesystem::exists(JobDir(id) + "/pid")) {
      outcome.reset();
    }
    if (outcome && outcome->kind == Outcome::Kind::kNotStarted && !job.cancel_requested) {
      ReturnToQueue(job);
      continue;
    }
    if (!outcome) {
      bool killed = JobRunner::KillOrphanedJob(JobDir(id));
      // If the store fails, the job stays running here and the next pass settles it again.
      (void)Finish(job, JobState::kLost,
                   "its supervisor (pid " + std::to_string(job.shim.pid) +
                       ") ended without recording how the job ended" +
                       (killed ? "; the job's remaining processes were killed" : ""),
                   -1, 0);
      continue;
    }
    int exit_code = outcome->kind == Outcome::Kind::kExited ? outcome->code : -1;
    int signal = outcome->kind == Outcome::Kind::kSignaled ? outcome->code : 0;
    JobState state = exit_code == 0 ? JobState::kSucceeded : JobState::kFailed;
    std::string reason = exit_code == 0 ? "" : outcome->Describe();
    if (job.cancel_requested) {
      state = JobState::kCancelled;
      reason = "cancelled (" + outcome->Describe() + ")";
    }
    (void)Finish(job, state, reason, exit_code, signal);
  }
}

void Service::ScheduleAndLaunch() {
  auto begin = std::chrono::steady_clock::now();
  std::vector<StartDecision> decisions = scheduler_->Schedule(NowMs());
  metrics_.SchedulingPass(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  for (const StartDecision& d : decisions) {
    auto it = active_.find(d.id);
    if (it == active_.end()) {
      scheduler_->Finish(d.id);  // Cannot happen: the scheduler only knows active jobs.
      continue;
    }
    Launch(it->second, d);
  }
  for (const MigScheduler::Start& start : mig_->Schedule()) {
    auto it = active_.find(start.id);
    if (it == active_.end()) {
      mig_->Finish(start.id);
      continue;
    }
    GpuGrant share;
    share.index = start.gpu;
    share.uuid = start.uuid;
    share.memory_bytes = start.memory_bytes;
    share.milli = start.milli;
    Launch(it->second, StartDecision{start.id, {share}});
  }
}

ComputePolicy Service::QueueComputePolicy(const std::string& queue) const {
  for (const QueueSpec& q : config_.queues.queues) {
    if (q.name == queue && q.compute) return *q.compute;
  }
  return config_.compute_policy;
}

void Service::Launch(Job& job, const StartDecision& decision) {
  // Recorded before anything exists outside the store, so that a crash from here on is found
  // and undone by the next Recover.
  Job starting = job;
  starting.state = JobState::kStarting;
  starting.gpus = decision.gpus;
  const ComputePolicy policy = QueueComputePolicy(job.spec.queue);
  const GpuRequest& request = job.spec.request;
  const bool shares =
      request.kind == GpuRequest::Kind::kMemory || request.kind == GpuRequest::Kind::kFraction;
  for (GpuGrant& g : starting.gpus) {
    // A share that landed on a MIG instance has the instance's own compute.
    g.compute = shares && g.uuid.rfind("MIG-", 0) != 0
                    ? DecideComputePair(g.milli, request.compute_limit_milli, policy)
                    : std::nullopt;
  }
  if (Status s = store_->Update(starting); !s.ok()) {
    LogStoreFailure(job.id, s);
    ReleaseShares(job.id);
    EnqueueJob(job, *scheduler_->QueueIndex(job.spec.queue));
    return;
  }
  job = starting;
  // The other clients' grants: running jobs', and starting ones' (several may await one daemon).
  std::vector<GpuGrant> others;
  for (const auto& [id, other] : active_) {
    if (id != job.id && (other.state == JobState::kRunning || other.state == JobState::kStarting)) {
      others.insert(others.end(), other.gpus.begin(), other.gpus.end());
    }
  }
  std::vector<launch::MpsClient> needs = MpsGpus::NeedsOf(job.gpus, config_.inventory.gpus, others);
  if (needs.empty()) {
    LaunchPrepared(job, std::map<int, std::string>{});
    return;
  }
  // Its MPS daemons are made ready off the lock; TakeMpsOutcomes goes on from there.
  mps_.Prepare(job.id, std::move(needs));
}

void Service::TakeMpsOutcomes() {
  for (const MpsGpus::Prepared& prepared : mps_.TakePrepared()) {
    auto it = active_.find(prepared.job);
    // One cancelled meanwhile has ended.
    if (it != active_.end() && it->second.state == JobState::kStarting) {
      LaunchPrepared(it->second, prepared.pipes);
    }
  }
}

void Service::LaunchPrepared(Job& job, const StatusOr<std::map<int, std::string>>& mps_pipes) {
  if (!mps_pipes.ok()) {
    (void)Finish(job, JobState::kFailed, "could not start: " + mps_pipes.status().message(), -1, 0);
    return;
  }
  StatusOr<LaunchSpec> spec = MakeLaunchSpec(job, JobDir(job.id), WorkloadName(job.id),
                                             {.inventory = &config_.inventory,
                                              .mig_backend = mig_hardware_.backend(),
                                              .limiter_path = config_.limiter_path,
                                              .kill_grace_seconds = config_.kill_grace_seconds,
                                              .max_log_bytes = config_.max_log_bytes},
                                             *mps_pipes);
  StatusOr<proc::ProcessId> shim = spec.ok() ? runner_.Prepare(*spec) : spec.status();
  if (!shim.ok()) {
    (void)Finish(job, JobState::kFailed, "could not start: " + shim.status().message(), -1, 0);
    return;
  }
  Job running = job;
  running.state = JobState::kRunning;
  running.shim = *shim;
  running.started_ms = NowMs();
  if (Status s = store_->Update(running); !s.ok()) {
    LogStoreFailure(job.id, s);
    runner_.Abandon(*shim);  // It exits without starting the job.
    ReturnToQueue(job);
    return;
  }
  job = running;
  gpu_time_.Track(job.id, WorkloadName(job.id));
  compute_watch_.Track(job.id, WorkloadName(job.id), ArbitratedCompute(job.gpus));
  if (Status s = runner_.Release(*shim); !s.ok()) {
    LogStoreFailure(job.id, s);
  }
  metrics_.JobStarted((job.started_ms - job.submitted_ms) / 1000.0);
  // The command is the user's: one line, so that it cannot forge lines of the service's log.
  LogDebug("job %lld of %s started on GPU %s: %s", static_cast<long long>(job.id),
           job.spec.user.c_str(), SharesText(job.gpus).c_str(),
           OneLine(job.spec.command[0]).c_str());
}
StatusOr<Job> Service::Finish(Job& job, JobState state, const std::string& reason, int exit_code,
                              int signal) {
  bool held = job.state == JobState::kRunning || job.state == JobState::kStarting;
  compute_watch_.Forget(job.id);  // thawed and let go before it is cleaned up
  // Cleaning up a job that has ended is harmless even if the record below fails.
  if (held) runner_.Cleanup(JobDir(job.id), WorkloadName(job.id), Uuids(job));
  Job final_job = job;
  final_job.state = state;
  // A note made while it ran (its MPS daemon ended) stays with how it ended.
  final_job.reason = !held || job.reason.empty() ? reason
                     : reason.empty()            ? job.reason
                                                 : reason + "; " + job.reason;
  final_job.exit_code = exit_code;
  final_job.signal = signal;
  final_job.ended_ms = NowMs();
  if (Status s = store_->Update(final_job); !s.ok()) {
    // Nothing changes: a running job is settled again by the next pass.
    LogStoreFailure(job.id, s);
    return s;
  }
  if (held) ReleaseShares(job.id);
  metrics_.JobFinished(state);
  LogDebug("job %lld %s%s%s", static_cast<long long>(job.id),
           std::string(JobStateName(state)).c_str(), reason.empty() ? "" : ": ", reason.c_str());
  gpu_time_.Forget(job.id);
  active_.erase(job.id);
  return final_job;
}
void Service::ReturnToQueue(Job& job) {
  bool held = job.state == JobState::kRunning || job.state == JobState::kStarting;
  std::optional<int> queue = scheduler_->QueueIndex(job.spec.queue);
  if (!queue) {
    (void)Finish(job, JobState::kFailed,
                 "queue " + job.spec.queue + " no longer exists in the queue file", -1, 0);
    return;
  }
  compute_watch_.Forget(job.id);
  runner_.Cleanup(JobDir(job.id), WorkloadName(job.id), Uuids(job));
  gpu_time_.Forget(job.id);
  std::error_code ec;
  std::filesystem::remove_all(JobDir(job.id), ec);
  Job pending = job;
  pending.state = JobState::kPending;
  pending.gpus.clear();
  pending.shim = {};
  pending.started_ms = 0;
  if (Status s = store_->Update(pending); !s.ok()) {
    LogStoreFailure(job.id, s);
    return;  // Still recorded as before; the next pass (or service) tries again.
  }
  if (held) ReleaseShares(job.id);
  job = pending;
  EnqueueJob(job, *queue);
}

bool Service::UsesMig(int queue, const GpuRequest& request) const {
  if (request.kind == GpuRequest::Kind::kMigProfile) return true;
  if (request.kind == GpuRequest::Kind::kWholeGpus || mig_->empty()) return false;
  // Only what the other GPUs could never hold: a queue's quota is no way around to MIG.
  return !scheduler_->CheckFeasible(queue, request, /*check_quota=*/false).ok();
}

Status Service::CheckFeasible(int queue, const GpuRequest& request) const {
  if (!UsesMig(queue, request)) return scheduler_->CheckFeasible(queue, request);
  Status mig = mig_->CheckFeasible(request);
  if (mig.ok() || request.kind == GpuRequest::Kind::kMigProfile) return mig;
  return scheduler_->CheckFeasible(queue, request);  // Says why the other GPUs cannot.
}

void Service::EnqueueJob(const Job& job, int queue) {
  if (UsesMig(queue, job.spec.request)) {
    mig_->Enqueue(job.id, queue, job.spec.request, job.submitted_ms);
  } else {
    scheduler_->Enqueue(
        PendingJob{job.id, queue, job.spec.request, job.submitted_ms, job.spec.uid});
  }
}

void Service::AddRunningToLane(const Job& job, int queue) {
  if (!job.gpus.empty() && job.gpus[0].uuid.rfind("MIG-", 0) == 0) {
    mig_->AddRunning(job.id, job.gpus[0].index, job.gpus[0].uuid);
  } else {
    scheduler_->AddRunning(job.id, queue, job.gpus, job.spec.uid);
  }
}

void Service::ReleaseShares(int64_t id) {
  if (!scheduler_->Finish(id)) mig_->Finish(id);
}

Status Service::BuildLanes() {
  std::vector<NodeGpu> shared;
  std::vector<MigGpuSpec> mig;
  for (const NodeGpu& g : config_.inventory.gpus) {
    if (g.mode != gpu::GpuMode::kMig) {
      shared.push_back(g);
      continue;
    }
    // A GPU in MIG mode that gpufrac cannot drive (unknown model, no MIG backend) is left alone.
    if (mig_hardware_.Drives(g)) mig.push_back({g.index, mig_hardware_.ModelOf(g)});
  }
  GPUFRAC_ASSIGN_OR_RETURN(scheduler_,
                           QueueScheduler::Create(shared, config_.queues, config_.scheduler));
  mig_ = std::make_unique<MigScheduler>(mig, mig_hardware_.backend());
  // Jobs in submission order (ids grow with it), so queues keep their FIFO order.
  for (auto& [id, job] : active_) {
    int queue = scheduler_->QueueIndex(job.spec.queue).value_or(0);
    if (job.state == JobState::kPending) {
      EnqueueJob(job, queue);
    } else {
      AddRunningToLane(job, queue);
    }
  }
  return OkStatus();
}

std::vector<MigScheduler::SliceView> Service::MigSlices() {
  std::lock_guard<std::mutex> lock(mu_);
  return mig_->Slices();
}

StatusOr<bool> Service::SetMigMode(int gpu, bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  const NodeGpu* node_gpu = nullptr;
  for (const NodeGpu& g : config_.inventory.gpus) {
    if (g.index == gpu) node_gpu = &g;
  }
  if (!node_gpu) return NotFoundError("no GPU " + std::to_string(gpu) + " on this node");
  GPUFRAC_RETURN_IF_ERROR(mig_hardware_.CheckDrives(*node_gpu));
  if ((node_gpu->mode == gpu::GpuMode::kMig) == enabled) return false;
  std::vector<int64_t> jobs;
  for (const QueueScheduler::GpuView& view : scheduler_->Gpus()) {
    if (view.gpu.index == gpu) jobs = view.jobs;
  }
  if (!jobs.empty() || mig_->Busy(gpu)) {
    return FailedPreconditionError("GPU " + std::to_string(gpu) +
                                   " runs jobs; wait for them to end or cancel them first");
  }
  GPUFRAC_ASSIGN_OR_RETURN(bool reset_needed, mig_hardware_.SetMode(*node_gpu, enabled));
  if (reset_needed) return true;
  for (NodeGpu& g : config_.inventory.gpus) {
    if (g.index != gpu) continue;
    g.mode = enabled                                       ? gpu::GpuMode::kMig
             : config_.inventory.whole_gpus.count(gpu) > 0 ? gpu::GpuMode::kWhole
                                                           : gpu::GpuMode::kShared;
  }
  GPUFRAC_RETURN_IF_ERROR(BuildLanes());
  FailStrandedJobs();
  kicked_ = true;
  wake_.notify_one();
  return false;
}

void Service::FailStrandedJobs() {
  // Pending jobs that only a GPU's old mode could serve would wait forever: fail them, as a
  // restart would.
  std::vector<int64_t> stranded;
  for (const auto& [id, job] : active_) {
    if (job.state != JobState::kPending) continue;
    int queue = scheduler_->QueueIndex(job.spec.queue).value_or(0);
    if (!CheckFeasible(queue, job.spec.request).ok()) stranded.push_back(id);
  }
  for (int64_t id : stranded) {
    Job& job = active_[id];
    int queue = scheduler_->QueueIndex(job.spec.queue).value_or(0);
    std::string why = CheckFeasible(queue, job.spec.request).message();
    if (Finish(job, JobState::kFailed, "can no longer run on this node: " + why, -1, 0).ok() &&
        !scheduler_->Dequeue(id)) {
      mig_->Dequeue(id);
    }
  }
}

void Service::NoteMpsDaemonEnded(int index, const std::string& how) {
  LogWarning("the MPS daemon of GPU %d %s", index, how.c_str());
  for (auto& [id, job] : active_) {
    if (job.state != JobState::kRunning) continue;
    for (const GpuGrant& share : job.gpus) {
      if (share.index != index) continue;
      // Shown while it runs, and kept in its final reason.
      Job noted = job;
      noted.reason = "its MPS daemon (GPU " + std::to_string(index) + ") ended while it ran";
      if (Status s = store_->Update(noted); s.ok()) {
        job = noted;
      } else {
        LogStoreFailure(id, s);
      }
      break;
    }
  }
}

StatusOr<bool> Service::SetMpsMode(int gpu, bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  NodeGpu* node_gpu = nullptr;
  for (NodeGpu& g : config_.inventory.gpus) {
    if (g.index == gpu) node_gpu = &g;
  }
  if (!node_gpu) return NotFoundError("no GPU " + std::to_string(gpu) + " on this node");
  if ((node_gpu->mode == gpu::GpuMode::kMps) == enabled) return false;
  GPUFRAC_RETURN_IF_ERROR(mps_.CheckModeChange(*node_gpu, enabled));
  for (const QueueScheduler::GpuView& view : scheduler_->Gpus()) {
    if (view.gpu.index == gpu && !view.jobs.empty()) {
      return FailedPreconditionError("GPU " + std::to_string(gpu) +
                                     " runs jobs; wait for them to end or cancel them first");
    }
  }
  const gpu::GpuMode previous = node_gpu->mode;
  node_gpu->mode = enabled ? gpu::GpuMode::kMps : gpu::GpuMode::kShared;
  if (Status s = mps_.Record(config_.inventory.gpus); !s.ok()) {
    node_gpu->mode = previous;
    return s;
  }
  if (!enabled) mps_.Stop(gpu);
  GPUFRAC_RETURN_IF_ERROR(BuildLanes());
  FailStrandedJobs();
  kicked_ = true;
  wake_.notify_one();
  return true;
}

StatusOr<std::vector<std::string>> Service::ApplyMigParted(const std::string& yaml,
                                                           const std::string& config_name) {
  GPUFRAC_ASSIGN_OR_RETURN(mig::MigPartedFile file, mig::ParseMigParted(yaml, "the file"));
  GPUFRAC_ASSIGN_OR_RETURN(const mig::MigPartedConfig* config,
                           mig::ChooseConfig(file, config_name));
  std::lock_guard<std::mutex> lock(mu_);
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<std::string> report,
                           mig_hardware_.Apply(*config, config_.inventory.gpus,
                                               [this](int index) { return mig_->Busy(index); }));
  kicked_ = true;
  wake_.notify_one();
  return report;
}

StatusOr<std::string> Service::ExportMigParted(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return mig_hardware_.Export(name, config_.inventory.gpus);
}

}  // namespace gpufrac::node
