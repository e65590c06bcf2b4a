// The node's labels: GPU feature discovery's names and gpufrac's own (see node_labels.h).
#include "k8s/node_labels.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <set>

#include "gpu/mig_catalogue.h"

namespace gpufrac::k8s {
namespace {

// The per-profile label suffixes GFD writes and the catalogue knows.
constexpr std::string_view kProfileFields[] = {".count", ".memory", ".slices.gi", ".slices.ci"};

}  // namespace

std::string LabelValue(std::string text) {
  for (char& c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  }
  if (text.size() > 63) text.resize(63);
  while (!text.empty() && !std::isalnum(static_cast<unsigned char>(text.back()))) text.pop_back();
  while (!text.empty() && !std::isalnum(static_cast<unsigned char>(text.front()))) text.erase(0, 1);
  return text;
}

std::vector<std::pair<std::string, std::string>> NodeLabels(const NodeInventory& inventory,
                                                            const std::string& product_name) {
  std::vector<std::pair<std::string, std::string>> labels;
  uint64_t memory_mib = 0;
  bool mig_capable = false;
  int mig = 0;
  for (const GpuInfo& g : inventory.gpus) {
    memory_mib = std::max(memory_mib, g.memory_bytes >> 20);
    mig_capable |= gpu::FindMigModel(g.model) != nullptr;
    mig += g.mode == GpuMode::kMig;
  }
  labels.push_back({"nvidia.com/gpu.present", "true"});
  labels.push_back({"nvidia.com/gpu.count", std::to_string(inventory.gpus.size())});
  labels.push_back({"nvidia.com/gpu.product", LabelValue(product_name)});
  labels.push_back({"nvidia.com/gpu.memory", std::to_string(memory_mib)});
  labels.push_back({"nvidia.com/mig.capable", mig_capable ? "true" : "false"});
  labels.push_back({"gpufrac.io/agent", "true"});
  labels.push_back({"gpufrac.io/gpu-model",
                    LabelValue(inventory.gpus.empty() ? "" : inventory.gpus.front().model)});
  labels.push_back({"gpufrac.io/mig-gpus", std::to_string(mig)});
  return labels;
}

std::vector<std::pair<std::string, std::optional<std::string>>> NvidiaMigLabels(
    const NodeInventory& all, const NvidiaGpus& gpus, const std::string& product_name) {
  std::vector<std::pair<std::string, std::optional<std::string>>> labels;
  struct Seen {
    int count = 0;
    const gpu::MigProfile* profile = nullptr;
  };
  std::map<std::string, Seen> profiles;  // By profile name.
  std::set<std::string> known;           // Every profile of the static GPUs' models.
  for (int index : gpus.static_mig) {
    const GpuInfo* g = FindGpu(all, index);
    const gpu::MigModel* model = g != nullptr ? gpu::FindMigModel(g->model) : nullptr;
    if (model == nullptr) continue;
    for (int i = 0; i < model->profile_count; ++i) {
      known.insert(gpu::MigProfileName(*model, model->profiles[i]));
    }
    for (const MigInstanceInfo& m : g->mig) {
      Seen& seen = profiles[m.profile];
      ++seen.count;
      seen.profile = gpu::FindMigProfile(*model, m.profile);
    }
  }
  if (gpus.static_mig.empty()) return labels;  // The caller removes what an earlier agent wrote.
  labels.push_back({"nvidia.com/mig.strategy", MigStrategyName(gpus.mig_strategy)});
  const bool single = gpus.mig_strategy == MigStrategy::kSingle;
  // A profile's label values: count, memory, GI and CI slices (the CI spans its GI).
  auto values = [](const Seen& s) {
    const int slices = s.profile != nullptr ? s.profile->compute_slices : 0;
    const uint64_t mib = s.profile != nullptr ? s.profile->memory_bytes >> 20 : 0;
    return std::vector<std::string>{std::to_string(s.count), std::to_string(mib),
                                    std::to_string(slices), std::to_string(slices)};
  };
  for (const std::string& name : known) {
    auto seen = profiles.find(name);
    const bool present = !single && seen != profiles.end();
    const std::string prefix = NvidiaMigResource(name);
    std::vector<std::string> v = present ? values(seen->second) : std::vector<std::string>();
    for (size_t f = 0; f < std::size(kProfileFields); ++f) {
      labels.push_back({prefix + std::string(kProfileFields[f]),
                        present ? std::optional<std::string>(v[f]) : std::nullopt});
    }
  }
  if (single && profiles.size() == 1) {
    const auto& [name, seen] = *profiles.begin();
    std::vector<std::string> v = values(seen);
    labels.push_back({"nvidia.com/gpu.product", LabelValue(product_name + "-MIG-" + name)});
    labels.push_back({"nvidia.com/gpu.count", v[0]});
    labels.push_back({"nvidia.com/gpu.memory", v[1]});
    labels.push_back({"nvidia.com/gpu.slices.gi", v[2]});
    labels.push_back({"nvidia.com/gpu.slices.ci", v[3]});
  } else {
    labels.push_back({"nvidia.com/gpu.slices.gi", std::nullopt});
    labels.push_back({"nvidia.com/gpu.slices.ci", std::nullopt});
  }
  return labels;
}

std::string LabelRecord(const std::set<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) text += (text.empty() ? "" : ",") + key;
  return text;
}

std::set<std::string> ParseLabelRecord(std::string_view text) {
  std::set<std::string> keys;
  while (!text.empty()) {
    const size_t comma = std::min(text.find(','), text.size());
    if (comma > 0) keys.emplace(text.substr(0, comma));
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return keys;
}

bool AgentRemovesLabel(std::string_view key, const std::optional<std::set<std::string>>& written,
                       bool mig_state) {
  if (mig_state && key == "nvidia.com/mig.config.state") return true;
  if (written) return written->count(std::string(key)) > 0;
  constexpr std::string_view kProfilePrefix = "nvidia.com/mig-";
  if (key.starts_with(kProfilePrefix)) {
    for (std::string_view field : kProfileFields) {
      if (key.size() > kProfilePrefix.size() + field.size() && key.ends_with(field)) return true;
    }
    return false;
  }
  for (std::string_view owned :
       {std::string_view("nvidia.com/mig.strategy"), std::string_view("nvidia.com/gpu.slices.gi"),
        std::string_view("nvidia.com/gpu.slices.ci"), std::string_view("gpufrac.io/agent"),
        std::string_view("gpufrac.io/gpu-model"), std::string_view("gpufrac.io/mig-gpus"),
        kLabelServesNvidiaGpu}) {
    if (key == owned) return true;
  }
  return false;
}

}  // namespace gpufrac::k8s
