// Tests of size and share parsing/printing: every accepted spelling, every error message,
// rounding, and round trips between the parsers and the printers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/units.h"

namespace gpufrac {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kTiB = uint64_t{1} << 40;
constexpr uint64_t kPiB = uint64_t{1} << 50;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

void ExpectSize(const std::string& text, uint64_t bytes) {
  StatusOr<uint64_t> parsed = ParseSize(text);
  ASSERT_TRUE(parsed.ok()) << '"' << text << "\": " << parsed.status();
  EXPECT_EQ(*parsed, bytes) << '"' << text << '"';
}

void ExpectSizeError(const std::string& text, const std::string& message) {
  StatusOr<uint64_t> parsed = ParseSize(text);
  ASSERT_FALSE(parsed.ok()) << '"' << text << "\" parsed as " << *parsed;
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
  EXPECT_EQ(parsed.status().message(), message) << text;
}

TEST(ParseSizeTest, BareNumbersAreBytes) {
  ExpectSize("1", 1);
  ExpectSize("100", 100);
  ExpectSize("1073741824", kGiB);
  ExpectSize("007", 7);
  ExpectSize("100.0", 100);  // A zero fraction is still whole bytes.
  ExpectSize("4.", 4);
  ExpectSize("18446744073709551615", kMax);
}

TEST(ParseSizeTest, ByteSuffix) {
  for (const char* text : {"100B", "100b", "100 B", "100.00B"}) ExpectSize(text, 100);
}

TEST(ParseSizeTest, EverySpellingOfEveryUnit) {
  const std::vector<std::pair<std::string, uint64_t>> units = {
      {"k", kKiB}, {"m", kMiB}, {"g", kGiB}, {"t", kTiB}, {"p", kPiB}};
  for (const auto& [letter, multiplier] : units) {
    const std::string upper(1, static_cast<char>(letter[0] - 'a' + 'A'));
    for (const std::string& unit :
         {upper, letter, upper + "i", letter + "i", upper + "B", letter + "b", upper + "b",
          upper + "iB", letter + "ib", upper + "IB", letter + "iB"}) {
      ExpectSize("3" + unit, 3 * multiplier);
      ExpectSize("3 " + unit, 3 * multiplier);
    }
  }
}

TEST(ParseSizeTest, ExamplesFromTheDesign) {
  ExpectSize("4G", 4 * kGiB);
  ExpectSize("4GiB", 4 * kGiB);
  ExpectSize("4gb", 4 * kGiB);
  ExpectSize("512Mi", 512 * kMiB);
  ExpectSize("4096M", 4 * kGiB);
  ExpectSize("1.5G", 3 * kGiB / 2);
}

TEST(ParseSizeTest, Whitespace) {
  ExpectSize("  4G  ", 4 * kGiB);
  ExpectSize("4\tG", 4 * kGiB);
  ExpectSize("\n4 GiB\n", 4 * kGiB);
}

TEST(ParseSizeTest, FractionsRoundDownToWholeBytes) {
  ExpectSize(".5G", kGiB / 2);
  ExpectSize("0.5G", kGiB / 2);
  ExpectSize("1.1G", 1181116006);  // 1181116006.4
  ExpectSize("0.1K", 102);         // 102.4
  ExpectSize("0.999K", 1022);      // 1022.976
  ExpectSize("0.001K", 1);         // 1.024
  ExpectSize("0.3333333333333333333333333333G", kGiB / 3);
  ExpectSize("2.75T", 11 * kTiB / 4);
  // The largest size there is, spelled with a fraction that needs every bit.
  ExpectSize("16383.99999999999999999999P", kMax);
  ExpectSize("16383P", 16383 * kPiB);
}

TEST(ParseSizeTest, Empty) {
  const std::string message =
      "size is empty (give a number of bytes or a number with a unit, e.g. 4G or 1536Mi)";
  ExpectSizeError("", message);
  ExpectSizeError("   ", message);
}

TEST(ParseSizeTest, Zero) {
  for (const char* text : {"0", "0G", "0.0G", " 0 B", "000"}) {
    ExpectSizeError(text, "size must be greater than zero");
  }
  ExpectSizeError("0.0009K",
                  "size \"0.0009K\" is less than one byte (size must be greater than zero)");
}

TEST(ParseSizeTest, Negative) {
  ExpectSizeError("-4G", "size \"-4G\" is negative (sizes must be greater than zero, e.g. 4G)");
  ExpectSizeError(" -1", "size \"-1\" is negative (sizes must be greater than zero, e.g. 4G)");
}

TEST(ParseSizeTest, UnknownUnits) {
  ExpectSizeError("4X", "unknown size unit \"4X\" (use K, M, G or T, e.g. 4G or 1536Mi)");
  for (const char* text : {"4GG", "4Gb2", "4iB", "4 G B", "1e9", "4E", "4EiB", "4GiBs", "1.2.3G",
                           "4_000", "4,5G", "4 bytes", "0x10"}) {
    ExpectSizeError(text, std::string("unknown size unit \"") + text +
                              "\" (use K, M, G or T, e.g. 4G or 1536Mi)");
  }
}

TEST(ParseSizeTest, NotANumber) {
  for (const char* text : {"G", "abc", ".", ".G", "+4G", "four", "nan", "inf"}) {
    ExpectSizeError(text, std::string("size \"") + text +
                              "\" is not a number (e.g. 4G, 1536Mi or 1073741824 for bytes)");
  }
}

TEST(ParseSizeTest, FractionOfAByte) {
  ExpectSizeError("1.5",
                  "size \"1.5\" is a fraction of a byte (use a unit for fractions, e.g. 1.5G)");
  ExpectSizeError("1.5B",
                  "size \"1.5B\" is a fraction of a byte (use a unit for fractions, e.g. 1.5G)");
}

TEST(ParseSizeTest, TooLarge) {
  for (const char* text : {"18446744073709551616", "99999999999999999999999", "16384P", "20000P",
                           "16777216T", "17179869184G", "16384.0P"}) {
    ExpectSizeError(text, std::string("size \"") + text +
                              "\" is too large (sizes must be less than 16384P, i.e. 2^64 bytes)");
  }
}

TEST(ParseSizeTest, ErrorsAreOneLine) {
  for (const char* text : {"", "0", "-1", "4X", "abc", "1.5", "20000P", "0.0001K"}) {
    StatusOr<uint64_t> parsed = ParseSize(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().message().find('\n'), std::string::npos) << text;
  }
}

TEST(FormatSizeTest, Bytes) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(1), "1 B");
  EXPECT_EQ(FormatSize(100), "100 B");
  EXPECT_EQ(FormatSize(1023), "1023 B");
}

