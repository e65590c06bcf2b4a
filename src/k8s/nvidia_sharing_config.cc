// NVIDIA's sharing configuration with yaml-cpp: every error names the file, the line and the
// field, and says what to write instead.
#include "k8s/nvidia_sharing_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

namespace gpufrac::k8s {
namespace {

constexpr std::string_view kDomain = "nvidia.com/";
constexpr std::string_view kSharedSuffix = ".shared";  // What renameByDefault appends.
constexpr size_t kMaxResourceName = 63;                // NVIDIA's limit, domain included.

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  // "FILE:LINE" of a node (just FILE when yaml-cpp does not know the line).
  std::string At(const YAML::Node& node) const {
    const int line = node.Mark().line;
    return line >= 0 ? source_ + ":" + std::to_string(line + 1) : source_;
  }
  Status Error(const YAML::Node& at, const std::string& field, const std::string& message) const {
    return InvalidArgumentError(At(at) + ": " + field + ": " + message);
  }

  // Fails on a key of `map` that is not in `allowed`.
  Status OnlyKeys(const YAML::Node& map, const std::string& field,
                  const std::vector<std::string_view>& allowed) const {
    for (const auto& entry : map) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return Error(entry.first, field,
                   "unknown field \"" + key + "\" (NVIDIA's format has " + list +
                       " here; check its spelling and case)");
    }
    return OkStatus();
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

// A value that is there: a key with nothing after it counts as not given, as in NVIDIA's parser.
bool Given(const YAML::Node& node) { return node && !node.IsNull(); }

std::optional<long> WholeNumber(const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  const std::string& text = node.Scalar();
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// The spellings NVIDIA's parser (YAML 1.1) takes for a boolean.
StatusOr<bool> Bool(const Reader& r, const YAML::Node& node, const std::string& field) {
  if (node.IsScalar()) {
    std::string text = node.Scalar();
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    for (const char* yes : {"true", "yes", "y", "on"}) {
      if (text == yes) return true;
    }
    for (const char* no : {"false", "no", "n", "off"}) {
      if (text == no) return false;
    }
  }
  return r.Error(node, field, "must be true or false");
}

bool IsHex(std::string_view text, size_t count) {
  return text.size() == count && std::all_of(text.begin(), text.end(),
                                             [](unsigned char c) { return std::isxdigit(c) != 0; });
}

// "GPU-" and a UUID in its 8-4-4-4-12 hex form, as NVML reports GPUs.
bool IsGpuUuid(std::string_view text) {
  if (text.substr(0, 4) != "GPU-" || text.size() != 40) return false;
  const std::string_view u = text.substr(4);
  return IsHex(u.substr(0, 8), 8) && u[8] == '-' && IsHex(u.substr(9, 4), 4) && u[13] == '-' &&
         IsHex(u.substr(14, 4), 4) && u[18] == '-' && IsHex(u.substr(19, 4), 4) && u[23] == '-' &&
         IsHex(u.substr(24), 12);
}

// A DNS subdomain: lower-case letters, digits, '-' and '.', each dot-separated label starting
// and ending with a letter or digit (what Kubernetes requires of a resource's name part).
bool IsDnsSubdomain(std::string_view name) {
  if (name.empty()) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('.', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view label = name.substr(start, end - start);
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!(std::islower(static_cast<unsigned char>(c)) ||
            std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
        return false;
      }
    }
    start = end + 1;
  }
  return true;
}

// A resource name as NVIDIA's plugin reads one: "gpu" and "nvidia.com/gpu" are the same.
StatusOr<std::string> ResourceName(const Reader& r, const YAML::Node& node,
                                   const std::string& field, const std::string& example) {
  if (!node.IsScalar() || node.Scalar().empty()) {
    return r.Error(node, field, "must be a resource name, e.g. " + example);
  }
  std::string name = node.Scalar();
  if (name.rfind(kDomain, 0) != 0) name = std::string(kDomain) + name;
  if (name.size() > kMaxResourceName || !IsDnsSubdomain(name.substr(kDomain.size()))) {
    return r.Error(node, field,
                   "\"" + node.Scalar() + "\" is not a resource name under nvidia.com/ (" +
                       std::to_string(kMaxResourceName) +
                       " characters at most: lower-case letters, digits, '-' and '.'), e.g. " +
                       example);
  }
  return name;
}

StatusOr<NvidiaReplicatedDevices> Devices(const Reader& r, const YAML::Node& node,
                                          const std::string& field) {
  const std::string mig =
      " is a MIG device: gpufrac's agent shares whole GPUs only (the instances of "
      "--static-mig-gpus are served whole); list GPU indexes or GPU UUIDs";
  NvidiaReplicatedDevices devices;
  if (node.IsScalar()) {
    if (node.Scalar() == "all") return devices;
    std::optional<long> count = WholeNumber(node);
    if (count && *count > 0 && *count <= 1024) {
      devices.all = false;
      devices.count = static_cast<int>(*count);
      return devices;
    }
  }
  if (!node.IsSequence() || node.size() == 0) {
    return r.Error(node, field,
                   "must be all, a number of GPUs, or a list of GPU indexes and UUIDs (write "
                   "\"devices: all\" or \"devices: [0, 1]\")");
  }
  devices.all = false;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string item_field = field + "[" + std::to_string(i) + "]";
    const std::string text = item.IsScalar() ? item.Scalar() : "";
    std::optional<long> index = WholeNumber(item);
    if (index && *index >= 0) {
      devices.list.push_back(std::to_string(*index));
    } else if (IsGpuUuid(text)) {
      devices.list.push_back(text);
    } else if (text.rfind("MIG-", 0) == 0 || text.find(':') != std::string::npos) {
      return r.Error(item, item_field, "\"" + text + "\"" + mig);
    } else {
      return r.Error(item, item_field,
                     "\"" + text +
                         "\" is neither a GPU index (0, 1, ...) nor a GPU UUID "
                         "(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L shows)");
    }
  }
  return devices;
}

StatusOr<NvidiaReplicatedResource> Resource(const Reader& r, const YAML::Node& node,
                                            const std::string& field, bool rename_by_default,
                                            std::vector<std::string>* notices) {
  if (!node.IsMap()) {
    return r.Error(node, field,
                   "must be a map (write \"- name: nvidia.com/gpu\" and \"replicas: 4\")");
  }
  GPUFRAC_RETURN_IF_ERROR(r.OnlyKeys(node, field, {"name", "rename", "devices", "replicas"}));
  NvidiaReplicatedResource out;
  out.at = r.At(node);
  out.field = field;
  if (!Given(node["name"])) {
    return r.Error(node, field + ".name", "missing (write \"name: nvidia.com/gpu\")");
  }
  GPUFRAC_ASSIGN_OR_RETURN(out.name,
                           ResourceName(r, node["name"], field + ".name", "nvidia.com/gpu"));
  if (out.name.rfind("nvidia.com/mig-", 0) == 0) {
    return r.Error(node["name"], field + ".name",
                   out.name +
                       " is a MIG resource: gpufrac's agent shares whole GPUs only (the "
                       "instances of --static-mig-gpus are served whole); share nvidia.com/gpu");
  }
  if (out.name != "nvidia.com/gpu") {
    return r.Error(node["name"], field + ".name",
                   out.name +
                       " is not a resource gpufrac's agent serves: it shares nvidia.com/gpu (the "
                       "GPUs of --nvidia-gpus); write \"name: nvidia.com/gpu\"");
  }
  if (!Given(node["replicas"])) {
    return r.Error(node, field + ".replicas", "missing (write e.g. \"replicas: 4\")");
  }
  std::optional<long> replicas = WholeNumber(node["replicas"]);
  if (!replicas || *replicas < 1 || *replicas > kMaxNvidiaReplicas) {
    return r.Error(node["replicas"], field + ".replicas",
                   "must be a whole number from 1 to " + std::to_string(kMaxNvidiaReplicas) +
                       " (write e.g. \"replicas: 4\")");
  }
  out.replicas = static_cast<int>(*replicas);
  if (Given(node["devices"])) {
    GPUFRAC_ASSIGN_OR_RETURN(out.devices, Devices(r, node["devices"], field + ".devices"));
    if (!out.devices.all) {
      notices->push_back(r.At(node["devices"]) + ": " + field +
                         ".devices: NVIDIA's plugin ignores this and shares every GPU; gpufrac "
                         "shares only these and serves the others whole");
    }
  }
  // NVIDIA's plugin serves the replicas under this name whatever rename says.
  const std::string nvidia_serves =
      rename_by_default ? out.name + std::string(kSharedSuffix) : out.name;
  out.serve_as = nvidia_serves;
  if (Given(node["rename"])) {
    GPUFRAC_ASSIGN_OR_RETURN(
        out.serve_as, ResourceName(r, node["rename"], field + ".rename", "nvidia.com/gpu.shared"));
    if (out.serve_as != nvidia_serves) {
      notices->push_back(r.At(node["rename"]) + ": " + field +
                         ".rename: NVIDIA's plugin ignores this and serves the replicas as " +
                         nvidia_serves + "; gpufrac serves them as " + out.serve_as);
    }
  }
  if (out.serve_as.rfind("nvidia.com/mig-", 0) == 0) {
    return r.Error(node["rename"], field + ".rename",
                   out.serve_as + " is the name of a MIG resource; choose another, e.g. " +
                       out.name + std::string(kSharedSuffix));
  }
  return out;
}

}  // namespace

