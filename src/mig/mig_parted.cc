// mig-parted configuration files: parsing with yaml-cpp (every error names the file and line of
// the offending node; unknown keys are errors), device matching, the search that places a
// layout on an empty GPU whatever its order, and the export of a node's layout.
#include "mig/mig_parted.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

namespace gpufrac::mig {
namespace {

constexpr uint32_t kNvidiaVendorId = 0x10DE;

class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  // Nodes without a position (an empty document) are reported at line 1, so that every message
  // has the same "SOURCE:LINE: " shape.
  Status Error(const YAML::Node& at, const std::string& message) const {
    int line = at.Mark().line >= 0 ? at.Mark().line + 1 : 1;
    return InvalidArgumentError(source_ + ":" + std::to_string(line) + ": " + message);
  }

  Status OnlyKeys(const YAML::Node& map, const std::set<std::string>& allowed,
                  const std::string& where) const {
    std::set<std::string> seen;
    for (const auto& item : map) {
      if (!item.first.IsScalar()) return Error(item.first, "keys in " + where + " must be names");
      const std::string key = item.first.Scalar();
      if (!allowed.count(key)) {
        std::string list;
        for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return Error(item.first,
                     "unknown key \"" + key + "\" in " + where + " (allowed: " + list + ")");
      }
      if (!seen.insert(key).second) {
        return Error(item.first, "key \"" + key + "\" appears twice in " + where);
      }
    }
    return OkStatus();
  }

 private:
  std::string source_;
};

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Consumes a positive decimal number (no sign, no leading zero) from text[pos...].
bool ConsumeNumber(const std::string& text, size_t& pos) {
  size_t begin = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  return pos > begin && text[begin] != '0';
}

bool ConsumeLiteral(const std::string& text, size_t& pos, const std::string& literal) {
  if (text.compare(pos, literal.size(), literal) != 0) return false;
  pos += literal.size();
  return true;
}

// mig-parted's profile names (go-nvlib's grammar): an optional "<c>c." compute-instance prefix,
// "<g>g.<m>gb", then optionally "+" and a comma list of the attributes NVIDIA documents (me,
// me.all, gfx) or "-me" (the profile without media extensions).
bool WellFormedProfileName(const std::string& name) {
  const std::string text = Lower(name);
  size_t pos = 0;
  if (!ConsumeNumber(text, pos)) return false;
  if (ConsumeLiteral(text, pos, "c.")) {
    if (!ConsumeNumber(text, pos)) return false;
  }
  if (!ConsumeLiteral(text, pos, "g.") || !ConsumeNumber(text, pos) ||
      !ConsumeLiteral(text, pos, "gb")) {
    return false;
  }
  if (pos == text.size()) return true;
  const char sign = text[pos++];
  const std::string rest = text.substr(pos);
  if (sign == '-') return rest == "me";
  if (sign != '+') return false;
  std::set<std::string> seen;
  std::stringstream attributes(rest);
  std::string attribute;
  int count = 0;
  while (std::getline(attributes, attribute, ',')) {
    ++count;
    if (attribute != "me" && attribute != "me.all" && attribute != "gfx") return false;
    if (!seen.insert(attribute).second) return false;
  }
  return count > 0 && rest.back() != ',';
}

// Parses "0x233010DE" (or decimal, as mig-parted's strconv base-0 parse allows) into the packed
// device << 16 | vendor value. A ":<subsystem>" part is accepted and split off into `subsystem`.
bool ParseDeviceId(const std::string& text, uint32_t& packed, bool& has_subsystem) {
  std::string primary = text;
  has_subsystem = false;
  if (size_t colon = text.find(':'); colon != std::string::npos) {
    uint32_t ignored = 0;
    bool nested = false;
    if (!ParseDeviceId(text.substr(colon + 1), ignored, nested) || nested) return false;
    primary = text.substr(0, colon);
    has_subsystem = true;
  }
  int base = 10;
  size_t pos = 0;
  if (primary.size() > 2 && primary[0] == '0' && (primary[1] == 'x' || primary[1] == 'X')) {
    base = 16;
    pos = 2;
  }
  if (pos == primary.size()) return false;
  uint64_t value = 0;
  for (; pos < primary.size(); ++pos) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(primary[pos])));
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (base == 16 && c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return false;
    value = value * base + digit;
    if (value > 0xFFFFFFFFull) return false;
  }
  packed = static_cast<uint32_t>(value);
  return true;
}

