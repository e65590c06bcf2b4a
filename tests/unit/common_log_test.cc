// Tests of the stderr logger: prefix, level tags, filtering and one line per message.
#include <gtest/gtest.h>

#include <string>

#include "common/log.h"

namespace gpufrac {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = GetLogLevel(); }
  void TearDown() override { SetLogLevel(saved_); }

  LogLevel saved_ = LogLevel::kInfo;
};

TEST_F(LogTest, DefaultLevelIsInfo) { EXPECT_EQ(saved_, LogLevel::kInfo); }

TEST_F(LogTest, PrefixAndTags) {
  SetLogLevel(LogLevel::kDebug);
  testing::internal::CaptureStderr();
  LogDebug("probing %s", "libnvidia-ml.so.1");
  LogInfo("found %d GPUs", 2);
  LogWarning("GPU %u is lost", 1u);
  LogError("no NVIDIA driver found");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "gpufrac: debug: probing libnvidia-ml.so.1\n"
            "gpufrac: found 2 GPUs\n"
            "gpufrac: warning: GPU 1 is lost\n"
            "gpufrac: error: no NVIDIA driver found\n");
}

TEST_F(LogTest, LevelFilters) {
  SetLogLevel(LogLevel::kWarning);
  testing::internal::CaptureStderr();
  LogDebug("hidden");
  LogInfo("hidden");
  LogWarning("shown");
  LogError("shown too");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "gpufrac: warning: shown\ngpufrac: error: shown too\n");
}

TEST_F(LogTest, QuietPrintsNothing) {
  SetLogLevel(LogLevel::kQuiet);
  EXPECT_EQ(GetLogLevel(), LogLevel::kQuiet);
  testing::internal::CaptureStderr();
  LogError("hidden");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST_F(LogTest, LongMessagesAreNotTruncated) {
  const std::string long_text(10000, 'x');
  testing::internal::CaptureStderr();
  LogInfo("%s", long_text.c_str());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "gpufrac: " + long_text + "\n");
}

}  // namespace
}  // namespace gpufrac
