#include "node/model_groups.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "common/text.h"
#include "common/units.h"

namespace gpufrac::node {
namespace {

namespace pl = ::gpufrac::placement;

std::string JoinAnd(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

StatusOr<ModelGroups> ModelGroups::Create(std::vector<machine::NodeGpu> gpus) {
  std::sort(gpus.begin(), gpus.end(),
            [](const machine::NodeGpu& a, const machine::NodeGpu& b) { return a.index < b.index; });
  for (size_t i = 1; i < gpus.size(); ++i) {
    if (gpus[i].index == gpus[i - 1].index) {
      return InvalidArgumentError("GPU index " + std::to_string(gpus[i].index) + " appears twice");
    }
  }
  ModelGroups out;
  std::vector<pl::HostGpu> host;
  for (const machine::NodeGpu& gpu : gpus) {
    host.push_back({.model = gpu.model,
                    .memory_bytes = gpu.memory_bytes,
                    .context_bytes = gpu.context_bytes,
                    .whole_only = gpu.mode == gpu::GpuMode::kWhole,
                    .mps = gpu.mode == gpu::GpuMode::kMps});
  }
  GPUFRAC_ASSIGN_OR_RETURN(out.groups_, pl::GroupHostGpus(host));
  std::stable_sort(
      out.groups_.begin(), out.groups_.end(),
      [](const pl::GpuGroup& a, const pl::GpuGroup& b) { return a.memory_bytes < b.memory_bytes; });
  if (out.groups_.size() > static_cast<size_t>(kMaxGroups)) {
    return InvalidArgumentError("more than " + std::to_string(kMaxGroups) +
                                " different GPU models on one node");
  }
  out.gpus_ = std::move(gpus);
  out.group_of_.resize(out.gpus_.size());
  out.slot_of_.resize(out.gpus_.size());
  for (size_t g = 0; g < out.groups_.size(); ++g) {
    pl::GpuGroup& group = out.groups_[g];
    GPUFRAC_ASSIGN_OR_RETURN(
        group.model_id, out.names_.Intern(group.model.empty() ? "unknown-model" : group.model));
    for (size_t slot = 0; slot < group.members.size(); ++slot) {
      out.group_of_[group.members[slot]] = static_cast<int>(g);
      out.slot_of_[group.members[slot]] = static_cast<int>(slot);
    }
  }
  for (size_t pos = 0; pos < out.gpus_.size(); ++pos) {
    out.position_of_index_[out.gpus_[pos].index] = static_cast<int>(pos);
  }
  return out;
}

int ModelGroups::PositionOf(int index) const {
  auto it = position_of_index_.find(index);
  return it == position_of_index_.end() ? -1 : it->second;
}

StatusOr<pl::Cluster> ModelGroups::MakeCluster() const {
  std::vector<pl::NodeSpec> specs;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const pl::GpuGroup& group = groups_[g];
    specs.push_back(pl::GroupNodeSpec("g" + std::to_string(g), group, group.model_id));
  }
  return pl::Cluster::Create(names_, std::move(specs));
}

std::string ModelGroups::ModelName(int group) const {
  return groups_[group].model.empty() ? "a GPU of unknown model" : groups_[group].model;
}

std::string ModelGroups::ModelSummary(uint64_t mask) const {
  std::vector<std::pair<std::string, int>> counts;  // In GPU index order.
  for (size_t pos = 0; pos < gpus_.size(); ++pos) {
    int g = group_of_[pos];
    if (!(mask >> g & 1)) continue;
    std::string name = groups_[g].model.empty() ? "unknown-model" : groups_[g].model;
    if (groups_[g].mps) name += " in MPS mode";
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == name; });
    if (it == counts.end()) {
      counts.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [name, n] : counts) parts.push_back(std::to_string(n) + " " + name);
  return JoinAnd(parts);
}

std::string ModelGroups::GpuList(int group, pl::GpuSet set) const {
  std::string out;
  for (pl::GpuSet left = set; left != 0; left &= left - 1) {
    if (!out.empty()) out += ", ";
    out += std::to_string(gpus_[groups_[group].members[std::countr_zero(left)]].index);
  }
  return out;
}

StatusOr<uint64_t> ModelGroups::AllowedGroups(const GpuRequest& request) const {
  const std::string flags = FormatGpuRequest(request);
  uint64_t allowed = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (request.gpu_model.empty() || EqualsIgnoreCase(groups_[g].model, request.gpu_model)) {
      allowed |= uint64_t{1} << g;
    }
  }
  if (allowed == 0) {
    std::vector<std::string> names;
    for (size_t pos = 0; pos < gpus_.size(); ++pos) {
      std::string name = ModelName(group_of_[pos]);
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return InvalidArgumentError("--gpu-model " + request.gpu_model + ": no such GPU here (" + list +
                                ")");
  }

  if (request.kind != GpuRequest::Kind::kWholeGpus) {
    uint64_t shared = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (!groups_[g].whole_only) shared |= uint64_t{1} << g;
    }
    if ((allowed & shared) == 0) {
      return InvalidArgumentError(
          flags + " needs a GPU that can be shared; " +
          (request.gpu_model.empty() ? "every GPU" : "every " + request.gpu_model) +
          " here takes whole-GPU jobs only (ask for --gpus 1)");
    }
    allowed &= shared;
  }
  return allowed;
}