TEST(FormatSizeTest, LargestUnitReached) {
  EXPECT_EQ(FormatSize(kKiB), "1 KiB");
  EXPECT_EQ(FormatSize(512 * kMiB), "512 MiB");
  EXPECT_EQ(FormatSize(4 * kGiB), "4 GiB");
  EXPECT_EQ(FormatSize(2 * kTiB), "2 TiB");
  EXPECT_EQ(FormatSize(kPiB), "1 PiB");
  EXPECT_EQ(FormatSize(kPiB * 2000), "2000 PiB");  // No unit beyond P.
  // Rounding must not print 16384 PiB (2^64 bytes), which ParseSize rightly rejects.
  EXPECT_EQ(FormatSize(kMax), "16383.99 PiB");
  EXPECT_TRUE(ParseSize(FormatSize(kMax)).ok());
}

TEST(FormatSizeTest, AtMostTwoDecimalsWithoutTrailingZeros) {
  EXPECT_EQ(FormatSize(3 * kGiB / 2), "1.5 GiB");
  EXPECT_EQ(FormatSize(5 * kGiB / 4), "1.25 GiB");
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatSize(kGiB + kGiB / 20), "1.05 GiB");
  EXPECT_EQ(FormatSize(81559 * kMiB), "79.65 GiB");  // An H100 80GB as NVML reports it.
}

TEST(FormatSizeTest, RoundsToNearest) {
  EXPECT_EQ(FormatSize(kGiB + 1), "1 GiB");
  EXPECT_EQ(FormatSize(kGiB + kGiB * 4 / 1000), "1 GiB");     // 1.004
  EXPECT_EQ(FormatSize(kGiB + kGiB * 6 / 1000), "1.01 GiB");  // 1.006
  EXPECT_EQ(FormatSize(4 * kGiB - 1), "4 GiB");
  EXPECT_EQ(FormatSize(1099), "1.07 KiB");  // 1.0732...
  EXPECT_EQ(FormatSize(1100), "1.07 KiB");  // 1.0742...
  EXPECT_EQ(FormatSize(1101), "1.08 KiB");  // 1.0752...
}

TEST(FormatSizeTest, RoundingUpToTheNextUnitUsesThatUnit) {
  EXPECT_EQ(FormatSize(kGiB - 1000), "1 GiB");  // 1023.999 MiB
  EXPECT_EQ(FormatSize(kKiB * 1023 + 1020), "1 MiB");
  EXPECT_EQ(FormatSize(kGiB - 6 * kMiB), "1018 MiB");
}

