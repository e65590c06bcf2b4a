// Why a request can never run on a kind of GPU, in the pod's words (see unfit_reasons.h).
#include "k8s/unfit_reasons.h"

#include "common/text.h"
#include "common/units.h"
#include "gpu/catalogue.h"
#include "mig/planner.h"

namespace gpufrac::k8s {
namespace {

// The key the container gave its amount with: a gpufrac.io resource or a KAI annotation.
std::string AmountKey(const ContainerRequest& c) {
  if (c.request.kind == GpuRequest::Kind::kMemory) {
    return std::string(c.from_annotations ? kKaiGpuMemory : kResourceGpuMemory);
  }
  return std::string(c.from_annotations ? kKaiGpuFraction : kResourceGpuFraction);
}

}  // namespace

std::string WhyNeverOnGroup(const ContainerRequest& c, const placement::GpuGroup& group) {
  const GpuRequest& r = c.request;
  if (r.kind == GpuRequest::Kind::kMigProfile) {
    return "not in MIG mode (" + std::string(kAnnotationMigProfile) + " needs a MIG GPU)";
  }
  if (!r.gpu_model.empty() && !EqualsIgnoreCase(group.model, r.gpu_model)) {
    return "not " + r.gpu_model + " (" + std::string(kAnnotationGpuModel) + ")";
  }
  if (r.gpus > group.members.size()) {
    return std::to_string(group.members.size()) + " of them, " + std::to_string(r.gpus) +
           " asked (" + std::string(kResourceGpu) + ")";
  }
  const bool whole = r.kind == GpuRequest::Kind::kWholeGpus;
  if (group.whole_only && !whole) {
    return "whole GPUs only (ask " + std::string(kResourceGpu) + " without " + AmountKey(c) + ")";
  }
  if (group.mps && !whole && r.gpus > 1) {
    return "MPS serves a share of one GPU per container (" + std::string(kResourceGpu) + ": 1)";
  }
  const uint64_t room =
      group.memory_bytes > group.context_bytes ? group.memory_bytes - group.context_bytes : 0;
  if (whole) return "too small to hold a CUDA context (" + FormatSize(group.memory_bytes) + ")";
  if (r.kind == GpuRequest::Kind::kMemory) {
    if (r.memory_bytes > room) {
      return FormatSize(group.memory_bytes) + " each, at most " + FormatSize(room) + " of it for " +
             AmountKey(c) + " beside a CUDA context";
    }
    return AmountKey(c) + " must be more than a CUDA context's " +
           FormatSize(group.context_bytes);
  }
  return AmountKey(c) + " gives " +
         FormatSize(BytesOfShare(group.memory_bytes, r.fraction_milli)) +
         ", not more than a CUDA context's " + FormatSize(group.context_bytes);
}

std::string WhyNeverOnMig(const ContainerRequest& c, const gpu::MigModel& model) {
  const GpuRequest& r = c.request;
  const std::string name = model.model != nullptr ? std::string(model.model->short_name) : "";
  if (!r.gpu_model.empty() && !EqualsIgnoreCase(name, r.gpu_model)) {
    return "not " + r.gpu_model + " (" + std::string(kAnnotationGpuModel) + ")";
  }
  if (r.kind == GpuRequest::Kind::kWholeGpus) {
    return "in MIG mode: its instances are given out, not whole GPUs (ask " +
           std::string(kResourceGpuMemory) + ", " + std::string(kResourceGpuFraction) + " or " +
           std::string(kAnnotationMigProfile) + ")";
  }
  if (r.gpus > 1) {
    return "in MIG mode: an instance is one GPU (" + std::string(kResourceGpu) + ": 1)";
  }
  if (mig::SmallestProfile(model, r).ok()) return "";
  if (r.kind == GpuRequest::Kind::kMigProfile) {
    return "no MIG profile " + r.mig_profile + " on " + name;
  }
  const gpu::MigProfile* largest = nullptr;
  for (int p = 0; p < model.profile_count; ++p) {
    if (largest == nullptr || model.profiles[p].memory_bytes > largest->memory_bytes) {
      largest = &model.profiles[p];
    }
  }
  return "in MIG mode: more than its largest MIG profile" +
         (largest ? ", " + gpu::MigProfileName(model, *largest) + "," : std::string()) +
         " holds";
}

}  // namespace gpufrac::k8s
