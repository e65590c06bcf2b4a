// Starts jobs and keeps track of them across service restarts.
//
// Every job runs under its own supervisor, `gpufrac-shim JOB_DIR` (shim_main.cc), forked by the
// service. The shim outlives the service, so a job keeps running when the service is killed, and
// it records the job's real outcome in JOB_DIR/outcome for whichever service comes next. Start-up
// is two-phase so that a crash at any point neither loses nor doubles a job:
//
//   1. Prepare: creates the job's cgroup (launch/cgroup.h: the other GPUs' device nodes denied),
//      writes JOB_DIR (spec, read-only limit file, empty log files), creates the workload's
//      shared budgets, and forks the shim, which waits for a go-ahead byte on a pipe.
//   2. The service records the shim (pid + start time) in its store as running.
//   3. Release: writes the go-ahead. The shim then forks the job: a new session, the user's
//      uid/gid/groups, the user's cwd and environment plus LD_PRELOAD=libgpufrac.so,
//      GPUFRAC_LIMIT_FILE and CUDA_VISIBLE_DEVICES=<uuids>, stdout and stderr pipes that the
//      shim relays into JOB_DIR's logs, keeping at most max_log_bytes (node/output_relay.h).
//
// If the service dies before 3, the pipe closes and the shim exits writing "not-started" (the
// job may be started again). The job joins its cgroup before it drops privileges. When the job's
// main process ends, the shim kills what is left of its process group and of its cgroup (so
// nothing, not even a process that left the session, keeps using the GPU share), relays what
// remains in the pipes (waiting at most 2 s for them to close), writes the outcome atomically
// (write + fsync + rename) and exits. Cancelling sends SIGTERM to the shim, which passes it to
// the job's process group and sends SIGKILL after the grace period.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/posix.h"
#include "common/status.h"
#include "launch/budget_dir.h"
#include "launch/cgroup.h"
#include "launch/limit_file.h"
#include "node/job.h"
#include "proc/process_identity.h"

namespace gpufrac::node {

// How much of a job's output (stdout and stderr together) its logs keep when nothing says
// otherwise; also what the shim assumes for a spec written before the limit existed.
inline constexpr uint64_t kDefaultMaxLogBytes = uint64_t{1} << 30;

struct LaunchSpec {
  std::string job_dir;   // Created by Prepare (its parent must exist); must not exist yet.
  std::string workload;  // Names the limiter's budgets; [A-Za-z0-9_.-], at most 63 characters.
  std::vector<std::string> command;  // argv (PATH is searched in the job's environment).
  std::vector<std::string> env;      // "NAME=value"; the variables below are added/overridden.
  std::string cwd;
  uid_t uid = 0;  // When the service is not root, must be its own uid.
  gid_t gid = 0;
  std::vector<launch::LimitedGpu> gpus;  // At least one; in CUDA_VISIBLE_DEVICES order.
  std::string limiter_path;              // Absolute path of libgpufrac.so.
  std::vector<std::string> extra_env;    // Added last (e.g. the simulated driver's variables).
  // Device nodes the job may not open: the node's other GPUs (enforced by the job's cgroup when
  // the service runs as root).
  std::vector<launch::DeviceNode> denied_devices;
  int kill_grace_seconds = 10;  // SIGTERM -> SIGKILL on cancel.
  // Bytes of output (stdout and stderr together) the logs keep; more is read and dropped, and a
  // line in stderr.log says so. At least 1.
  uint64_t max_log_bytes = kDefaultMaxLogBytes;
};

// How the job ended, as JOB_DIR/outcome records it.
struct Outcome {
  enum class Kind { kExited, kSignaled, kNotStarted, kExecFailed };
  Kind kind = Kind::kExited;
  int code = 0;                  // Exit code, signal number, or errno of the failed exec.
  std::string Describe() const;  // "exit code 3", "killed by signal 9 (Killed)", ...
};

class JobRunner {
 public:
  // `shim_path`: the gpufrac-shim executable (absolute); `budgets`: where the jobs' budgets go
  // (the service's budget directory, launch/budget_dir.h).
  JobRunner(std::string shim_path, launch::BudgetDir budgets);
  ~JobRunner();  // Closes go-ahead pipes of prepared shims, which then exit unstarted.
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Step 1. On failure nothing is left behind (no directory, budget or process).
  StatusOr<proc::ProcessId> Prepare(const LaunchSpec& spec);
  // Step 3. kNotFound if `shim` was not prepared by this runner.
  Status Release(const proc::ProcessId& shim);
  // Gives up a prepared shim without starting it (it exits writing "not-started").
  void Abandon(const proc::ProcessId& shim);

  // Reaps any of our shims that have exited (never blocks).
  void ReapChildren();
  // Sends `sig` to the shim if it is still the process `ref` names (SIGTERM = cancel).
  Status Signal(const proc::ProcessId& ref, int sig);

  // The outcome the shim recorded, once it has.
  static std::optional<Outcome> ReadOutcome(const std::string& job_dir);
  // For a job whose shim died without recording an outcome: kills what is left of the job's
  // process group (JOB_DIR/pid names its leader and start time), so that it cannot keep using
  // a GPU share that is about to be given to someone else. True if any of it was still alive.
  static bool KillOrphanedJob(const std::string& job_dir);
  // Removes the limit file, the workload's budgets and its cgroup (killing what is left in it);
  // logs and the outcome stay.
  void Cleanup(const std::string& job_dir, const std::string& workload,
               const std::vector<std::string>& uuids) const;
  // GPU memory `workload` holds on GPU `uuid` now, as its budget counts it (0 when gone).
  uint64_t MemoryInUse(const std::string& workload, const std::string& uuid) const;
  // GPU time (ns) the workload was charged on GPU `uuid` by its compute arbiter; 0 when none.
  uint64_t ComputeTimeUsed(const std::string& workload, const std::string& uuid) const;
  // Whether the workload holds the turn of GPU `uuid`'s compute arbiter now (as the segment,
  // which every workload may write, says).
  bool HoldsComputeTurn(const std::string& workload, const std::string& uuid) const;
  const launch::BudgetDir& budget_dir() const { return budgets_; }

  // File names inside JOB_DIR.
  static constexpr const char* kStdout = "stdout.log";
  static constexpr const char* kStderr = "stderr.log";
  static constexpr const char* kOutcome = "outcome";

 private:
  std::string shim_path_;
  launch::BudgetDir budgets_;
  std::map<pid_t, UniqueFd> go_pipes_;  // Prepared shims: the write end of their go-ahead pipe.
};

}  // namespace gpufrac::node
