// CUDA_VISIBLE_DEVICES parsing.
#include "simgpu/core/visible_devices.h"

#include <algorithm>
#include <charconv>
#include <string_view>

namespace gpufrac::simgpu {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

bool StartsWithIgnoreCase(std::string_view text, std::string_view prefix) {
  if (prefix.size() > text.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(text[i]) != Lower(prefix[i])) return false;
  }
  return true;
}

// The index in `uuids` that `entry` is a unique prefix of, or -1.
template <typename Uuids, typename UuidOf>
int MatchPrefix(std::string_view entry, const Uuids& uuids, UuidOf uuid_of) {
  int match = -1;
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    if (!StartsWithIgnoreCase(uuid_of(uuids[i]), entry)) continue;
    if (match >= 0) return -1;  // prefix is not unique
    match = static_cast<int>(i);
  }
  return match;
}

// The device an entry names, or physical -1 if it names none or is ambiguous.
VisibleDeviceRef Resolve(std::string_view entry, const DeviceNames& names) {
  constexpr VisibleDeviceRef kNone{.physical = -1};
  if (entry.size() > 4 && StartsWithIgnoreCase(entry, "MIG-")) {
    const int mig = MatchPrefix(
        entry, names.migs, [](const DeviceNames::Mig& m) -> std::string_view { return m.uuid; });
    if (mig < 0) return kNone;
    return VisibleDeviceRef{.physical = names.migs[mig].physical, .mig = mig};
  }
  if (entry.size() > 4 && StartsWithIgnoreCase(entry, "GPU-")) {
    return VisibleDeviceRef{
        .physical = MatchPrefix(entry, names.gpu_uuids,
                                [](const std::string& u) -> std::string_view { return u; })};
  }
  int index = -1;
  auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
  if (ec != std::errc() || end != entry.data() + entry.size()) return kNone;
  if (index < 0 || index >= static_cast<int>(names.gpu_uuids.size())) return kNone;
  return VisibleDeviceRef{.physical = index};
}

bool MigEnabled(const DeviceNames& names, int physical) {
  return physical < static_cast<int>(names.mig_enabled.size()) && names.mig_enabled[physical];
}

}  // namespace

std::vector<VisibleDeviceRef> ParseVisibleDevices(const char* value, const DeviceNames& names) {
  std::vector<VisibleDeviceRef> visible;
  if (value == nullptr) {
    for (std::size_t i = 0; i < names.gpu_uuids.size(); ++i) {
      const int physical = static_cast<int>(i);
      if (!MigEnabled(names, physical)) {
        visible.push_back({.physical = physical});
      } else if (!names.migs.empty() && names.migs.front().physical == physical) {
        visible.push_back({.physical = physical, .mig = 0});
      }
    }
    return visible;
  }
  bool has_mig = false;
  std::string_view rest = value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const VisibleDeviceRef device = Resolve(Trim(rest.substr(0, comma)), names);
    if (device.physical < 0) break;
    if (device.mig < 0 && MigEnabled(names, device.physical)) break;
    if (device.mig >= 0 && has_mig) break;
    const bool repeated = std::any_of(visible.begin(), visible.end(), [&](const auto& seen) {
      return seen.physical == device.physical && seen.mig == device.mig;
    });
    if (repeated) break;
    has_mig = has_mig || device.mig >= 0;
    visible.push_back(device);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return visible;
}

std::vector<VisibleDeviceRef> RemapVisibleDevices(const char* value,
                                                  const std::vector<VisibleDeviceRef>& exposed,
                                                  const DeviceNames& names) {
  if (value == nullptr) return exposed;
  std::vector<std::string> uuids;
  for (const VisibleDeviceRef& ref : exposed) {
    uuids.push_back(ref.mig >= 0 ? names.migs[ref.mig].uuid : names.gpu_uuids[ref.physical]);
  }
  std::vector<VisibleDeviceRef> visible;
  std::vector<int> taken;
  std::string_view rest = value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view entry = Trim(rest.substr(0, comma));
    int pick = -1;
    if (entry.size() > 4 &&
        (StartsWithIgnoreCase(entry, "GPU-") || StartsWithIgnoreCase(entry, "MIG-"))) {
      pick = MatchPrefix(entry, uuids, [](const std::string& u) -> std::string_view { return u; });
    } else {
      auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), pick);
      if (ec != std::errc() || end != entry.data() + entry.size() || pick < 0 ||
          pick >= static_cast<int>(exposed.size())) {
        pick = -1;
      }
    }
    if (pick < 0 || std::find(taken.begin(), taken.end(), pick) != taken.end()) break;
    taken.push_back(pick);
    visible.push_back(exposed[pick]);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return visible;
}

}  // namespace gpufrac::simgpu
