// The labels the node agent puts on its node: GPU feature discovery's names (what NVIDIA's users
// select on in nodeSelectors and affinities), MIG's included, plus gpufrac's own.
#pragma once

#include <optional>
#include <set>
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

// The node annotation where the agent records the keys of the labels it wrote (comma-separated,
// sorted): what it may remove once it no longer publishes them. GPU feature discovery writes
// labels of the same families (nvidia.com/mig.strategy, nvidia.com/mig-*.count, ...), and an
// operator may set nvidia.com/mig.strategy by hand; those the agent did not write stay.
inline constexpr std::string_view kAnnotationAgentLabels = "gpufrac.io/labels";

// The record's text for `keys`, and back (empty keys dropped).
std::string LabelRecord(const std::set<std::string>& keys);
std::set<std::string> ParseLabelRecord(std::string_view text);

// Whether the agent removes label `key`, which is on the node but not among the labels it
// publishes now. With a record (`written`, kAnnotationAgentLabels): when the record holds it. With
// none (an agent from before the record, which left labels no longer true, as issue 29's trial
// saw): when it is of NvidiaMigLabels' families (nvidia.com/mig.strategy,
// nvidia.com/mig-<any profile>.count, .memory, .slices.gi, .slices.ci, nvidia.com/gpu.slices.gi
// and .ci) or a gpufrac.io/ label the agent writes; this happens once, the record being written
// with it. Either way, with `mig_state`, nvidia.com/mig.config.state (the agent has no static MIG
// GPUs, so no MigConfigLabel sets it).
bool AgentRemovesLabel(std::string_view key, const std::optional<std::set<std::string>>& written,
                       bool mig_state);

}  // namespace gpufrac::k8s
