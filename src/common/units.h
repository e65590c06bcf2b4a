// The one place gpufrac parses and prints sizes (bytes) and shares of a GPU (thousandths).
// Everything user-facing goes through here so that `4G` means the same thing everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpufrac {

// A whole GPU, in the thousandths shares are counted in.
inline constexpr uint32_t kMilliPerGpu = 1000;

// Parses a memory size into bytes. Units are binary everywhere (GPU memory is): a bare number is
// bytes; K, M, G, T and P mean 2^10 .. 2^50 and may be followed by `i` and/or `B`, in any case
// ("4G", "4GiB", "4gb", "512Mi", "4096M", "100B" and "100" are all accepted). Whitespace may
// surround the text and separate the number from the unit. A number with a unit may have a
// fractional part ("1.5G", ".5G"); the result is rounded down to a whole byte. Fractional bytes,
// negative or zero sizes, sizes of 2^64 bytes or more, exponents and unknown units are
// kInvalidArgument errors with a one-line message saying what to write instead.
StatusOr<uint64_t> ParseSize(std::string_view text);

// Prints a byte count for people in the largest binary unit it reaches, with at most two
// decimals and no trailing zeros: "100 B", "512 MiB", "1.5 GiB", "4 GiB" (rounded to nearest,
// so 4 GiB - 1 B prints as "4 GiB"). The output is accepted by ParseSize.
std::string FormatSize(uint64_t bytes);

// Parses a share of one GPU: a decimal fraction ("0.25", ".5", "1" when allow_one) or a
// percentage ("25%", "12.5 %"). The share must be at least a thousandth and below 1 (at most 1
// when allow_one) once rounded to thousandths, so FractionToMilli of the result is in
// [1, 999] (or [1, 1000]). Anything else is a kInvalidArgument error with a one-line message.
StatusOr<double> ParseFraction(std::string_view text, bool allow_one);

// The bytes `milli` thousandths of `total` bytes stand for, rounded down (exact for any sizes: the
// one formula every entry point uses to turn a share into a memory limit).
inline constexpr uint64_t BytesOfShare(uint64_t total, uint32_t milli) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * milli / kMilliPerGpu);
}

// A share as thousandths of a GPU, rounded to nearest; clamped to [0, 1000] (NaN gives 0).
uint32_t FractionToMilli(double fraction);

// Thousandths of a GPU printed as a decimal share with no trailing zeros: 250 -> "0.25",
// 1000 -> "1", 5 -> "0.005", 1500 -> "1.5". For 1..1000 the output is accepted by
// ParseFraction(..., /*allow_one=*/true) and converts back to the same thousandths.
std::string FormatMilli(uint32_t milli);

}  // namespace gpufrac
