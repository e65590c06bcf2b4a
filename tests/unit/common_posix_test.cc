// The small POSIX layer (common/posix.h): an owning descriptor closes what it owns exactly once,
// an errno becomes a Status whose code says what a caller can do, and the one "is this directory
// ours" check holds against the attacks on it (a link swapped in, another user's directory, one
// others can write, a sticky one such as /tmp, a file where a directory should be).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "common/posix.h"
#include "scratch_dir.h"

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
  EXPECT_EQ(ErrnoStatus("write x", EDQUOT).code(), StatusCode::kResourceExhausted);
  // Interrupted or busy: the same call may work when tried again.
  EXPECT_EQ(ErrnoStatus("write x", EINTR).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus("rmdir x", EBUSY).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus("read x", EIO).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus("open x", ENAMETOOLONG).code(), StatusCode::kInvalidArgument);
  // Something on disk is in the way: retrying will not help until it is changed.
  EXPECT_EQ(ErrnoStatus("open x", ELOOP).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoStatus("create x", EEXIST).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoStatus("write x", EROFS).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoStatus("cannot open /srv/a", ENOENT).message(),
            "cannot open /srv/a: No such file or directory");
}

constexpr uid_t kNobody = 65534;  // A real second user: tests run as root where it matters.

// Runs `body` in a child process as uid/gid 65534 (nobody); whether it returned true.
bool AsNobody(const std::function<bool()>& body) {
  pid_t child = fork();
  if (child == 0) {
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(2);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool Has(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

UniqueFd OpenDir(const std::string& path) {
  return UniqueFd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// CheckDirectoryIsOurs and OpenOurDirectoryAt on a directory the test makes in its own scratch
// directory (under /tmp, which is fine here: only the directory itself is judged).
class OurDirectoryTest : public ::testing::Test {
 protected:
  testing::ScratchDir scratch_{"common-posix-test"};
  const std::string dir_ = scratch_.File("ours");
  void SetUp() override {
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
    base_ = OpenDir(scratch_.path());
    ASSERT_TRUE(base_.valid());
  }
  StatusOr<UniqueFd> Open(const std::string& name) {
    return OpenOurDirectoryAt(base_.get(), name, scratch_.File(name));
  }
  UniqueFd base_;
};

TEST_F(OurDirectoryTest, OursAloneIsAccepted) {
  StatusOr<UniqueFd> opened = Open("ours");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE(CheckDirectoryIsOurs(opened->get(), dir_).ok());
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);  // Others may read and search it: still ours.
  EXPECT_TRUE(Open("ours").ok());
  // The same check as a path: AT_FDCWD and an absolute name.
  EXPECT_TRUE(OpenOurDirectoryAt(AT_FDCWD, dir_, dir_).ok());
}

TEST_F(OurDirectoryTest, WritableByItsGroupOrOthersIsRefused) {
  for (mode_t mode : {0770, 0702, 0777}) {
    ASSERT_EQ(chmod(dir_.c_str(), mode), 0);
    StatusOr<UniqueFd> opened = Open("ours");
    ASSERT_FALSE(opened.ok()) << std::oct << mode;
    EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Has(opened.status(), dir_ + " is writable by its group or others"))
        << opened.status();
  }
}

// Sticky (as /tmp and /dev/shm are) does not help: anyone may make names in it.
TEST_F(OurDirectoryTest, AStickyDirectoryIsRefused) {
  ASSERT_EQ(chmod(dir_.c_str(), 01777), 0);
  StatusOr<UniqueFd> opened = Open("ours");
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status(), dir_ + " is writable by its group or others (mode 1777)"))
      << opened.status();
  UniqueFd tmp = OpenDir("/tmp");
  EXPECT_FALSE(CheckDirectoryIsOurs(tmp.get(), "/tmp", DirOwner::kCallerOrRoot).ok());
}

