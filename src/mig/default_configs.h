// The mig-parted configurations every node knows without a file, named as in NVIDIA's MIG
// manager (all-disabled, all-enabled, all-1g.10gb, all-balanced, ...) and built from the MIG
// catalogue, and their merge with an operator's own file.
#pragma once

#include "mig/mig_parted.h"

namespace gpufrac::mig {

// One file that serves every catalogue model: each configuration has one entry per MIG model
// that can realise it (device-filter: that model's PCI id), so a name such as all-1g.10gb
// applies to H100-80GB and A100-80GB alike and matches no GPU of a model it means nothing on.
//
//   all-disabled   every GPU with MIG mode off
//   all-enabled    every GPU with MIG mode on and no instances
//   all-<profile>  as many instances of the profile as fit ("+" written "."; all-1g.10gb.me)
//   all-balanced   two of the smallest profile, one 2g and one 3g (one 2g on 4-slice models)
//
// Configurations appear in that order, profiles in catalogue order.
MigPartedFile DefaultMigConfigs();

// `defaults` with every configuration of `operators` added; one with the name of a default
// replaces it whole (the operator's name wins), as NVIDIA's MIG manager's ConfigMap does.
MigPartedFile MergeMigConfigs(MigPartedFile defaults, const MigPartedFile& operators);

}  // namespace gpufrac::mig
