// Groups a host's GPUs and translates requests onto the groups (see host_gpus.h).
#include "placement/host_gpus.h"

#include <algorithm>

#include "common/compute_share.h"
#include "common/text.h"
#include "placement/gpu_share.h"

namespace gpufrac::placement {

StatusOr<std::vector<GpuGroup>> GroupHostGpus(const std::vector<HostGpu>& gpus) {
  std::vector<GpuGroup> groups;
  for (size_t pos = 0; pos < gpus.size(); ++pos) {
    const HostGpu& gpu = gpus[pos];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GpuGroup& g) {
      return g.model == gpu.model && g.memory_bytes == gpu.memory_bytes &&
             g.context_bytes == gpu.context_bytes && g.whole_only == gpu.whole_only &&
             g.mps == gpu.mps;
    });
    if (it == groups.end()) {
      groups.push_back({.model = gpu.model,
                        .memory_bytes = gpu.memory_bytes,
                        .context_bytes = gpu.context_bytes,
                        .whole_only = gpu.whole_only,
                        .mps = gpu.mps,
                        .members = {},
                        .model_id = -1});
      it = groups.end() - 1;
    }
    it->members.push_back(static_cast<int>(pos));
  }
  for (const GpuGroup& g : groups) {
    if (g.members.size() <= static_cast<size_t>(kMaxGpusPerNode)) continue;
    // A placement node's GPUs are the bits of a GpuSet.
    return InvalidArgumentError("more than " + std::to_string(kMaxGpusPerNode) + " " +
                                (g.model.empty() ? "GPUs of unknown model" : g.model + " GPUs") +
                                " on one node are not supported");
  }
  return groups;
}

NodeSpec GroupNodeSpec(std::string name, const GpuGroup& group, int model) {
  return {.name = std::move(name),
          .cpu_milli = kHostPlenty,
          .memory_bytes = kHostPlenty,
          .model = model,
          .gpu_count = static_cast<int>(group.members.size()),
          .gpu_memory_bytes = group.memory_bytes};
}

std::optional<Request> RequestOnGroup(const GpuRequest& r, const GpuGroup& g) {
  if (r.kind == GpuRequest::Kind::kMigProfile) return std::nullopt;  // Needs a GPU in MIG mode.
  if (!r.gpu_model.empty() && !EqualsIgnoreCase(g.model, r.gpu_model)) return std::nullopt;
  if (r.gpus == 0 || r.gpus > g.members.size()) return std::nullopt;
  const bool whole = r.kind == GpuRequest::Kind::kWholeGpus;
  if (g.whole_only && !whole) return std::nullopt;
  // An MPS client reaches one daemon, and a daemon serves one GPU here.
  if (g.mps && !whole && r.gpus > 1) return std::nullopt;
  Request p;
  if (!r.gpu_model.empty() && g.model_id >= 0) p.models = ModelSet{1} << g.model_id;
  p.gpu_count = r.gpus;
  const uint64_t total = g.memory_bytes;
  if (whole) {
    if (total <= g.context_bytes) return std::nullopt;
    p.gpu_milli = kMilli;
    p.gpu_memory_bytes = total;
    return p;
  }
  std::optional<GpuShareSize> share =
      r.kind == GpuRequest::Kind::kMemory
          ? ShareForMemory(r.memory_bytes, total, g.context_bytes)
          : ShareForFraction(r.fraction_milli, total, g.context_bytes);
  if (!share) return std::nullopt;
  // The share is of the GPU's time: its compute request.
  p.gpu_milli = ComputeRequestMilli(r, share->milli);
  p.gpu_memory_bytes = share->memory_bytes;
  return p;
}

}  // namespace gpufrac::placement
