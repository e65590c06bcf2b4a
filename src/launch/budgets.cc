// Creates, hands over and removes a workload's shared budgets (see budgets.h).
#include "launch/budgets.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "limiter/budget.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

std::string BudgetNameOf(const std::string& workload, const std::string& uuid) {
  char name[160];
  if (!limiter::BudgetName(workload.c_str(), uuid.c_str(), name, sizeof(name))) return "";
  return name;
}

}  // namespace

StatusOr<WorkloadBudgets> WorkloadBudgets::Create(const std::string& workload,
                                                  const std::vector<LimitedGpu>& gpus,
                                                  std::optional<Owner> owner) {
  WorkloadBudgets made;  // Removes what it holds if a later GPU fails.
  for (const LimitedGpu& gpu : gpus) {
    std::string name = BudgetNameOf(workload, gpu.uuid);
    if (name.empty()) {
      return InvalidArgumentError("no budget name for workload '" + workload + "' on " + gpu.uuid);
    }
    limiter::Budget::Unlink(name.c_str());
    limiter::Budget budget;
    char err[400];
    if (!budget.Open(name.c_str(), gpu.limit_bytes, gpu.context_bytes, err, sizeof(err))) {
      return UnavailableError(err);
    }
    budget.Close();
    made.names_.push_back(name);
    if (owner) {
      // Segments are created 0600; the workload's processes map them read-write as their owner.
      std::string path = "/dev/shm/" + name.substr(1);
      if (chown(path.c_str(), owner->uid, owner->gid) != 0) {
        return UnavailableError("cannot hand the budget " + path + " to uid " +
                                std::to_string(owner->uid) + ": " + std::strerror(errno));
      }
    }
  }
  return made;
}

WorkloadBudgets::WorkloadBudgets(WorkloadBudgets&& other) noexcept
    : names_(std::exchange(other.names_, {})) {}

WorkloadBudgets& WorkloadBudgets::operator=(WorkloadBudgets&& other) noexcept {
  if (this != &other) {
    for (const std::string& name : names_) limiter::Budget::Unlink(name.c_str());
    names_ = std::exchange(other.names_, {});
  }
  return *this;
}

WorkloadBudgets::~WorkloadBudgets() {
  for (const std::string& name : names_) limiter::Budget::Unlink(name.c_str());
}

void WorkloadBudgets::Remove(const std::string& workload, const std::vector<std::string>& uuids) {
  for (const std::string& uuid : uuids) {
    std::string name = BudgetNameOf(workload, uuid);
    if (!name.empty()) limiter::Budget::Unlink(name.c_str());
  }
}

uint64_t WorkloadBudgets::MemoryInUse(const std::string& workload, const std::string& uuid) {
  std::string name = BudgetNameOf(workload, uuid);
  if (name.empty()) return 0;
  uint64_t used = 0;
  return limiter::Budget::PeekUsed(name.c_str(), &used) ? used : 0;
}

}  // namespace gpufrac::launch
