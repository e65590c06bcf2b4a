// The labels the node agent puts on its node: GPU feature discovery's names (what NVIDIA's users
// select on in nodeSelectors and affinities), MIG's included, plus gpufrac's own.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "k8s/inventory.h"
#include "k8s/nvidia_provider.h"

namespace gpufrac::k8s {

// `text` as a label value: at most 63 characters of [A-Za-z0-9._-], starting and ending
// alphanumeric (others become '-', the ends are trimmed).
std::string LabelValue(std::string text);

// The node's GPU labels (nvidia.com/gpu.present, .count, .product, .memory, mig.capable) and
// gpufrac's own, from every GPU of the node.
std::vector<std::pair<std::string, std::string>> NodeLabels(const NodeInventory& inventory,
                                                            const std::string& product_name);

// GPU feature discovery's MIG labels for the static MIG GPUs of `gpus` (none without any):
// nvidia.com/mig.strategy, and
// - mixed: for each profile with instances, nvidia.com/mig-<profile>.count, .memory (MiB),
//   .slices.gi and .slices.ci ("+me" written ".me", as in the resource name);
// - single, when every instance is of one profile: nvidia.com/gpu.product
//   "<product>-MIG-<profile>", nvidia.com/gpu.count (instances), nvidia.com/gpu.memory (MiB of
//   one instance), nvidia.com/gpu.slices.gi and .slices.ci, which replace NodeLabels' values.
// Every other per-profile label of those GPUs' models comes with nullopt: removed (a merge
// patch's null), so the labels of a profile that vanished go with it.
std::vector<std::pair<std::string, std::optional<std::string>>> NvidiaMigLabels(
    const NodeInventory& all, const NvidiaGpus& gpus, const std::string& product_name);

// Whether the agent owns label `key`: NvidiaMigLabels' families (nvidia.com/mig.strategy,
// nvidia.com/mig-<any profile>.count, .memory, .slices.gi, .slices.ci, nvidia.com/gpu.slices.gi
// and .ci) and gpufrac.io/ labels NodeLabels writes, and with `mig_state`
// nvidia.com/mig.config.state (the agent has no static MIG GPUs, so no MigConfigLabel sets it).
// Such a label on the node that the agent does not publish now is no longer true: an earlier
// agent (or this one, before a restart) wrote it, and it is removed.
bool AgentOwnsLabel(std::string_view key, bool mig_state);

}  // namespace gpufrac::k8s