const char* NvidiaSharingKindName(NvidiaSharingKind kind) {
  return kind == NvidiaSharingKind::kMps ? "mps" : "timeSlicing";
}

StatusOr<NvidiaSharingConfig> ParseNvidiaSharingConfig(std::string_view text,
                                                       const std::string& source) {
  Reader r(source);
  YAML::Node loaded;
  try {
    loaded = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ":" + std::to_string(e.mark.line + 1) +
                                ": not valid YAML or JSON: " + e.msg);
  }
  // Read through const nodes only: yaml-cpp's non-const operator[] adds the keys it looks up.
  const YAML::Node root = loaded;
  NvidiaSharingConfig config;
  if (!Given(root)) return config;  // An empty file: nothing shared, as in NVIDIA's plugin.
  if (!root.IsMap()) {
    return r.Error(root, "the top level", "must be a map (write \"version: v1\" and \"sharing:\")");
  }
  GPUFRAC_RETURN_IF_ERROR(
      r.OnlyKeys(root, "the top level", {"version", "flags", "resources", "sharing", "imex"}));
  if (Given(root["version"]) && !(root["version"].IsScalar() && root["version"].Scalar() == "v1")) {
    return r.Error(root["version"], "version",
                   "gpufrac reads version v1 of NVIDIA's format only (write \"version: v1\")");
  }
  const std::pair<const char*, const char*> read_past[] = {
      {"flags", "its settings are the agent's own flags (--nvidia-gpus, --static-mig-gpus)"},
      {"resources", "NVIDIA's plugin does not use it either"},
      {"imex", "the agent passes no IMEX channels"}};
  for (const auto& [key, why] : read_past) {
    if (Given(root[key])) {
      config.notices.push_back(r.At(root[key]) + ": " + key + ": not used: " + why);
    }
  }
  const YAML::Node sharing = root["sharing"];
  if (!Given(sharing)) return config;
  if (!sharing.IsMap()) {
    return r.Error(sharing, "sharing", "must be a map with timeSlicing or mps");
  }
  GPUFRAC_RETURN_IF_ERROR(r.OnlyKeys(sharing, "sharing", {"timeSlicing", "mps"}));
  if (Given(sharing["timeSlicing"]) && Given(sharing["mps"])) {
    return r.Error(sharing, "sharing",
                   "has both timeSlicing and mps; a node shares its GPUs one way: keep one");
  }
  config.kind = Given(sharing["mps"]) ? NvidiaSharingKind::kMps : NvidiaSharingKind::kTimeSlicing;
  const std::string field = std::string("sharing.") + NvidiaSharingKindName(config.kind);
  const YAML::Node section = sharing[NvidiaSharingKindName(config.kind)];
  if (!Given(section)) return config;
  if (!section.IsMap()) {
    return r.Error(section, field,
                   "must be a map with resources (and renameByDefault, "
                   "failRequestsGreaterThanOne)");
  }
  GPUFRAC_RETURN_IF_ERROR(
      r.OnlyKeys(section, field, {"renameByDefault", "failRequestsGreaterThanOne", "resources"}));
  if (Given(section["renameByDefault"])) {
    GPUFRAC_ASSIGN_OR_RETURN(config.rename_by_default,
                             Bool(r, section["renameByDefault"], field + ".renameByDefault"));
  }
  // NVIDIA's plugin refuses several MPS replicas to one container unless told otherwise.
  config.fail_requests_greater_than_one = config.kind == NvidiaSharingKind::kMps;
  if (Given(section["failRequestsGreaterThanOne"])) {
    GPUFRAC_ASSIGN_OR_RETURN(
        config.fail_requests_greater_than_one,
        Bool(r, section["failRequestsGreaterThanOne"], field + ".failRequestsGreaterThanOne"));
  }
  const YAML::Node resources = section["resources"];
  if (!Given(resources) || !resources.IsSequence() || resources.size() == 0) {
    return r.Error(Given(resources) ? resources : section, field + ".resources",
                   "must list at least one resource (write \"- name: nvidia.com/gpu\" with "
                   "\"replicas: 4\")");
  }
  for (size_t i = 0; i < resources.size(); ++i) {
    GPUFRAC_ASSIGN_OR_RETURN(
        NvidiaReplicatedResource resource,
        Resource(r, resources[i], field + ".resources[" + std::to_string(i) + "]",
                 config.rename_by_default, &config.notices));
    config.resources.push_back(std::move(resource));
  }
  return config;
}

