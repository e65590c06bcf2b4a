// Creates, hands over and removes a workload's shared budgets (see budgets.h).
#include "launch/budgets.h"

#include <unistd.h>

#include <utility>

#include "limiter/budget.h"
#include "limiter/compute_arbiter.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

// The budget's file name in a budget directory ("gpufrac.<workload>.<uuid>"), or "".
std::string BudgetFileOf(const std::string& workload, const std::string& uuid) {
  char name[160];
  if (!limiter::BudgetName(workload.c_str(), uuid.c_str(), name, sizeof(name))) return "";
  return name + 1;
}

}  // namespace

std::string ComputeArbiterName(const std::string& uuid) { return "compute." + uuid; }

Status EnsureComputeArbiter(const BudgetDir& dir, const std::string& uuid) {
  char err[400];
  if (!limiter::ComputeArbiter::CreateAt(dir.fd(), ComputeArbiterName(uuid).c_str(),
                                         limiter::kDefaultTurnNs, err, sizeof(err))) {
    return UnavailableError(err);
  }
  return OkStatus();
}

StatusOr<WorkloadBudgets> WorkloadBudgets::Create(const BudgetDir& dir, const std::string& workload,
                                                  const std::vector<LimitedGpu>& gpus,
                                                  std::optional<Owner> owner,
                                                  const BudgetDir* arbiters) {
  WorkloadBudgets made(&dir);  // Removes what it holds if a later GPU fails.
  for (const LimitedGpu& gpu : gpus) {
    std::string name = BudgetFileOf(workload, gpu.uuid);
    if (name.empty()) {
      return InvalidArgumentError("no budget name for workload '" + workload + "' on " + gpu.uuid);
    }
    // Only this launcher creates names in its directory: what is there is its own leftover.
    limiter::Budget::UnlinkAt(dir.fd(), name.c_str());
    char err[400];
    if (!limiter::Budget::CreateAt(dir.fd(), name.c_str(), gpu.limit_bytes, gpu.context_bytes,
                                   owner ? static_cast<int>(owner->uid) : -1,
                                   owner ? static_cast<int>(owner->gid) : -1, err, sizeof(err))) {
      return UnavailableError(err);
    }
    made.names_.push_back(name);
    if (arbiters != nullptr && gpu.compute) {
      GPUFRAC_RETURN_IF_ERROR(EnsureComputeArbiter(*arbiters, gpu.uuid));
    }
  }
  return made;
}

WorkloadBudgets::WorkloadBudgets(WorkloadBudgets&& other) noexcept
    : dir_(other.dir_), names_(std::exchange(other.names_, {})) {}

WorkloadBudgets& WorkloadBudgets::operator=(WorkloadBudgets&& other) noexcept {
  if (this != &other) {
    for (const std::string& name : names_) limiter::Budget::UnlinkAt(dir_->fd(), name.c_str());
    dir_ = other.dir_;
    names_ = std::exchange(other.names_, {});
  }
  return *this;
}

WorkloadBudgets::~WorkloadBudgets() {
  for (const std::string& name : names_) limiter::Budget::UnlinkAt(dir_->fd(), name.c_str());
}

void WorkloadBudgets::Remove(const BudgetDir& dir, const std::string& workload,
                             const std::vector<std::string>& uuids) {
  for (const std::string& uuid : uuids) {
    std::string name = BudgetFileOf(workload, uuid);
    if (!name.empty()) limiter::Budget::UnlinkAt(dir.fd(), name.c_str());
  }
}

uint64_t WorkloadBudgets::MemoryInUse(const BudgetDir& dir, const std::string& workload,
                                      const std::string& uuid) {
  std::string name = BudgetFileOf(workload, uuid);
  if (name.empty()) return 0;
  uint64_t used = 0;
  return limiter::Budget::PeekUsedAt(dir.fd(), name.c_str(), &used) ? used : 0;
}

bool WorkloadBudgets::HoldsComputeTurn(const BudgetDir& dir, const std::string& workload,
                                       const std::string& uuid) {
  limiter::ComputeArbiter::Peeked peeked;
  return limiter::ComputeArbiter::Peek(dir.fd(), ComputeArbiterName(uuid).c_str(),
                                       workload.c_str(), &peeked) &&
         peeked.holds_turn;
}

uint64_t WorkloadBudgets::ComputeTimeUsed(const BudgetDir& dir, const std::string& workload,
                                          const std::string& uuid) {
  uint64_t ns = 0;
  return limiter::ComputeArbiter::PeekUsedNs(dir.fd(), ComputeArbiterName(uuid).c_str(),
                                             workload.c_str(), &ns)
             ? ns
             : 0;
}

}  // namespace gpufrac::launch
