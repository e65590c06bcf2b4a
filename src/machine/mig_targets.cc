// A machine's GPUs as MIG apply targets (mig_targets.h).
#include "machine/mig_targets.h"

#include "gpu/catalogue.h"

namespace gpufrac::machine {

const gpu::MigModel* MigTablesOf(const NodeGpu& gpu, const DriverMigTables& driver) {
  if (auto it = driver.find(gpu.index); it != driver.end()) return it->second;
  return gpu.model.empty() ? nullptr : gpu::FindMigModel(gpu.model);
}

mig::ApplyTarget MigApplyTarget(const NodeGpu& gpu, const DriverMigTables& driver, bool busy) {
  return {.index = gpu.index,
          .model = gpu.model.empty() ? nullptr : gpu::FindModel(gpu.model),
          .mig_enabled = gpu.mode == gpu::GpuMode::kMig,
          .mig_model = MigTablesOf(gpu, driver),
          .busy = busy};
}

}  // namespace gpufrac::machine