StatusOr<NvidiaSharingConfig> LoadNvidiaSharingConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return InvalidArgumentError("--nvidia-sharing-config " + path +
                                ": cannot read it; give the path of NVIDIA's device plugin "
                                "configuration file (mounted from its ConfigMap)");
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseNvidiaSharingConfig(text.str(), path);
}

StatusOr<NvidiaSharing> ResolveNvidiaSharing(const NvidiaSharingConfig& config,
                                             const NodeInventory& all,
                                             const std::vector<int>& nvidia_gpus) {
  NvidiaSharing out{.kind = config.kind,
                    .fail_requests_greater_than_one = config.fail_requests_greater_than_one,
                    .gpus = {}};
  std::vector<int> served = nvidia_gpus;
  std::sort(served.begin(), served.end());
  std::string served_text;
  for (int i : served) served_text += (served_text.empty() ? "" : ",") + std::to_string(i);
  std::map<int, std::string> taken;  // GPU -> the entry sharing it.
  for (const NvidiaReplicatedResource& r : config.resources) {
    const std::string where = r.at + ": " + r.field;
    auto error = [&where](const std::string& field, const std::string& message) {
      return InvalidArgumentError(where + field + ": " + message);
    };
    if (served.empty()) {
      return error("",
                   "shares nvidia.com/gpu, but this agent serves no GPU as nvidia.com/gpu; "
                   "list the GPUs to share in --nvidia-gpus");
    }
    std::vector<int> picked;
    if (r.devices.count > 0) {
      if (static_cast<size_t>(r.devices.count) > served.size()) {
        return error(".devices", std::to_string(r.devices.count) + " GPUs to share, but only " +
                                     std::to_string(served.size()) +
                                     " are served as nvidia.com/gpu (--nvidia-gpus " + served_text +
                                     ")");
      }
      picked.assign(served.begin(), served.begin() + r.devices.count);
    } else if (!r.devices.list.empty()) {
      for (const std::string& ref : r.devices.list) {
        const GpuInfo* g = nullptr;
        for (const GpuInfo& candidate : all.gpus) {
          if (ref == (std::isdigit(static_cast<unsigned char>(ref[0]))
                          ? std::to_string(candidate.index)
                          : candidate.uuid)) {
            g = &candidate;
          }
        }
        if (g == nullptr) return error(".devices", "this node has no GPU " + ref);
        if (!std::binary_search(served.begin(), served.end(), g->index)) {
          return error(".devices", "GPU " + ref + " is not served as nvidia.com/gpu; add " +
                                       std::to_string(g->index) + " to --nvidia-gpus (now " +
                                       (served_text.empty() ? "none" : served_text) + ")");
        }
        picked.push_back(g->index);
      }
    } else {
      picked = served;
    }
    for (int index : picked) {
      auto [it, fresh] = taken.emplace(index, r.field);
      if (!fresh) {
        return error(".devices", "GPU " + std::to_string(index) + " is already shared by " +
                                     it->second + "; share each GPU in one entry");
      }
      out.gpus[index] = {.resource = r.serve_as, .replicas = r.replicas};
    }
  }
  return out;
}

}  // namespace gpufrac::k8s
