// Parsing and printing of sizes and GPU shares. Sizes are computed in exact integer arithmetic
// (never through a double) so that "1.1G" means the same byte count on every machine.
#include "common/units.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

namespace gpufrac {
namespace {

constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view Trim(std::string_view s) {
  s = TrimLeft(s);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Quoted(std::string_view s) {
  std::string out = "\"";
  out += s;
  out += '"';
  return out;
}

// A plain decimal at the start of a string: digits, optionally '.', digits; at least one digit.
// No sign and no exponent: those are rejected by the callers with a message of their own.
struct Decimal {
  std::string_view whole;     // Digits before the point (may be empty: ".5").
  std::string_view fraction;  // Digits after the point (may be empty: "4.").
  size_t length = 0;          // Characters consumed, point included.
};

std::optional<Decimal> ScanDecimal(std::string_view s) {
  Decimal d;
  size_t i = 0;
  while (i < s.size() && IsDigit(s[i])) ++i;
  d.whole = s.substr(0, i);
  if (i < s.size() && s[i] == '.') {
    size_t start = ++i;
    while (i < s.size() && IsDigit(s[i])) ++i;
    d.fraction = s.substr(start, i - start);
  }
  if (d.whole.empty() && d.fraction.empty()) return std::nullopt;
  d.length = i;
  return d;
}

// log2 of the multiplier a size unit stands for: "" and "B" are bytes; K, M, G, T, P may be
// followed by "i", "B" or "iB"; case is ignored.
std::optional<int> UnitShift(std::string_view unit) {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  if (unit.empty()) return 0;
  if (unit.size() == 1 && lower(unit[0]) == 'b') return 0;
  int shift;
  switch (lower(unit[0])) {
    case 'k':
      shift = 10;
      break;
    case 'm':
      shift = 20;
      break;
    case 'g':
      shift = 30;
      break;
    case 't':
      shift = 40;
      break;
    case 'p':
      shift = 50;
      break;
    default:
      return std::nullopt;
  }
  std::string_view rest = unit.substr(1);
  if (!rest.empty() && lower(rest[0]) == 'i') rest.remove_prefix(1);
  if (!rest.empty() && lower(rest[0]) == 'b') rest.remove_prefix(1);
  if (!rest.empty()) return std::nullopt;
  return shift;
}

Status SizeTooLarge(std::string_view text) {
  return InvalidArgumentError("size " + Quoted(text) +
                              " is too large (sizes must be less than 16384P, i.e. 2^64 bytes)");
}

}  // namespace

StatusOr<uint64_t> ParseSize(std::string_view text) {
  const std::string_view s = Trim(text);
  if (s.empty()) {
    return InvalidArgumentError(
        "size is empty (give a number of bytes or a number with a unit, e.g. 4G or 1536Mi)");
  }
  if (s.front() == '-') {
    return InvalidArgumentError("size " + Quoted(s) +
                                " is negative (sizes must be greater than zero, e.g. 4G)");
  }
  std::optional<Decimal> number = ScanDecimal(s);
  if (!number) {
    return InvalidArgumentError("size " + Quoted(s) +
                                " is not a number (e.g. 4G, 1536Mi or 1073741824 for bytes)");
  }
  std::optional<int> shift = UnitShift(TrimLeft(s.substr(number->length)));
  if (!shift) {
    return InvalidArgumentError("unknown size unit " + Quoted(s) +
                                " (use K, M, G or T, e.g. 4G or 1536Mi)");
  }
  const bool fractional = number->fraction.find_first_not_of('0') != std::string_view::npos;
  if (*shift == 0 && fractional) {
    return InvalidArgumentError("size " + Quoted(s) +
                                " is a fraction of a byte (use a unit for fractions, e.g. 1.5G)");
  }

  uint64_t whole = 0;
  for (char c : number->whole) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (whole > (kMaxU64 - digit) / 10) return SizeTooLarge(s);
    whole = whole * 10 + digit;
  }
  if (whole > (kMaxU64 >> *shift)) return SizeTooLarge(s);
  uint64_t bytes = whole << *shift;

  // floor(0.d1d2...dn * 2^shift), exactly: fold digits in from the last one, dividing by ten
  // each time. Flooring at every step gives the same result as flooring once at the end, and
  // every intermediate stays below 10 * 2^50.
  const uint64_t unit = uint64_t{1} << *shift;
  uint64_t fraction_bytes = 0;
  for (auto it = number->fraction.rbegin(); it != number->fraction.rend(); ++it) {
    fraction_bytes = (static_cast<uint64_t>(*it - '0') * unit + fraction_bytes) / 10;
  }
  if (fraction_bytes > kMaxU64 - bytes) return SizeTooLarge(s);
  bytes += fraction_bytes;

