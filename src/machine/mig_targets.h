// The MIG facts of a machine's GPUs, built one way for everyone who applies MIG layouts (the node
// service's MIG hardware, the Kubernetes agent's nvidia.com/mig.config label): each GPU's profile
// tables and the GPU as mig::ApplyConfig sees it.
#pragma once

#include <map>

#include "gpu/mig_catalogue.h"
#include "machine/node_gpu.h"
#include "mig/apply.h"

namespace gpufrac::machine {

// The driver's MIG profile tables, by GPU index (NodeGpus::mig_models: GPUs in MIG mode).
using DriverMigTables = std::map<int, const gpu::MigModel*>;

// The MIG profile tables of `gpu`: its driver's when `driver` has them (they win: a driver may
// offer other profiles than the catalogue knows), else the catalogue's for its model; null for
// a GPU of no known model or one without MIG.
const gpu::MigModel* MigTablesOf(const NodeGpu& gpu, const DriverMigTables& driver);

// `gpu` as a MIG layout is applied to it now: its catalogue model (null when unknown), whether it
// is in MIG mode, its tables (MigTablesOf) and `busy` (its instances serve workloads).
mig::ApplyTarget MigApplyTarget(const NodeGpu& gpu, const DriverMigTables& driver, bool busy);

}  // namespace gpufrac::machine
