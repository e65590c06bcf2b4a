// ASCII case folding, one-line messages, HOST:PORT and RFC 3339 times (see text.h).
#include "common/text.h"

#include <cctype>
#include <ctime>

namespace gpufrac {
namespace {

char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

}  // namespace

std::string AsciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = Lower(c);
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

StatusOr<HostPort> ParseHostPort(std::string_view text, std::string_view flag,
                                 std::string_view example) {
  const std::string where = std::string(flag) + " " + std::string(text);
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgumentError(where + ": write HOST:PORT, e.g. " + std::string(example));
  }
  HostPort out;
  out.host = std::string(text.substr(0, colon));
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || value > 65535) {
      value = 65536;
      break;
    }
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (port.empty() || value > 65535) {
    return InvalidArgumentError(where + ": the port must be a number 0..65535");
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

std::string Rfc3339(std::chrono::system_clock::time_point at) {
  std::time_t t = std::chrono::system_clock::to_time_t(at);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<std::chrono::system_clock::time_point> ParseRfc3339(const std::string& text) {
  std::tm tm{};
  if (strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return std::nullopt;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace gpufrac
