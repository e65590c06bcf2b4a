// The driver's MIG control: gpu::MigControl (NVML) behind the MigBackend interface, translating
// between the driver's profile ids and the catalogue's profile indexes.
#pragma once

#include <map>

#include "gpu/mig_catalogue.h"
#include "gpu/mig_device.h"
#include "mig/backend.h"

namespace gpufrac::mig {

class NvmlMigBackend : public MigBackend {
 public:
  // `control` must outlive this object; `models` gives each GPU index's MIG model.
  NvmlMigBackend(const gpu::MigControl* control, std::map<int, const gpu::MigModel*> models);

  StatusOr<std::vector<InstanceInfo>> List(int gpu) override;
  StatusOr<InstanceInfo> Create(int gpu, int profile, gpu::MigPlacement placement) override;
  Status Destroy(int gpu, unsigned gi_id) override;
  StatusOr<bool> SetMode(int gpu, bool enabled) override;

 private:
  StatusOr<const gpu::MigModel*> Model(int gpu) const;
  const gpu::MigControl* control_;
  std::map<int, const gpu::MigModel*> models_;
};

}  // namespace gpufrac::mig