  if (bytes == 0) {
    if (whole == 0 && !fractional) return InvalidArgumentError("size must be greater than zero");
    return InvalidArgumentError("size " + Quoted(s) +
                                " is less than one byte (size must be greater than zero)");
  }
  return bytes;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnitNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  constexpr int kLargest = 5;
  if (bytes < 1024) return std::to_string(bytes) + " B";

  int unit = 1;
  while (unit < kLargest && (bytes >> (10 * (unit + 1))) != 0) ++unit;
  // Hundredths of the unit, rounded to nearest. Split into whole units and remainder so that
  // nothing overflows: the remainder is below 2^50 and whole units below 2^14.
  auto hundredths = [bytes](int u) {
    const int shift = 10 * u;
    const uint64_t rest = bytes & ((uint64_t{1} << shift) - 1);
    return (bytes >> shift) * 100 + ((rest * 100 + (uint64_t{1} << (shift - 1))) >> shift);
  };
  uint64_t h = hundredths(unit);
  if (h >= 1024 * 100 && unit < kLargest) h = hundredths(++unit);  // 1023.999 MiB -> 1 GiB.
  // 16384 PiB is 2^64 bytes, which no uint64_t holds; keep the output parseable.
  if (unit == kLargest && h >= 16384 * 100) h = 16384 * 100 - 1;

  std::string out = std::to_string(h / 100);
  if (const uint64_t cents = h % 100; cents != 0) {
    out += '.';
    out += static_cast<char>('0' + cents / 10);
    if (cents % 10 != 0) out += static_cast<char>('0' + cents % 10);
  }
  out += ' ';
  out += kUnitNames[unit];
  return out;
}

StatusOr<double> ParseFraction(std::string_view text, bool allow_one) {
  const std::string_view trimmed = Trim(text);
  if (trimmed.empty()) {
    return InvalidArgumentError("share is empty (give a share of a GPU, e.g. 0.25 or 25%)");
  }
  std::string_view s = trimmed;
  const bool percent = s.back() == '%';
  if (percent) s = Trim(s.substr(0, s.size() - 1));
  if (!s.empty() && s.front() == '-') {
    return InvalidArgumentError("share " + Quoted(trimmed) +
                                " is negative (a share must be greater than 0, e.g. 0.25)");
  }
  std::optional<Decimal> number = ScanDecimal(s);
  if (!number || number->length != s.size()) {
    return InvalidArgumentError("share " + Quoted(trimmed) +
                                " is not a number (e.g. 0.25, .5 or 25%)");
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) {
    // Only reachable for absurdly long digit strings that overflow a double.
    return InvalidArgumentError("share " + Quoted(trimmed) + " is out of range");
  }
  if (percent) value /= 100;

  if (value == 0) {
    return InvalidArgumentError("share must be greater than 0 (e.g. 0.25 for a quarter of a GPU)");
  }
  if (allow_one && value > 1) {
    return InvalidArgumentError("share " + Quoted(trimmed) + " is more than one GPU (at most 1)");
  }
  if (!allow_one && value >= 1) {
    return InvalidArgumentError("share " + Quoted(trimmed) +
                                " must be less than 1 (ask for whole GPUs instead)");
  }
  const uint32_t milli = FractionToMilli(value);
  if (milli == 0) {
    return InvalidArgumentError("share " + Quoted(trimmed) +
                                " is too small (the smallest share is 0.001 of a GPU)");
  }
  if (!allow_one && milli >= kMilliPerGpu) {
    return InvalidArgumentError("share " + Quoted(trimmed) +
                                " rounds to a whole GPU (shares are counted in thousandths; the "
                                "largest is 0.999)");
  }
  return value;
}

uint32_t FractionToMilli(double fraction) {
  if (!(fraction > 0)) return 0;  // Also NaN.
  if (fraction >= 1) return kMilliPerGpu;
  return static_cast<uint32_t>(std::lround(fraction * kMilliPerGpu));
}

std::string FormatMilli(uint32_t milli) {
  std::string out = std::to_string(milli / kMilliPerGpu);
  uint32_t rest = milli % kMilliPerGpu;
  if (rest != 0) {
    char digits[3] = {static_cast<char>('0' + rest / 100), static_cast<char>('0' + rest / 10 % 10),
                      static_cast<char>('0' + rest % 10)};
    size_t n = 3;
    while (digits[n - 1] == '0') --n;
    out += '.';
    out.append(digits, n);
  }
  return out;
}

}  // namespace gpufrac