TEST(UnitsRoundTripTest, ExactForWholeAndQuarterUnits) {
  for (int shift = 10; shift <= 50; shift += 10) {
    for (uint64_t k : {1, 2, 3, 7, 100, 512, 1023}) {
      const uint64_t whole = k << shift;
      EXPECT_EQ(*ParseSize(FormatSize(whole)), whole) << FormatSize(whole);
      const uint64_t quarters = (4 * k + 1) << (shift - 2);  // k.25 units
      EXPECT_EQ(*ParseSize(FormatSize(quarters)), quarters) << FormatSize(quarters);
    }
  }
  for (uint64_t bytes : {1, 2, 999, 1023}) EXPECT_EQ(*ParseSize(FormatSize(bytes)), bytes);
}

TEST(UnitsRoundTripTest, WithinHalfAHundredthOfTheUnit) {
  std::mt19937_64 random(20240601);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t bytes = random() >> (random() % 64);
    if (bytes == 0) continue;
    const std::string text = FormatSize(bytes);
    StatusOr<uint64_t> back = ParseSize(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    // Printing rounds to hundredths of the unit shown; parsing rounds down to a byte.
    const double unit = std::pow(2.0, 10.0 * (text.find("PiB") != std::string::npos   ? 5
                                              : text.find("TiB") != std::string::npos ? 4
                                              : text.find("GiB") != std::string::npos ? 3
                                              : text.find("MiB") != std::string::npos ? 2
                                              : text.find("KiB") != std::string::npos ? 1
                                                                                      : 0));
    EXPECT_LE(std::fabs(static_cast<double>(*back) - static_cast<double>(bytes)), unit * 0.005 + 1)
        << bytes << " -> " << text << " -> " << *back;
  }
}

void ExpectShare(const std::string& text, bool allow_one, double share) {
  StatusOr<double> parsed = ParseFraction(text, allow_one);
  ASSERT_TRUE(parsed.ok()) << '"' << text << "\": " << parsed.status();
  EXPECT_DOUBLE_EQ(*parsed, share) << '"' << text << '"';
}

void ExpectShareError(const std::string& text, bool allow_one, const std::string& message) {
  StatusOr<double> parsed = ParseFraction(text, allow_one);
  ASSERT_FALSE(parsed.ok()) << '"' << text << "\" parsed as " << *parsed;
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
  EXPECT_EQ(parsed.status().message(), message) << text;
}

TEST(ParseFractionTest, Decimals) {
  for (bool allow_one : {false, true}) {
    ExpectShare("0.25", allow_one, 0.25);
    ExpectShare(".5", allow_one, 0.5);
    ExpectShare("0.5", allow_one, 0.5);
    ExpectShare(" 0.75 ", allow_one, 0.75);
    ExpectShare("0.001", allow_one, 0.001);
    ExpectShare("0.999", allow_one, 0.999);
    ExpectShare("0.3333", allow_one, 0.3333);
  }
}

TEST(ParseFractionTest, Percentages) {
  ExpectShare("25%", false, 0.25);
  ExpectShare("25 %", false, 0.25);
  ExpectShare("12.5%", false, 0.125);
  ExpectShare("0.1%", false, 0.001);
  ExpectShare("100%", true, 1.0);
}

TEST(ParseFractionTest, OneOnlyWhenAllowed) {
  ExpectShare("1", true, 1.0);
  ExpectShare("1.0", true, 1.0);
  ExpectShare("1.", true, 1.0);
  ExpectShare("0.9996", true, 0.9996);  // Rounds to 1000 thousandths, which is allowed here.
  const char* kLessThanOne = "\" must be less than 1 (ask for whole GPUs instead)";
  for (const char* text : {"1", "1.0", "100%", "1.5", "2"}) {
    ExpectShareError(text, false, std::string("share \"") + text + kLessThanOne);
  }
}

TEST(ParseFractionTest, MoreThanOneGpu) {
  for (const char* text : {"1.5", "1.0001", "101%", "2"}) {
    ExpectShareError(text, true,
                     std::string("share \"") + text + "\" is more than one GPU (at most 1)");
  }
}

TEST(ParseFractionTest, Empty) {
  for (bool allow_one : {false, true}) {
    ExpectShareError("", allow_one, "share is empty (give a share of a GPU, e.g. 0.25 or 25%)");
    ExpectShareError("  ", allow_one, "share is empty (give a share of a GPU, e.g. 0.25 or 25%)");
  }
}

TEST(ParseFractionTest, Zero) {
  for (const char* text : {"0", "0.0", ".0", "0%", "0.000"}) {
    ExpectShareError(text, false,
                     "share must be greater than 0 (e.g. 0.25 for a quarter of a GPU)");
  }
}

TEST(ParseFractionTest, Negative) {
  ExpectShareError("-0.5", false,
                   "share \"-0.5\" is negative (a share must be greater than 0, e.g. 0.25)");
  ExpectShareError("-25%", true,
                   "share \"-25%\" is negative (a share must be greater than 0, e.g. 0.25)");
}

