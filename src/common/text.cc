// ASCII case folding, one-line messages, HOST:PORT and RFC 3339 times (see text.h).
#include "common/text.h"

#include <cctype>
#include <cstdio>
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

std::string Trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  return std::string(text.substr(begin, text.find_last_not_of(kSpace) + 1 - begin));
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

namespace {

// The length of the UTF-8 sequence starting at text[i] and its code point, or 0 when the bytes
// there are not one (overlong forms, surrogates and values past U+10FFFF included).
size_t Utf8Sequence(std::string_view text, size_t i, uint32_t* code) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  size_t n = lead < 0x80           ? 1
             : (lead >> 5) == 0x6  ? 2
             : (lead >> 4) == 0xe  ? 3
             : (lead >> 3) == 0x1e ? 4
                                   : 0;
  if (n == 0 || i + n > text.size()) return 0;
  uint32_t c = n == 1 ? lead : lead & (0xff >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    c = (c << 6) | (byte(i + k) & 0x3f);
  }
  static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kSmallest[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *code = c;
  return n;
}

}  // namespace

bool IsUtf8(std::string_view text) {
  uint32_t code = 0;
  for (size_t i = 0; i < text.size();) {
    size_t n = Utf8Sequence(text, i, &code);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char escaped[16];
  for (size_t i = 0; i < text.size();) {
    uint32_t code = 0;
    size_t n = Utf8Sequence(text, i, &code);
    if (n == 0) {
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned char>(text[i]));
      out += escaped;
      ++i;
      continue;
    }
    if (code == '\n') {
      out += "\\n";
    } else if (code == '\t') {
      out += "\\t";
    } else if (code == '\r') {
      out += "\\r";
    } else if (code < 0x20 || code == 0x7f) {
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned>(code));
      out += escaped;
    } else if ((code >= 0x80 && code <= 0x9f) || (code >= 0x202a && code <= 0x202e) ||
               (code >= 0x2066 && code <= 0x2069) || code == 0x200e || code == 0x200f ||
               code == 0x061c || code == 0x2028 || code == 0x2029) {
      std::snprintf(escaped, sizeof(escaped), "\\u{%04x}", static_cast<unsigned>(code));
      out += escaped;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
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
