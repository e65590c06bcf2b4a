// The MPS daemons' directories (machine/mps_daemons.h) are the service's own: a pipe or log
// directory that someone else could write, or a link planted in its place, is refused before any
// daemon starts, so no user can plant a socket or a pid file the service would trust.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "machine/mps_daemons.h"
#include "scratch_dir.h"

namespace gpufrac::machine {
namespace {

class MpsDaemonsTest : public ::testing::Test {
 protected:
  // A stand-in control program that records that it ran, and fails.
  MpsDaemonsTest() {
    control_ = scratch_.File("control");
    std::ofstream(control_) << "#!/bin/sh\ntouch " << scratch_.File("ran") << "\nexit 1\n";
    chmod(control_.c_str(), 0755);
  }
  Status EnsureGpu0() {
    MpsDaemons daemons({.dir = scratch_.File("mps"), .control = control_, .env = {}});
    return daemons.Ensure(0, "GPU-0").status();
  }
  bool ControlRan() const { return access(scratch_.File("ran").c_str(), F_OK) == 0; }

  testing::ScratchDir scratch_{"mps-daemons-test"};
  std::string control_;
};

TEST_F(MpsDaemonsTest, APipeDirectoryOthersCanWriteIsRefused) {
  ASSERT_EQ(mkdir(scratch_.File("mps").c_str(), 0711), 0);
  ASSERT_EQ(mkdir(scratch_.File("mps/0").c_str(), 0711), 0);
  ASSERT_EQ(mkdir(scratch_.File("mps/0/pipe").c_str(), 0777), 0);
  ASSERT_EQ(chmod(scratch_.File("mps/0/pipe").c_str(), 0777), 0);  // whatever the umask
  const Status status = EnsureGpu0();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find(scratch_.File("mps/0/pipe")), std::string::npos)
      << status.ToString();
  EXPECT_FALSE(ControlRan());
}

TEST_F(MpsDaemonsTest, ALinkInPlaceOfTheLogDirectoryIsRefused) {
  ASSERT_EQ(mkdir(scratch_.File("elsewhere").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(scratch_.File("mps").c_str(), 0711), 0);
  ASSERT_EQ(mkdir(scratch_.File("mps/0").c_str(), 0711), 0);
  ASSERT_EQ(symlink(scratch_.File("elsewhere").c_str(), scratch_.File("mps/0/log").c_str()), 0);
  const Status status = EnsureGpu0();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_FALSE(ControlRan());
}

TEST_F(MpsDaemonsTest, ADirectoryOfAnotherUserIsRefused) {
  ASSERT_EQ(mkdir(scratch_.File("mps").c_str(), 0711), 0);
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  ASSERT_EQ(chown(scratch_.File("mps").c_str(), 65534, 65534), 0);
  const Status status = EnsureGpu0();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_FALSE(ControlRan());
}

TEST_F(MpsDaemonsTest, MissingDirectoriesAreMadeWithTheirModes) {
  EXPECT_FALSE(EnsureGpu0().ok());  // the stand-in control program fails
  struct stat st;
  ASSERT_EQ(stat(scratch_.File("mps/0/pipe").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(scratch_.File("mps/0").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  EXPECT_TRUE(ControlRan());
}

}  // namespace
}  // namespace gpufrac::machine