TEST_F(OurDirectoryTest, ALinkSwappedInIsRefused) {
  // A link to a directory that would pass.
  ASSERT_EQ(symlink(dir_.c_str(), scratch_.File("link").c_str()), 0);
  StatusOr<UniqueFd> opened = Open("link");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(opened.status(), scratch_.File("link") + " is a symbolic link"))
      << opened.status();
  EXPECT_FALSE(OpenOurDirectoryAt(AT_FDCWD, scratch_.File("link"), "it").ok());
}

// Once open and checked, the directory is the descriptor: a swap of its name afterwards (renamed
// away, a link to another user's directory put in its place) changes nothing the caller does.
TEST_F(OurDirectoryTest, ASwapAfterTheCheckDoesNotReachTheCaller) {
  StatusOr<UniqueFd> opened = Open("ours");
  ASSERT_TRUE(opened.ok()) << opened.status();
  const std::string theirs = scratch_.File("theirs");
  ASSERT_EQ(mkdir(theirs.c_str(), 0777), 0);
  ASSERT_EQ(rename(dir_.c_str(), scratch_.File("moved").c_str()), 0);
  ASSERT_EQ(symlink(theirs.c_str(), dir_.c_str()), 0);
  UniqueFd made(openat(opened->get(), "file", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  ASSERT_TRUE(made.valid());
  EXPECT_TRUE(std::filesystem::exists(scratch_.File("moved") + "/file"));
  EXPECT_FALSE(std::filesystem::exists(theirs + "/file"));
  EXPECT_FALSE(Open("ours").ok());  // And opened again by name, the link is refused.
}

TEST_F(OurDirectoryTest, AFileIsNotADirectory) {
  const std::string file = scratch_.File("file");
  UniqueFd fd(open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  ASSERT_TRUE(fd.valid());
  Status checked = CheckDirectoryIsOurs(fd.get(), file);
  EXPECT_EQ(checked.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(checked, file + " is not a directory")) << checked;
  StatusOr<UniqueFd> opened = Open("file");
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status(), file + " is not a directory")) << opened.status();
  EXPECT_EQ(Open("missing").status().code(), StatusCode::kNotFound);
}

TEST_F(OurDirectoryTest, AnotherUsersDirectoryIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  ASSERT_EQ(chown(dir_.c_str(), kNobody, kNobody), 0);
  StatusOr<UniqueFd> opened = Open("ours");
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status(), dir_ + " belongs to uid 65534")) << opened.status();
  // Nor root's directory for another user, unless it is one above theirs on a path.
  ASSERT_EQ(chown(dir_.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(scratch_.path().c_str(), 0755), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const std::string dir = dir_;
  EXPECT_TRUE(AsNobody([&dir] {
    UniqueFd fd = OpenDir(dir);
    Status refused = CheckDirectoryIsOurs(fd.get(), dir);
    return fd.valid() &&
           Has(refused, dir +
                            " belongs to uid 0; gpufrac trusts only a directory "
                            "that uid 65534 owns") &&
           CheckDirectoryIsOurs(fd.get(), dir, DirOwner::kCallerOrRoot).ok();
  }));
}

// OpenOurDirectoryPath: every directory from / down, made where missing. Not under /tmp (a test
// of that aside): its own base is root's /run, or the user's home.
class OurDirectoryPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base =
        geteuid() == 0 ? "/run" : std::string(std::getenv("HOME") ?: "/nonexistent");
    std::string pattern = base + "/gpufrac-posix-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << pattern;
    root_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st {};
    return lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
  }
  std::string root_;
};

