// The node's GPUs as MIG hardware: which profile tables each GPU's MIG uses, turning MIG mode on
// and off on the driver, and mig-parted layouts applied to the GPUs and read back from them. It
// knows no jobs: the service says which GPUs are busy, and rebuilds its lanes after a change.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/mig_catalogue.h"
#include "machine/node_gpu.h"
#include "mig/backend.h"
#include "mig/mig_parted.h"

namespace gpufrac::node {

class MigHardware {
 public:
  // `backend` (null: MIG cannot be driven here) and the tables in `models` (per GPU index, what
  // its driver reported; others use the catalogue) must outlive this.
  MigHardware(mig::MigBackend* backend, std::map<int, const gpu::MigModel*> models);

  mig::MigBackend* backend() const { return backend_; }
  // The MIG tables of `gpu`: its driver's when known, else the catalogue's; null without MIG.
  const gpu::MigModel* ModelOf(const machine::NodeGpu& gpu) const;
  // Whether gpufrac can drive MIG on `gpu`: OK when it has tables and there is a backend, else
  // kFailedPrecondition ("GPU 2 (L4) has no MIG") or kUnavailable.
  Status CheckDrives(const machine::NodeGpu& gpu) const;
  bool Drives(const machine::NodeGpu& gpu) const { return backend_ && ModelOf(gpu); }

  // Sets MIG mode on `gpu`, which must be idle and driven (CheckDrives); turning it off destroys
  // its (idle) instances first, since the driver refuses under them. Returns true when the change
  // waits for a GPU reset.
  StatusOr<bool> SetMode(const machine::NodeGpu& gpu, bool enabled);

  // Applies mig-parted configuration `config` to `gpus` (mig::ApplyConfig; `busy` says which
  // GPUs' instances serve jobs). Returns a line per GPU changed.
  StatusOr<std::vector<std::string>> Apply(const mig::MigPartedConfig& config,
                                           const std::vector<machine::NodeGpu>& gpus,
                                           const std::function<bool(int index)>& busy);
  // The current layout of `gpus` as a mig-parted file with one configuration called `name`.
  StatusOr<std::string> Export(const std::string& name,
                               const std::vector<machine::NodeGpu>& gpus) const;

 private:
  mig::MigBackend* backend_;
  std::map<int, const gpu::MigModel*> models_;
};

}  // namespace gpufrac::node
