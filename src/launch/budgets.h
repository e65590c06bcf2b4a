// The shared memory budgets of one workload, one per GPU it is limited on (limiter/budget.h), in
// the launcher's budget directory (launch/budget_dir.h). Every launcher creates and removes them
// through this one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "launch/budget_dir.h"
#include "launch/limit_file.h"

namespace gpufrac::launch {

// The file name of GPU `uuid`'s compute arbiter in a budget directory ("compute.<uuid>").
std::string ComputeArbiterName(const std::string& uuid);
// Makes GPU `uuid`'s compute arbiter in `dir` unless it exists (limiter/compute_arbiter.h: every
// workload on the GPU shares it, and it outlives them).
Status EnsureComputeArbiter(const BudgetDir& dir, const std::string& uuid);

class WorkloadBudgets {
 public:
  // The user the workload runs as, when the launcher (root) is not that user: the budgets are
  // handed to it so that its processes can map them read-write.
  struct Owner {
    uid_t uid = 0;
    gid_t gid = 0;
  };

  // Creates a budget in `dir` for each GPU with its limit and context charge, replacing any left
  // by an earlier attempt of the same workload (which would keep its old limit), and, in
  // `arbiters` (nullptr: the caller sees to them), the compute arbiter of each GPU whose compute
  // is arbitrated unless it exists. All or nothing for the budgets: on failure none is left.
  // `dir` must outlive this object.
  static StatusOr<WorkloadBudgets> Create(const BudgetDir& dir, const std::string& workload,
                                          const std::vector<LimitedGpu>& gpus,
                                          std::optional<Owner> owner, const BudgetDir* arbiters);

  WorkloadBudgets(WorkloadBudgets&& other) noexcept;
  WorkloadBudgets& operator=(WorkloadBudgets&& other) noexcept;
  WorkloadBudgets(const WorkloadBudgets&) = delete;
  WorkloadBudgets& operator=(const WorkloadBudgets&) = delete;
  // Removes the budgets unless Keep() handed them on.
  ~WorkloadBudgets();

  // Hands the budgets to a record that outlives this object (the node service's job), which
  // removes them later with Remove().
  void Keep() { names_.clear(); }

  // Removes `workload`'s budgets in `dir` on these GPUs (those that exist).
  static void Remove(const BudgetDir& dir, const std::string& workload,
                     const std::vector<std::string>& uuids);
  // GPU memory the workload holds on GPU `uuid` now, as its budget in `dir` counts it; 0 when
  // the budget is gone or is not a budget. Never blocks, whatever the workload did to its file.
  static uint64_t MemoryInUse(const BudgetDir& dir, const std::string& workload,
                              const std::string& uuid);
  // GPU time (ns) the GPU's compute arbiter in `dir` charged the workload so far; 0 when its
  // compute is not arbitrated. Never blocks.
  static uint64_t ComputeTimeUsed(const BudgetDir& dir, const std::string& workload,
                                  const std::string& uuid);
  // Whether the workload holds the turn of GPU `uuid`'s compute arbiter in `dir` now, as the
  // segment says. Never blocks.
  static bool HoldsComputeTurn(const BudgetDir& dir, const std::string& workload,
                               const std::string& uuid);

 private:
  explicit WorkloadBudgets(const BudgetDir* dir) : dir_(dir) {}
  const BudgetDir* dir_ = nullptr;
  std::vector<std::string> names_;  // Names in dir_ this object removes.
};

}  // namespace gpufrac::launch
