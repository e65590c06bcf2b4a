// Small text helpers shared by modules: ASCII case folding for names users type in any case
// (GPU models, MIG profiles), one-line messages, the HOST:PORT of a --listen flag, and RFC 3339
// times.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpufrac {

// `text` with ASCII letters in lower case.
std::string AsciiLower(std::string_view text);
// Equal ignoring ASCII case ("h100-80gb" and "H100-80GB").
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// `text` without the spaces, tabs, carriage returns and newlines at its ends.
std::string Trim(std::string_view text);

// `text` with its control characters (newlines included) shown as '?': one line of a log or an
// error message, whatever a user or a file put in it.
std::string OneLine(std::string text);

// `text` safe to show on a terminal, in a table cell or a line: newline, tab and carriage return
// as "\n", "\t", "\r"; other control characters (C0, DEL, C1), the bidirectional-text controls
// that reorder what a terminal shows (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C),
// the line and paragraph separators (U+2028, U+2029) and bytes that are not UTF-8 as "\xNN" or
// "\u{NNNN}". Printable UTF-8 is kept as it is.
std::string Printable(std::string_view text);

// Whether `text` is UTF-8 as RFC 3629 has it: no overlong forms, no surrogates, nothing above
// U+10FFFF.
bool IsUtf8(std::string_view text);

struct HostPort {
  std::string host;  // Without the brackets of "[::1]:80".
  uint16_t port = 0;
};
// "HOST:PORT" (IPv6 hosts in brackets). kInvalidArgument naming `flag` and showing `example` when
// there is no colon or the port is not a number 0..65535.
StatusOr<HostPort> ParseHostPort(std::string_view text, std::string_view flag,
                                 std::string_view example);

// A time as the Kubernetes API server writes it (metadata.creationTimestamp, events): RFC 3339 in
// UTC, whole seconds, "2026-11-25T12:00:00Z".
std::string Rfc3339(std::chrono::system_clock::time_point at);
// The reverse (fractions of a second ignored); nullopt when `text` is not such a time.
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(const std::string& text);

}  // namespace gpufrac
