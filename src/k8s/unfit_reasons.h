// Why a container's GPU request can never run on one kind of GPU of a node, in the words of the
// pod's spec ("gpufrac.io/gpu-memory: 90000 MiB"), for the FailedScheduling event: the ledger
// gives one such phrase per kind of GPU on a node that holds nothing of the request, so that a
// user sees what each GPU there lacks, not only the last one tried.
#pragma once

#include <string>

#include "common/gpu_request.h"
#include "gpu/mig_catalogue.h"
#include "k8s/pod_request.h"
#include "placement/host_gpus.h"

namespace gpufrac::k8s {

// Why `c` cannot run on the GPUs of `group` (shared, whole-only or MPS; not in MIG mode), when
// placement::RequestOnGroup says it cannot, checked in the same order: a MIG profile, another
// model, more GPUs than the group has, a share on a whole-only group, shares of several MPS GPUs,
// or more memory (or a smaller share) than a GPU holds beside a CUDA context.
std::string WhyNeverOnGroup(const ContainerRequest& c, const placement::GpuGroup& group);

// Why `c` cannot run on a GPU of `model` in MIG mode: whole GPUs or several GPUs asked, another
// model, a profile the model does not have, or more memory than its largest profile holds.
// Empty when some profile holds it (the GPU may only be busy now).
std::string WhyNeverOnMig(const ContainerRequest& c, const gpu::MigModel& model);

}  // namespace gpufrac::k8s
