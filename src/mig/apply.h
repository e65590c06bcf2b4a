// Applying a configuration of a mig-parted file to GPUs through the driver's MIG control:
// everything is checked before anything changes, and a failure part-way puts back the layout
// the GPUs had (what the apply created is destroyed, what it removed is created again).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/catalogue.h"
#include "gpu/mig_catalogue.h"
#include "mig/backend.h"
#include "mig/mig_parted.h"

namespace gpufrac::mig {

// A GPU the configuration may apply to, as its owner sees it now.
struct ApplyTarget {
  int index = 0;
  const gpu::GpuModel* model = nullptr;  // Null: not in the catalogue (never matched).
  bool mig_enabled = false;
  const gpu::MigModel* mig_model = nullptr;  // Its profile tables; null when gpufrac lacks them.
  bool busy = false;                         // Instances of it serve workloads.
};

// The first entry of `config` that applies to `target` (the one ApplyConfig applies to it), or
// nullptr: none does, or the target's model is unknown.
const MigPartedEntry* EntryFor(const MigPartedConfig& config, const ApplyTarget& target);

// The configuration called `name` in `file`, or its only one when `name` is empty. Errors name
// the configurations the file has.
StatusOr<const MigPartedConfig*> ChooseConfig(const MigPartedFile& file, const std::string& name);

// What ApplyConfig checks before it changes anything, without changing anything: OK when
// `config` would apply to `gpus` as they are (busy ones refused as ApplyConfig refuses them).
Status CheckConfig(const MigPartedConfig& config, const std::vector<ApplyTarget>& gpus);

// Replaces the instances of every GPU in MIG mode that `config` matches by its layout. Refused
// (nothing changed) when a matched GPU's MIG mode differs from the configuration's, a matched GPU
// is busy, a layout does not fit, or nothing matches. Returns a line per GPU changed ("GPU 0:
// 3g.40gb@0 2g.20gb@4 ...").
StatusOr<std::vector<std::string>> ApplyConfig(const MigPartedConfig& config,
                                               const std::vector<ApplyTarget>& gpus,
                                               MigBackend& backend);

}  // namespace gpufrac::mig