Status ModelGroups::WhyNoGroupHolds(const GpuRequest& request, uint64_t allowed) const {
  const std::string flags = FormatGpuRequest(request);
  const uint64_t all_groups = (uint64_t{1} << groups_.size()) - 1;
  // Groups are smallest first: the last allowed one has the largest GPUs.
  int largest = 63 - std::countl_zero(allowed);
  const pl::GpuGroup& big = groups_[largest];
  switch (request.kind) {
    case GpuRequest::Kind::kWholeGpus: {
      size_t most = 0;
      uint64_t total = 0;
      for (uint64_t left = allowed; left != 0; left &= left - 1) {
        most = std::max(most, groups_[std::countr_zero(left)].members.size());
        total += groups_[std::countr_zero(left)].members.size();
      }
      if (request.gpus > most) {
        const bool modes = std::any_of(groups_.begin(), groups_.end(),
                                       [](const pl::GpuGroup& g) { return g.mps; });
        return InvalidArgumentError(flags + " asks for " + std::to_string(request.gpus) + " GPUs" +
                                    (request.gpus > total ? ""
                                     : modes              ? " of one model and mode"
                                                          : " of one model") +
                                    "; this node has " +
                                    ModelSummary(request.gpu_model.empty() ? all_groups : allowed));
      }
      break;
    }
    case GpuRequest::Kind::kMemory:
      if (request.memory_bytes > big.memory_bytes) {
        return InvalidArgumentError(flags + " is more than any GPU here has (largest: " +
                                    ModelName(largest) + ", " + FormatSize(big.memory_bytes) + ")");
      }
      [[fallthrough]];
    case GpuRequest::Kind::kFraction: {
      // Too small: name the largest GPU it would fit on, with that GPU's context size.
      for (int g = largest; g >= 0; --g) {
        if (!(allowed >> g & 1)) continue;
        const pl::GpuGroup& group = groups_[g];
        uint64_t limit = request.memory_bytes;
        std::string what = flags;
        if (request.kind == GpuRequest::Kind::kFraction) {
          limit = BytesOfShare(group.memory_bytes, request.fraction_milli);
          what += " (" + FormatSize(limit) + " on " + ModelName(g) + ")";
        }
        if (limit > group.memory_bytes) continue;
        return InvalidArgumentError(what + " cannot hold even the CUDA context on " + ModelName(g) +
                                    " (about " + FormatSize(group.context_bytes) +
                                    "); ask for more");
      }
      break;
    }
    case GpuRequest::Kind::kMigProfile:
      break;
  }
  return InvalidArgumentError(flags + " cannot run on any GPU of this node (" +
                              ModelSummary(all_groups) + ")");
}

}  // namespace gpufrac::node
