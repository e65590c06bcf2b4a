// The small POSIX layer (common/posix.h): an owning descriptor closes what it owns exactly once,
// and an errno becomes a Status whose code says what a caller can do.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "common/posix.h"

namespace gpufrac {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

int OpenNull() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

TEST(UniqueFd, ClosesWhatItOwnsOnceAndMovesOwnership) {
  int raw = OpenNull();
  ASSERT_GE(raw, 0);
  {
    UniqueFd fd(raw);
    EXPECT_TRUE(fd.valid());
    UniqueFd moved = std::move(fd);
    EXPECT_FALSE(fd.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is part
                               // of the contract.
    EXPECT_EQ(moved.get(), raw);
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFd, ResetClosesTheOldAndReleaseKeepsItOpen) {
  int first = OpenNull(), second = OpenNull();
  UniqueFd fd(first);
  fd.Reset(second);
  EXPECT_FALSE(IsOpen(first));
  EXPECT_EQ(fd.Release(), second);
  EXPECT_FALSE(fd.valid());
  EXPECT_TRUE(IsOpen(second));
  close(second);
}

TEST(ErrnoStatus, TheCodeSaysWhatTheCallerCanDo) {
  EXPECT_EQ(ErrnoStatus("open x", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus("open x", EACCES).code(), StatusCode::kPermissionDenied);
  // A full disk is not "unavailable": it is exhausted until something is freed.
  EXPECT_EQ(ErrnoStatus("write x", ENOSPC).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus("write x", EINTR).code(), StatusCode::kAborted);
  EXPECT_EQ(ErrnoStatus("open x", ELOOP).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoStatus("read x", EIO).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus("cannot open /srv/a", ENOENT).message(),
            "cannot open /srv/a: No such file or directory");
}

}  // namespace
}  // namespace gpufrac
