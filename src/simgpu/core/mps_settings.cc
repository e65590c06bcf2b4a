// Parsing and printing of MPS settings (see mps_settings.h).
#include "simgpu/core/mps_settings.h"

#include <charconv>
#include <cstdint>

namespace gpufrac::simgpu {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::optional<std::uint32_t> ParseThreadPercentage(std::string_view text) {
  text = Trim(text);
  std::string_view whole = text, fraction;
  if (const std::size_t dot = text.find('.'); dot != std::string_view::npos) {
    whole = text.substr(0, dot);
    fraction = text.substr(dot + 1);
    if (fraction.size() != 1 || !AllDigits(fraction)) return std::nullopt;
  }
  if (!AllDigits(whole) || whole.size() > 3) return std::nullopt;
  std::uint32_t percent = 0;
  std::from_chars(whole.data(), whole.data() + whole.size(), percent);
  const std::uint32_t tenths = percent * 10 + (fraction.empty() ? 0 : fraction[0] - '0');
  if (tenths == 0 || tenths > kFullThreadPercentage) return std::nullopt;
  return tenths;
}

std::string FormatThreadPercentage(std::uint32_t tenths) {
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

int ThreadPercentageSms(int sm_count, std::uint32_t tenths) {
  const int sms =
      static_cast<int>(static_cast<std::uint64_t>(sm_count) * tenths / kFullThreadPercentage);
  return sms < 1 ? 1 : sms;
}

std::optional<std::uint64_t> ParseMemLimit(std::string_view text, bool allow_byte_suffix) {
  text = Trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view number = text.substr(0, digits);
  const std::string_view unit = text.substr(digits);
  std::uint64_t scale = 0;
  if (unit == "G" || (allow_byte_suffix && unit == "GB")) scale = kGiB;
  if (unit == "M" || (allow_byte_suffix && unit == "MB")) scale = kMiB;
  if (scale == 0 || number.empty() || number.size() > 12) return std::nullopt;
  std::uint64_t value = 0;
  std::from_chars(number.data(), number.data() + number.size(), value);
  if (value == 0 || value > UINT64_MAX / scale) return std::nullopt;
  return value * scale;
}

std::string FormatMemLimit(std::uint64_t bytes) {
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "G";
  return std::to_string(bytes / kMiB) + "M";
}

bool ParseDeviceMemLimits(std::string_view text, std::vector<DeviceMemLimit>* limits,
                          std::string* error) {
  limits->clear();
  std::string_view rest = text;
  while (!Trim(rest).empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view entry = Trim(rest.substr(0, comma));
    const std::size_t equals = entry.find('=');
    const std::string_view device =
        Trim(equals == std::string_view::npos ? entry : entry.substr(0, equals));
    const std::optional<std::uint64_t> bytes = equals == std::string_view::npos
                                                   ? std::nullopt
                                                   : ParseMemLimit(entry.substr(equals + 1), true);
    if (device.empty() || !bytes.has_value()) {
      *error = "\"" + std::string(entry) + "\" is not DEVICE=LIMIT (e.g. 0=1G or 0=512MB)";
      return false;
    }
    limits->push_back({.device = std::string(device), .bytes = *bytes});
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return true;
}

}  // namespace gpufrac::simgpu