TEST_F(OurDirectoryPathTest, MakesWhatIsMissingWithExactlyTheModesAsked) {
  const mode_t old = umask(0077);
  StatusOr<UniqueFd> opened = OpenOurDirectoryPath(root_ + "/a/b/state", 0711, 0755);
  umask(old);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(ModeOf(root_ + "/a"), 0755u);
  EXPECT_EQ(ModeOf(root_ + "/a/b"), 0755u);
  EXPECT_EQ(ModeOf(root_ + "/a/b/state"), 0711u);
  // Opened again, as it is: the descriptor is the directory.
  StatusOr<UniqueFd> again = OpenOurDirectoryPath(root_ + "//a/b/state/", 0700, 0700);
  ASSERT_TRUE(again.ok()) << again.status();
  struct stat first {
  }, second{};
  ASSERT_EQ(fstat(opened->get(), &first), 0);
  ASSERT_EQ(fstat(again->get(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino);
}

// A sticky directory such as /tmp anywhere on the path: another user could make the missing
// component there first (and stop every caller), so the path is refused before anything is made.
TEST_F(OurDirectoryPathTest, AStickyParentSuchAsTmpIsRefused) {
  testing::ScratchDir scratch("common-posix-test");
  StatusOr<UniqueFd> opened = OpenOurDirectoryPath(scratch.File("state"), 0711, 0755);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(opened.status(), "/tmp is writable by its group or others (mode 1777)"))
      << opened.status();
  EXPECT_FALSE(std::filesystem::exists(scratch.File("state")));
  const std::string shared = root_ + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  opened = OpenOurDirectoryPath(shared + "/state", 0711, 0755);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status(), shared + " is writable by its group or others (mode 1777)"))
      << opened.status();
  EXPECT_EQ(opened.status().message().find('\n'), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(shared + "/state"));
}

TEST_F(OurDirectoryPathTest, ALinkOrAFileOnThePathIsRefused) {
  ASSERT_EQ(mkdir((root_ + "/real").c_str(), 0755), 0);
  ASSERT_EQ(symlink((root_ + "/real").c_str(), (root_ + "/link").c_str()), 0);
  StatusOr<UniqueFd> opened = OpenOurDirectoryPath(root_ + "/link/state", 0711, 0755);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status(), root_ + "/link is a symbolic link")) << opened.status();
  EXPECT_FALSE(std::filesystem::exists(root_ + "/real/state"));
  opened = OpenOurDirectoryPath(root_ + "/link", 0711, 0755);  // The last component too.
  EXPECT_TRUE(Has(opened.status(), root_ + "/link is a symbolic link")) << opened.status();
  UniqueFd file(open((root_ + "/file").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  ASSERT_TRUE(file.valid());
  opened = OpenOurDirectoryPath(root_ + "/file/state", 0711, 0755);
  EXPECT_TRUE(Has(opened.status(), root_ + "/file is not a directory")) << opened.status();
  EXPECT_FALSE(OpenOurDirectoryPath("relative/state", 0711, 0755).ok());
  EXPECT_FALSE(OpenOurDirectoryPath(root_ + "/real/../real", 0711, 0755).ok());
}

// A directory on the path (or the path itself) another user owns, or made first: refused.
TEST_F(OurDirectoryPathTest, AnotherUsersDirectoryOnThePathIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string theirs = root_ + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  StatusOr<UniqueFd> opened = OpenOurDirectoryPath(theirs + "/state", 0711, 0755);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status(), theirs + " belongs to uid 65534")) << opened.status();
  EXPECT_FALSE(std::filesystem::exists(theirs + "/state"));
  opened = OpenOurDirectoryPath(theirs, 0711, 0755);
  EXPECT_TRUE(Has(opened.status(), theirs + " belongs to uid 65534")) << opened.status();
  // Root's directories above are trusted for another caller; its own must be its own.
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  const std::string roots = root_ + "/roots";
  ASSERT_EQ(mkdir(roots.c_str(), 0755), 0);
  EXPECT_TRUE(AsNobody([&] {
    return OpenOurDirectoryPath(theirs + "/mine", 0700, 0755).ok() &&
           Has(OpenOurDirectoryPath(roots, 0700, 0755).status(), roots + " belongs to uid 0");
  }));
}

}  // namespace
}  // namespace gpufrac
