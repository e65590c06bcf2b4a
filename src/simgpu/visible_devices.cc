// CUDA_VISIBLE_DEVICES parsing.
#include "simgpu/visible_devices.h"

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

// The physical index an entry names, or -1 if it names none or is ambiguous.
int Resolve(std::string_view entry, std::span<const std::string> uuids) {
  if (entry.size() > 4 && StartsWithIgnoreCase(entry, "GPU-")) {
    int match = -1;
    for (std::size_t i = 0; i < uuids.size(); ++i) {
      if (!StartsWithIgnoreCase(uuids[i], entry)) continue;
      if (match >= 0) return -1;  // prefix is not unique
      match = static_cast<int>(i);
    }
    return match;
  }
  int index = -1;
  auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
  if (ec != std::errc() || end != entry.data() + entry.size()) return -1;
  if (index < 0 || index >= static_cast<int>(uuids.size())) return -1;
  return index;
}

}  // namespace

std::vector<int> ParseVisibleDevices(const char* value, std::span<const std::string> uuids) {
  std::vector<int> visible;
  if (value == nullptr) {
    for (std::size_t i = 0; i < uuids.size(); ++i) visible.push_back(static_cast<int>(i));
    return visible;
  }
  std::string_view rest = value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const int index = Resolve(Trim(rest.substr(0, comma)), uuids);
    if (index < 0 || std::find(visible.begin(), visible.end(), index) != visible.end()) break;
    visible.push_back(index);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return visible;
}

}  // namespace gpufrac::simgpu
