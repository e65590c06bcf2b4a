// Small text helpers shared by modules: ASCII case folding for names users type in any case
// (GPU models, MIG profiles).
#pragma once

#include <string>
#include <string_view>

namespace gpufrac {

// `text` with ASCII letters in lower case.
std::string AsciiLower(std::string_view text);
// Equal ignoring ASCII case ("h100-80gb" and "H100-80GB").
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

}  // namespace gpufrac
