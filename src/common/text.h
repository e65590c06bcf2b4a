// Small text helpers shared by modules: ASCII case folding for names users type in any case
// (GPU models, MIG profiles), and the HOST:PORT of a --listen flag.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpufrac {

// `text` with ASCII letters in lower case.
std::string AsciiLower(std::string_view text);
// Equal ignoring ASCII case ("h100-80gb" and "H100-80GB").
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

struct HostPort {
  std::string host;  // Without the brackets of "[::1]:80".
  uint16_t port = 0;
};
// "HOST:PORT" (IPv6 hosts in brackets). kInvalidArgument naming `flag` and showing `example` when
// there is no colon or the port is not a number 0..65535.
StatusOr<HostPort> ParseHostPort(std::string_view text, std::string_view flag,
                                 std::string_view example);

}  // namespace gpufrac
