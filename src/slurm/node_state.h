// What gpufrac keeps on a Slurm node for the jobs running there: per job, one read-only limit
// file and one budget per GPU, shared by all the job's steps and tasks on the node, and one marker
// per running step naming its slurmstepd. The last step to end removes the job's files; a step
// that starts first removes what steps whose slurmstepd is gone (killed, or the node rebooted)
// left behind.
//
// Layout, all root's and writable by no one else (the node service's rules: root never acts on a
// path a user can change, so every directory is checked after opening and used through its fd):
//   STATE_DIR/                     0711, given in plugstack.conf
//   STATE_DIR/budget-dir           the path of the budget directory (launch/budget_dir.h)
//   STATE_DIR/job-<id>/            0711: the job's user reaches its limit file by name
//   STATE_DIR/job-<id>/limits      0444, the limit file every task of the job reads
//   STATE_DIR/job-<id>/step-<id>   0600, "<pid> <start ticks>" of the step's slurmstepd
// Every change happens under an exclusive lock on STATE_DIR, so steps starting and ending at once
// on one node see each other.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/budget_dir.h"
#include "launch/budgets.h"
#include "launch/limit_file.h"
#include "proc/process_identity.h"

namespace gpufrac::slurm {

class NodeState {
 public:
  // Opens STATE_DIR (making it, mode 0711, and its parent, 0755, if missing) and the budget
  // directory it records. kFailedPrecondition when STATE_DIR is not a directory of the caller's
  // (root) that only it can write, or is a link.
  static StatusOr<NodeState> Open(const std::string& state_dir);

  NodeState(NodeState&&) noexcept;
  NodeState& operator=(NodeState&&) noexcept;
  NodeState(const NodeState&) = delete;
  NodeState& operator=(const NodeState&) = delete;
  ~NodeState();

  // A step of job `job` starts here, run by `stepd`: records it, and unless an earlier step of
  // the job still runs, writes the job's limit file (`limits_text`, launch::LimitFileText's) and
  // creates its budgets on `gpus`, handed to `owner` (nullopt: the job runs as root). A step whose
  // limits differ from those of the job's running steps is refused (kFailedPrecondition): they
  // share the budgets. Returns the limit file's path.
  StatusOr<std::string> BeginStep(uint32_t job, uint32_t step, const proc::ProcessId& stepd,
                                  const std::string& limits_text,
                                  const std::vector<launch::LimitedGpu>& gpus,
                                  std::optional<launch::WorkloadBudgets::Owner> owner);
  // The step ended: forgets it, and removes the job's files when no other step of it runs.
  void EndStep(uint32_t job, uint32_t step);
  // The job ended on this node (its epilog): removes its files whatever steps were recorded.
  void EndJob(uint32_t job);
  // Removes the markers of steps whose slurmstepd is gone, and the files of jobs left with none.
  void Sweep();

  // The budgets' workload name of job `job` ("slurm-<job>").
  static std::string WorkloadName(uint32_t job);
  const launch::BudgetDir& budgets() const { return budgets_; }
  const std::string& path() const { return path_; }

 private:
  NodeState(std::string path, int fd, launch::BudgetDir budgets)
      : path_(std::move(path)), fd_(fd), budgets_(std::move(budgets)) {}
  // Each with the lock held.
  void SweepLocked();
  void RemoveJobLocked(const std::string& job_dir_name, uint32_t job);

  std::string path_;
  int fd_ = -1;
  launch::BudgetDir budgets_;
};

}  // namespace gpufrac::slurm