Status ParseDevices(const Checker& check, const YAML::Node& node, MigPartedEntry& entry) {
  if (node.IsScalar()) {
    if (node.Scalar() != "all") {
      return check.Error(node,
                         "devices must be \"all\" or a list of GPU indexes such as [0, 1], "
                         "not \"" +
                             node.Scalar() + "\"");
    }
    entry.all_devices = true;
    return OkStatus();
  }
  if (!node.IsSequence()) {
    return check.Error(node, "devices must be \"all\" or a list of GPU indexes such as [0, 1]");
  }
  for (const YAML::Node& index : node) {
    int value = -1;
    bool ok = index.IsScalar() && !index.Scalar().empty() &&
              std::all_of(index.Scalar().begin(), index.Scalar().end(),
                          [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (ok) {
      try {
        value = index.as<int>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    if (!ok || value < 0) {
      return check.Error(index,
                         "devices lists GPU indexes, which are whole numbers from 0 (got \"" +
                             (index.IsScalar() ? index.Scalar() : "a non-number") + "\")");
    }
    entry.devices.push_back(value);
  }
  return OkStatus();
}

Status ParseDeviceFilter(const Checker& check, const YAML::Node& node, MigPartedEntry& entry) {
  const char* kHint =
      "device-filter must be a PCI device id such as \"0x233010DE\" or a list of them";
  std::vector<YAML::Node> items;
  if (node.IsScalar()) {
    items.push_back(node);
  } else if (node.IsSequence()) {
    for (const YAML::Node& item : node) items.push_back(item);
  } else {
    return check.Error(node, kHint);
  }
  for (const YAML::Node& item : items) {
    uint32_t packed = 0;
    bool has_subsystem = false;
    if (!item.IsScalar() || !ParseDeviceId(item.Scalar(), packed, has_subsystem)) {
      return check.Error(
          item, std::string(kHint) + (item.IsScalar() ? " (got \"" + item.Scalar() + "\")" : ""));
    }
    entry.device_filter.push_back(item.Scalar());
  }
  return OkStatus();
}

Status ParseMigDevices(const Checker& check, const YAML::Node& node, MigPartedEntry& entry) {
  if (node.IsNull()) return OkStatus();
  if (!node.IsMap()) {
    return check.Error(node,
                       "mig-devices must be a map of profile name to count, e.g. "
                       "{\"1g.10gb\": 2}, or {} for none");
  }
  std::set<std::string> names;
  for (const auto& item : node) {
    if (!item.first.IsScalar() || !WellFormedProfileName(item.first.Scalar())) {
      return check.Error(item.first,
                         "\"" + (item.first.IsScalar() ? item.first.Scalar() : std::string()) +
                             "\" is not a MIG profile name; write it as nvidia-smi does, e.g. "
                             "\"1g.10gb\", \"3g.40gb\" or \"1g.10gb+me\"");
    }
    const std::string name = item.first.Scalar();
    if (!names.insert(Lower(name)).second) {
      return check.Error(item.first, "profile " + name + " appears twice in mig-devices");
    }
    const YAML::Node& count_node = item.second;
    bool ok = count_node.IsScalar() && !count_node.Scalar().empty();
    long long count = -1;
    if (ok) {
      const std::string& text = count_node.Scalar();
      size_t start = text[0] == '-' || text[0] == '+' ? 1 : 0;
      ok = start < text.size() && std::all_of(text.begin() + start, text.end(), [](char c) {
             return std::isdigit(static_cast<unsigned char>(c));
           });
      if (ok) {
        try {
          count = count_node.as<long long>();
        } catch (const YAML::Exception&) {
          ok = false;
        }
      }
    }
    if (!ok || count < 0 || count > 1000) {
      return check.Error(
          count_node, "the count of " + name + " must be a whole number from 0 (got \"" +
                          (count_node.IsScalar() ? count_node.Scalar() : "a non-number") + "\")");
    }
    entry.mig_devices.emplace_back(name, static_cast<int>(count));
  }
  return OkStatus();
}

StatusOr<MigPartedEntry> ParseEntry(const Checker& check, const YAML::Node& node,
                                    const std::string& config) {
  const std::string where = "an entry of config " + config;
  if (!node.IsMap()) {
    return check.Error(node, where + " must be a map with devices and mig-enabled");
  }
  GPUFRAC_RETURN_IF_ERROR(
      check.OnlyKeys(node, {"devices", "device-filter", "mig-enabled", "mig-devices"}, where));
  MigPartedEntry entry;
  entry.line = node.Mark().line + 1;
  if (!node["devices"]) {
    return check.Error(node, where + " needs devices: all, or a list of GPU indexes");
  }
  GPUFRAC_RETURN_IF_ERROR(ParseDevices(check, node["devices"], entry));
  if (node["device-filter"]) {
    GPUFRAC_RETURN_IF_ERROR(ParseDeviceFilter(check, node["device-filter"], entry));
  }
  const YAML::Node enabled = node["mig-enabled"];
  if (!enabled) return check.Error(node, where + " needs mig-enabled: true or false");
  bool enabled_ok = enabled.IsScalar();
  if (enabled_ok) {
    try {
      entry.mig_enabled = enabled.as<bool>();
    } catch (const YAML::Exception&) {
      enabled_ok = false;
    }
  }
  if (!enabled_ok) return check.Error(enabled, "mig-enabled must be true or false");
  const YAML::Node devices = node["mig-devices"];
  if (devices) GPUFRAC_RETURN_IF_ERROR(ParseMigDevices(check, devices, entry));
  // mig-parted's own rules: an enabled entry says what to create (possibly {}), and a disabled
  // one cannot ask for instances.
  if (entry.mig_enabled && !devices) {
    return check.Error(node, where +
                                 " has mig-enabled: true but no mig-devices; add "
                                 "mig-devices (use {} for none)");
  }
  if (!entry.mig_enabled && !entry.mig_devices.empty()) {
    return check.Error(devices, where +
                                    " lists mig-devices with mig-enabled: false; set "
                                    "mig-enabled: true or remove mig-devices");
  }
  return entry;
}

struct Instance {
  int profile = 0;
  int size = 0;
};

// Depth-first search over the instances (largest first), each at its lowest legal free start
// first; equal instances take increasing starts so no arrangement is tried twice.
bool Search(const gpu::MigModel& model, const std::vector<Instance>& instances, size_t next,
            uint32_t used, std::vector<gpu::MigPlacement>& placed) {
  if (next == instances.size()) return true;
  const gpu::MigProfile& profile = model.profiles[instances[next].profile];
  int min_start = -1;
  if (next > 0 && instances[next - 1].profile == instances[next].profile) {
    min_start = placed[next - 1].start;
  }
  for (int s = 0; s < profile.start_count; ++s) {
    const gpu::MigPlacement& p = profile.starts[s];
    if (p.start <= min_start || p.size <= 0 || p.start + p.size > 32) continue;
    uint32_t mask = ((1u << p.size) - 1u) << p.start;
    if (used & mask) continue;
    placed[next] = p;
    if (Search(model, instances, next + 1, used | mask, placed)) return true;
  }
  return false;
}

std::string DescribeLayout(const std::vector<std::pair<std::string, int>>& mig_devices) {
  std::string text;
  for (const auto& [name, count] : mig_devices) {
    text += (text.empty() ? "" : ", ") + name + ": " + std::to_string(count);
  }
  return "{" + text + "}";
}

}  // namespace

const MigPartedConfig* MigPartedFile::Find(const std::string& name) const {
  for (const MigPartedConfig& config : configs) {
    if (config.name == name) return &config;
  }
  return nullptr;
}

StatusOr<MigPartedFile> ParseMigParted(const std::string& yaml, const std::string& source) {
  Checker check(source);
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ":" + std::to_string(std::max(e.mark.line, 0) + 1) +
                                ": not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    return check.Error(root, "expected a map with version: v1 and mig-configs");
  }
  GPUFRAC_RETURN_IF_ERROR(check.OnlyKeys(root, {"version", "mig-configs"}, "the top level"));
  const YAML::Node version = root["version"];
  if (!version || !version.IsScalar() || version.Scalar() != "v1") {
    return check.Error(version ? version : root,
                       "version must be v1 (write \"version: v1\" at the top)");
  }
  const YAML::Node configs = root["mig-configs"];
  if (!configs || !configs.IsMap() || configs.size() == 0) {
    return check.Error(configs ? configs : root,
                       "mig-configs must be a map of at least one config name to its list of "
                       "entries");
  }
  MigPartedFile file;
  std::set<std::string> names;
  for (const auto& item : configs) {
    if (!item.first.IsScalar() || item.first.Scalar().empty()) {
      return check.Error(item.first, "each config in mig-configs needs a name");
    }
    MigPartedConfig config;
    config.name = item.first.Scalar();
    if (!names.insert(config.name).second) {
      return check.Error(item.first, "config " + config.name + " is defined twice");
    }
    const YAML::Node& entries = item.second;
    if (!entries.IsSequence() || entries.size() == 0) {
      return check.Error(
          entries.IsNull() ? item.first : entries,
          "config " + config.name + " must be a list of at least one entry (- devices: all ...)");
    }
    for (const YAML::Node& node : entries) {
      GPUFRAC_ASSIGN_OR_RETURN(MigPartedEntry entry, ParseEntry(check, node, config.name));
      config.entries.push_back(std::move(entry));
    }
    file.configs.push_back(std::move(config));
  }
  return file;
}

StatusOr<MigPartedFile> LoadMigParted(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open the mig-parted file; check the path");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseMigParted(text.str(), path);
}

bool EntryMatches(const MigPartedEntry& entry, int index, const gpu::GpuModel& model) {
  bool device_ok = entry.all_devices || std::find(entry.devices.begin(), entry.devices.end(),
                                                  index) != entry.devices.end();
  if (!device_ok) return false;
  if (entry.device_filter.empty()) return true;
  const uint32_t ours = (static_cast<uint32_t>(model.pci_device_id) << 16) | kNvidiaVendorId;
  for (const std::string& filter : entry.device_filter) {
    uint32_t packed = 0;
    bool has_subsystem = false;
    // A filter naming a board's subsystem cannot be checked: the catalogue knows only the
    // device id, so such a filter never matches rather than matching boards it may not mean.
    if (ParseDeviceId(filter, packed, has_subsystem) && !has_subsystem && packed == ours) {
      return true;
    }
  }
  return false;
}

StatusOr<std::vector<LayoutInstance>> PlaceLayout(
    const gpu::MigModel& model, const std::vector<std::pair<std::string, int>>& mig_devices) {
  const std::string model_name =
      model.model != nullptr ? std::string(model.model->short_name) : std::string("this GPU");
  std::vector<Instance> instances;
  std::vector<int> counts(model.profile_count, 0);
  int memory = 0;
  int compute = 0;
  int media = 0;
  for (const auto& [name, count] : mig_devices) {
    const gpu::MigProfile* profile = gpu::FindMigProfile(model, name);
    if (profile == nullptr) {
      std::string list;
      for (int i = 0; i < model.profile_count; ++i) {
        list += (list.empty() ? "" : ", ") + gpu::MigProfileName(model, model.profiles[i]);
      }
      return NotFoundError(model_name + " has no MIG profile " + name + " (it has: " + list + ")");
    }
    const int index = static_cast<int>(profile - model.profiles);
    counts[index] += count;
    if (counts[index] > profile->max_count) {
      return InvalidArgumentError("layout " + DescribeLayout(mig_devices) + " asks for " +
                                  std::to_string(counts[index]) + " of " + name + " but " +
                                  model_name + " allows at most " +
                                  std::to_string(profile->max_count));
    }
    for (int i = 0; i < count; ++i) instances.push_back({index, profile->memory_slices});
    if (profile->media_extensions) media += count;
    memory += count * profile->memory_slices;
    compute += count * profile->compute_slices;
  }
  // A GPU has one set of media engines, so at most one "+me" instance of any size.
  if (media > 1) {
    return InvalidArgumentError("layout " + DescribeLayout(mig_devices) + " asks for " +
                                std::to_string(media) +
                                " instances with media extensions (+me) "
                                "but " +
                                model_name + " has one set; keep one +me profile");
  }
  const Status no_fit = InvalidArgumentError(
      "layout " + DescribeLayout(mig_devices) + " does not fit on " + model_name + " (" +
      std::to_string(model.memory_slices) + " memory slices, " +
      std::to_string(model.compute_slices) + " compute slices) in any arrangement");
  if (memory > model.memory_slices || compute > model.compute_slices) return no_fit;
  // Largest first: big instances have the fewest legal starts, so they constrain the search
  // most; ties by profile index keep equal instances adjacent for the symmetry rule.
  std::stable_sort(instances.begin(), instances.end(), [](const Instance& a, const Instance& b) {
    if (a.size != b.size) return a.size > b.size;
    return a.profile > b.profile;
  });
  std::vector<gpu::MigPlacement> placed(instances.size());
  if (!Search(model, instances, 0, 0, placed)) return no_fit;
  std::vector<LayoutInstance> layout;
  for (size_t i = 0; i < instances.size(); ++i) layout.push_back({instances[i].profile, placed[i]});
  std::sort(layout.begin(), layout.end(), [](const LayoutInstance& a, const LayoutInstance& b) {
    return a.placement.start < b.placement.start;
  });
  return layout;
}

std::string ExportMigParted(const std::string& name, const std::vector<GpuLayout>& gpus) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << "v1";
  out << YAML::Key << "mig-configs" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << name << YAML::Value << YAML::BeginSeq;
  for (const GpuLayout& gpu : gpus) {
    const bool enabled = gpu.model != nullptr && gpu.mig_enabled;
    out << YAML::BeginMap;
    out << YAML::Key << "devices" << YAML::Value << YAML::Flow << YAML::BeginSeq << gpu.index
        << YAML::EndSeq;
    out << YAML::Key << "mig-enabled" << YAML::Value << enabled;
    if (enabled) {
      std::vector<int> counts(gpu.model->profile_count, 0);
      for (int profile : gpu.profiles) {
        if (profile >= 0 && profile < gpu.model->profile_count) ++counts[profile];
      }
      out << YAML::Key << "mig-devices" << YAML::Value;
      bool any = std::any_of(counts.begin(), counts.end(), [](int c) { return c > 0; });
      if (!any) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
      } else {
        out << YAML::BeginMap;
        for (int i = 0; i < gpu.model->profile_count; ++i) {
          if (counts[i] == 0) continue;
          out << YAML::Key << YAML::DoubleQuoted
              << gpu::MigProfileName(*gpu.model, gpu.model->profiles[i]) << YAML::Value
              << counts[i];
        }
        out << YAML::EndMap;
      }
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace gpufrac::mig
