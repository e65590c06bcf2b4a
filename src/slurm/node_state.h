// What gpufrac keeps on a Slurm node for the jobs running there: per job, one read-only limit
// file and one budget per GPU, shared by all the job's steps and tasks on the node, and one marker
// per running slurmstepd (a step, or each component of a heterogeneous step). The last step to
// end removes the job's files; a step that starts first removes what steps whose slurmstepd is
// gone (killed, or the node rebooted) left behind.
//
// Layout, all root's and writable by no one else (the node service's rules: root never acts on a
// path a user can change, so every directory is checked after opening and used through its fd):
//   STATE_DIR/                     exactly 0711 (no one else may open it, or hold its lock), given
//                                  in plugstack.conf; every directory above it root's
//                                  and writable by root only (common/posix.h's
//                                  OpenOurDirectoryPath)
//   STATE_DIR/budget-dir           the path of the budget directory B (launch/budget_dir.h), in
//                                  /dev/shm, a tmpfs of its own (8 MiB) mounted by root when new
//   STATE_DIR/job-<id>/            0700, and the job's user may search it (an ACL, user_acl.h)
//   STATE_DIR/job-<id>/limits      0400, and the job's user may read it (ACL): the limit file
//   STATE_DIR/job-<id>/step-<step>.<pid>  0600, "<pid> <start ticks>" of the step's slurmstepd
//   STATE_DIR/job-<id>/ran-<step>  0600, empty: the step began here (kept when it ends)
//   B/compute.<uuid>               each GPU's compute arbiter, shared by every job on the GPU
//   B/job-<id>/                    the job's budgets: a tmpfs of its own, (GPUs + 1) MiB, so that
//                                  its user, who owns the budget files, cannot grow them past it
// Where the state directory's filesystem keeps no ACLs, the job's directory and limit file are
// 0711 and 0444 instead (readable by every local user; private_limits() says which). Where no
// tmpfs can be mounted (not root), B/job-<id> is a plain directory (BegunStep::warning says so).
// Every change happens under an exclusive lock on STATE_DIR, so steps starting and ending at once
// on one node see each other.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/posix.h"
#include "common/status.h"
#include "launch/budget_dir.h"
#include "launch/budgets.h"
#include "launch/limit_file.h"
#include "proc/process_identity.h"
#include "slurm/job_processes.h"

namespace gpufrac::slurm {

// What BeginStep set up for a step.
struct BegunStep {
  std::string limit_file;  // The job's limit file, for GPUFRAC_LIMIT_FILE.
  std::string warning;     // "" or, once per job, what could not be protected on this node.
};

class NodeState {
 public:
  // Opens STATE_DIR (making it, mode 0711, and missing directories above it, 0755) and the
  // budget directory it records, for node `node` (Slurm's name for it: its jobs' cgroups are
  // found by it). kFailedPrecondition, one line, when STATE_DIR or a directory above it fails
  // OpenOurDirectoryPath's checks (common/posix.h): STATE_DIR must be the caller's (root's).
  static StatusOr<NodeState> Open(const std::string& state_dir, const std::string& node);

  NodeState(NodeState&&) noexcept = default;
  NodeState& operator=(NodeState&&) noexcept = default;

  // A step of job `job` starts here, run by `stepd`: records it, and unless an earlier step of
  // the job still runs, writes the job's limit file (`limits_text`, launch::LimitFileText's with
  // JobBudgetDir(job) as its budgets and budgets().path() as its arbiters), readable by `owner`
  // and root only, and creates its budgets on `gpus`, handed to `owner` (nullopt: the job runs as
  // root). A step whose limits differ from those of the job's running steps is refused
  // (kFailedPrecondition): they share the budgets. With `join_running` (a step that asked for no
  // limit of its own, held to what it booked), it shares theirs instead where they cover its GPUs:
  // each step that made them was held to its booking, which is within the job's.
  StatusOr<BegunStep> BeginStep(uint32_t job, uint32_t step, const proc::ProcessId& stepd,
                                const std::string& limits_text,
                                const std::vector<launch::LimitedGpu>& gpus,
                                std::optional<launch::WorkloadBudgets::Owner> owner,
                                bool join_running = false);
  // The step run by `stepd` ended: forgets it, and when no other step of the job (nor another
  // component of the same heterogeneous step) runs, ends the processes left in the cgroups of
  // every step of the job that began here (its "ran-<step>" records; job_processes.h, `stepd`
  // aside), whatever their depth below, and then removes the job's files. kUnavailable, and the
  // files kept, when a process outlives SIGKILL (its GPU memory is still held) or the processes
  // cannot be found for certain.
  Status EndStep(uint32_t job, uint32_t step, const proc::ProcessId& stepd);
  // The job ended on this node (its epilog): ends every process left in the job's cgroups (the
  // caller aside), whether or not gpufrac holds files of it, then removes its files whatever
  // steps were recorded. kUnavailable, and the files kept, as EndStep.
  Status EndJob(uint32_t job);

  // The budgets' workload name of job `job` ("slurm-<job>").
  static std::string WorkloadName(uint32_t job);
  // Where job `job`'s budgets are (B/job-<id>): its limit file's budget directory.
  std::string JobBudgetDir(uint32_t job) const;
  // The node's budget directory B, where the GPUs' compute arbiters are.
  const launch::BudgetDir& budgets() const { return budgets_; }
  const std::string& path() const { return path_; }
  // Whether the jobs' limit files are readable by their own users only (the state directory's
  // filesystem keeps ACLs); else by every local user.
  bool private_limits() const { return private_limits_; }

 private:
  NodeState(std::string path, UniqueFd fd, launch::BudgetDir budgets, bool private_limits,
            std::string node)
      : path_(std::move(path)),
        fd_(std::move(fd)),
        budgets_(std::move(budgets)),
        private_limits_(private_limits),
        node_(std::move(node)),
        cgroup_mounts_(CgroupMounts()) {}
  // Each with the lock held. SweepLocked (every BeginStep): removes the markers of steps whose
  // slurmstepd is gone, and the files of jobs left with none and with no process left in their
  // cgroups (a task whose slurmstepd was killed still holds its memory: its share stays booked
  // until the epilog ends it).
  void SweepLocked();
  void RemoveJobLocked(const std::string& job_dir_name, uint32_t job);
  // Makes B/job-<id> afresh, a tmpfs for `gpus` budgets where it can; the warning when not.
  StatusOr<std::string> MakeJobBudgetDirLocked(uint32_t job, size_t gpus);
  void RemoveJobBudgetDirLocked(uint32_t job);
  // Writes a new job's limit file (`dir`: its directory, open) and makes its budgets; the
  // warnings for the step.
  StatusOr<std::string> StartJobLocked(int dir, uint32_t job, const std::string& limits_text,
                                       const std::vector<launch::LimitedGpu>& gpus,
                                       const std::optional<launch::WorkloadBudgets::Owner>& owner);
  // Records step `step` of the job in `dir` (its marker, and that it ran); on failure nothing
  // of it is left.
  Status RecordStepLocked(int dir, uint32_t step, const proc::ProcessId& stepd,
                          const std::string& shown);

  std::string path_;
  UniqueFd fd_;
  launch::BudgetDir budgets_;
  bool private_limits_ = false;
  std::string node_;
  std::vector<std::string> cgroup_mounts_;  // Where the jobs' cgroups are looked for.
};

}  // namespace gpufrac::slurm