TEST(ParseFractionTest, NotANumber) {
  for (const char* text : {"abc", "0.2.5", "1e-1", "0x1", "%", "nan", "inf", "0.25G", "+0.5",
                           "25%%", "1/4", ".", "0,5", "% 25"}) {
    ExpectShareError(text, false,
                     std::string("share \"") + text + "\" is not a number (e.g. 0.25, .5 or 25%)");
  }
}

TEST(ParseFractionTest, FinerThanAThousandth) {
  ExpectShareError("0.0001", false,
                   "share \"0.0001\" is too small (the smallest share is 0.001 of a GPU)");
  ExpectShareError("0.04%", true,
                   "share \"0.04%\" is too small (the smallest share is 0.001 of a GPU)");
  ExpectShareError("0.9996", false,
                   "share \"0.9996\" rounds to a whole GPU (shares are counted in thousandths; "
                   "the largest is 0.999)");
}

TEST(ParseFractionTest, ResultAlwaysConvertsToAValidMilli) {
  std::mt19937 random(7);
  for (int i = 0; i < 20000; ++i) {
    const std::string text = "0." + std::to_string(random() % 100000);
    for (bool allow_one : {false, true}) {
      StatusOr<double> share = ParseFraction(text, allow_one);
      if (!share.ok()) continue;
      const uint32_t milli = FractionToMilli(*share);
      EXPECT_GE(milli, 1u) << text;
      EXPECT_LE(milli, allow_one ? 1000u : 999u) << text;
    }
  }
}

TEST(FractionToMilliTest, RoundsToNearestThousandth) {
  EXPECT_EQ(FractionToMilli(0.25), 250u);
  EXPECT_EQ(FractionToMilli(0.001), 1u);
  EXPECT_EQ(FractionToMilli(0.0004), 0u);
  EXPECT_EQ(FractionToMilli(0.0006), 1u);
  EXPECT_EQ(FractionToMilli(0.285), 285u);  // 284.99999999999997 in binary.
  EXPECT_EQ(FractionToMilli(1.0 / 3), 333u);
  EXPECT_EQ(FractionToMilli(2.0 / 3), 667u);
  EXPECT_EQ(FractionToMilli(0.9994), 999u);
  EXPECT_EQ(FractionToMilli(1.0), 1000u);
}

TEST(FractionToMilliTest, ClampsOutOfRange) {
  EXPECT_EQ(FractionToMilli(0.0), 0u);
  EXPECT_EQ(FractionToMilli(-0.5), 0u);
  EXPECT_EQ(FractionToMilli(1.5), 1000u);
  EXPECT_EQ(FractionToMilli(std::numeric_limits<double>::quiet_NaN()), 0u);
  EXPECT_EQ(FractionToMilli(std::numeric_limits<double>::infinity()), 1000u);
}

TEST(BytesOfShareTest, RoundsDownWithoutOverflow) {
  EXPECT_EQ(BytesOfShare(80ull << 30, 250), 20ull << 30);
  EXPECT_EQ(BytesOfShare(80ull << 30, 1000), 80ull << 30);
  EXPECT_EQ(BytesOfShare(1001, 1), 1u);  // 1.001 bytes
  // A product past 2^64 is still exact: a thousandth of the largest size, times 999.
  EXPECT_EQ(BytesOfShare(~0ull, 999), ~0ull / 1000 * 999 + (~0ull % 1000) * 999 / 1000);
}

TEST(FormatMilliTest, DecimalsWithoutTrailingZeros) {
  EXPECT_EQ(FormatMilli(0), "0");
  EXPECT_EQ(FormatMilli(1), "0.001");
  EXPECT_EQ(FormatMilli(10), "0.01");
  EXPECT_EQ(FormatMilli(250), "0.25");
  EXPECT_EQ(FormatMilli(500), "0.5");
  EXPECT_EQ(FormatMilli(999), "0.999");
  EXPECT_EQ(FormatMilli(1000), "1");
  EXPECT_EQ(FormatMilli(1500), "1.5");
  EXPECT_EQ(FormatMilli(2000), "2");
}

TEST(UnitsRoundTripTest, EveryMilli) {
  for (uint32_t milli = 1; milli <= kMilliPerGpu; ++milli) {
    const std::string text = FormatMilli(milli);
    StatusOr<double> share = ParseFraction(text, /*allow_one=*/true);
    ASSERT_TRUE(share.ok()) << text << ": " << share.status();
    EXPECT_EQ(FractionToMilli(*share), milli) << text;
    EXPECT_EQ(ParseFraction(text, /*allow_one=*/false).ok(), milli < kMilliPerGpu) << text;
  }
}

}  // namespace
}  // namespace gpufrac
