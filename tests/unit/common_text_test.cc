// Text helpers: case folding for names users type, and the HOST:PORT of a --listen flag.
#include <gtest/gtest.h>

#include "common/text.h"

namespace gpufrac {
namespace {

TEST(TextTest, CaseFolding) {
  EXPECT_EQ(AsciiLower("H100-80GB"), "h100-80gb");
  EXPECT_TRUE(EqualsIgnoreCase("3G.40GB", "3g.40gb"));
  EXPECT_FALSE(EqualsIgnoreCase("3g.40gb", "3g.40g"));
}

TEST(TextTest, HostPortAsListenFlagsTakeIt) {
  StatusOr<HostPort> v4 = ParseHostPort("0.0.0.0:8888", "--listen", "0.0.0.0:8888");
  ASSERT_TRUE(v4.ok()) << v4.status().ToString();
  EXPECT_EQ(v4->host, "0.0.0.0");
  EXPECT_EQ(v4->port, 8888);
  StatusOr<HostPort> v6 = ParseHostPort("[::1]:0", "--listen", "x");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  StatusOr<HostPort> any = ParseHostPort(":7450", "--listen", "x");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->host, "");

  StatusOr<HostPort> no_colon = ParseHostPort("8888", "--listen", "0.0.0.0:8888");
  EXPECT_EQ(no_colon.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(no_colon.status().message(), "--listen 8888: write HOST:PORT, e.g. 0.0.0.0:8888");
  for (const char* bad : {"h:", "h:80abc", "h:-1", "h:65536", "h:99999999999"}) {
    StatusOr<HostPort> r = ParseHostPort(bad, "--listen", "x");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("0..65535"), std::string::npos) << bad;
  }
  EXPECT_EQ(ParseHostPort("h:65535", "--listen", "x")->port, 65535);
}

TEST(TextTest, OneLineShowsControlCharactersAsQuestionMarks) {
  EXPECT_EQ(OneLine("train.py"), "train.py");
  EXPECT_EQ(OneLine("a\nb\rc\td\x7f\x01"
                    "e"),
            "a?b?c?d??e");
  EXPECT_EQ(OneLine("GPU \xc3\xa9"), "GPU \xc3\xa9");  // UTF-8 is left alone
}

TEST(TextTest, PrintableEscapesWhatCouldForgeOrDriveATerminal) {
  EXPECT_EQ(Printable("python train.py --lr 0.1"), "python train.py --lr 0.1");
  EXPECT_EQ(Printable("GPU \xc3\xa9 \xe6\xbc\xa2"), "GPU \xc3\xa9 \xe6\xbc\xa2");  // UTF-8 kept
  EXPECT_EQ(Printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(Printable("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
  EXPECT_EQ(Printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(Printable("\x7f"), "\\x7f");
  EXPECT_EQ(Printable("\xc2\x9b"
                      "31m"),
            "\\u{009b}31m");  // C1 CSI
  EXPECT_EQ(Printable("\xe2\x80\xae"
                      "txt"),
            "\\u{202e}txt");                                // right-to-left override
  EXPECT_EQ(Printable("\xff\xc3"), "\\xff\\xc3");           // not UTF-8
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
}

TEST(TextTest, IsUtf8FollowsRfc3629) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("plain ascii"));
  EXPECT_TRUE(IsUtf8("GPU \xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80"));  // 2, 3 and 4 bytes
  EXPECT_FALSE(IsUtf8("latin-1 \xe9t\xe9"));                          // a lone lead byte
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));                                   // overlong '/'
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));                               // a surrogate
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));                           // past U+10FFFF
  EXPECT_FALSE(IsUtf8("cut \xe6\xbc"));                               // cut short
  EXPECT_FALSE(IsUtf8("\x80"));                                       // a continuation alone
}

TEST(Rfc3339Test, WritesAndReadsTheApiServersTimes) {
  const auto t = std::chrono::system_clock::from_time_t(1700000000);
  EXPECT_EQ(Rfc3339(t), "2023-11-14T22:13:20Z");
  EXPECT_EQ(ParseRfc3339("2023-11-14T22:13:20Z"), t);
  EXPECT_EQ(ParseRfc3339("2023-11-14T22:13:20.123456Z"), t);  // fractions are ignored
  EXPECT_FALSE(ParseRfc3339("").has_value());
  EXPECT_FALSE(ParseRfc3339("yesterday").has_value());
}

TEST(TextTest, TrimRemovesWhitespaceAtBothEndsOnly) {
  EXPECT_EQ(Trim("  a b\t\r\n"), "a b");
  EXPECT_EQ(Trim(" \t\n"), "");
  EXPECT_EQ(Trim("x"), "x");
}

}  // namespace
}  // namespace gpufrac
