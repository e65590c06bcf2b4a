// The limit file: what the launcher writes is what the limiter reads, and every malformed file is
// refused with a reason naming the line.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "limiter/limit_config.h"

namespace gpufrac::limiter {
namespace {

constexpr const char* kUuid = "GPU-5349d0a2-1b3c-4d5e-8f90-a1b2c3d4e5f6";

std::string ParseError(const std::string& text) {
  LimitConfig c;
  char err[256] = "";
  EXPECT_FALSE(ParseLimitConfig(text.data(), text.size(), &c, err, sizeof(err))) << text;
  return err;
}

TEST(LimitConfigTest, RoundTripsThroughTheFormat) {
  LimitConfig c{};
  std::strcpy(c.workload, "job-42");
  c.quiet = true;
  c.gpu_count = 2;
  std::strcpy(c.gpus[0].uuid, kUuid);
  c.gpus[0].limit_bytes = uint64_t{4} << 30;
  c.gpus[0].context_bytes = uint64_t{512} << 20;
  std::strcpy(c.gpus[1].uuid, "MIG-11111111-2222-3333-4444-555555555555");
  c.gpus[1].limit_bytes = 1000;
  char buf[1024];
  size_t n = FormatLimitConfig(c, buf, sizeof(buf));
  ASSERT_GT(n, 0u);

  LimitConfig back;
  char err[256];
  ASSERT_TRUE(ParseLimitConfig(buf, n, &back, err, sizeof(err))) << err;
  EXPECT_STREQ(back.workload, "job-42");
  EXPECT_TRUE(back.quiet);
  ASSERT_EQ(back.gpu_count, 2);
  EXPECT_STREQ(back.gpus[0].uuid, kUuid);
  EXPECT_EQ(back.gpus[0].limit_bytes, uint64_t{4} << 30);
  EXPECT_EQ(back.gpus[0].context_bytes, uint64_t{512} << 20);
  EXPECT_EQ(back.gpus[0].uuid_bytes[0], 0x53);
  EXPECT_EQ(back.gpus[0].uuid_bytes[15], 0xf6);
  EXPECT_EQ(back.gpus[1].limit_bytes, 1000u);
  EXPECT_EQ(back.gpus[1].context_bytes, 0u);
  EXPECT_STREQ(back.budget_dir, "");  // Not given: the limiter makes its budgets in /dev/shm.

  std::strcpy(c.budget_dir, "/dev/shm/gpufrac-Xy_9.z");
  n = FormatLimitConfig(c, buf, sizeof(buf));
  ASSERT_GT(n, 0u);
  ASSERT_TRUE(ParseLimitConfig(buf, n, &back, err, sizeof(err))) << err;
  EXPECT_STREQ(back.budget_dir, "/dev/shm/gpufrac-Xy_9.z");
  EXPECT_STREQ(back.arbiter_dir, "");  // Not given: the arbiters are in the budget directory.

  std::strcpy(c.arbiter_dir, "/etc/gpufrac");
  n = FormatLimitConfig(c, buf, sizeof(buf));
  ASSERT_GT(n, 0u);
  ASSERT_TRUE(ParseLimitConfig(buf, n, &back, err, sizeof(err))) << err;
  EXPECT_STREQ(back.arbiter_dir, "/etc/gpufrac");
}

TEST(LimitConfigTest, ABudgetDirectoryIsAPlainAbsolutePath) {
  const std::string head =
      "gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 10\n";
  for (const char* bad : {"dev/shm/x", "/dev/shm/../etc", "/dev/shm/..", "/a/./b", "/a//b",
                          "/dev/shm/$HOME", "/dev/shm/a\x1b[2J"}) {
    for (const std::string directive : {"budgets", "arbiters"}) {
      EXPECT_NE(ParseError(head + directive + " " + bad + "\n")
                    .find("line 4: " + directive + " must be an absolute"),
                std::string::npos)
          << directive << " " << bad;
    }
  }
  EXPECT_NE(ParseError(head + "budgets /" + std::string(200, 'a') + "\n").find("budgets must"),
            std::string::npos);
  EXPECT_NE(ParseError(head + "budgets /dev/shm/a b\n").find("line 4: unknown or malformed"),
            std::string::npos);
}

TEST(LimitConfigTest, CommentsAndBlankLinesAreIgnored) {
  std::string text =
      "# written by a launcher\ngpufrac-limits 1\n\nworkload w  # trailing\n"
      "gpu " +
      std::string(kUuid) + " limit 10\n";
  LimitConfig c;
  char err[256];
  ASSERT_TRUE(ParseLimitConfig(text.data(), text.size(), &c, err, sizeof(err))) << err;
  EXPECT_EQ(c.gpus[0].limit_bytes, 10u);
}

TEST(LimitConfigTest, RefusesMalformedFilesNamingTheLine) {
  const std::string gpu = "gpu " + std::string(kUuid) + " limit 10\n";
  EXPECT_NE(ParseError("").find("empty"), std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 2\n").find("unsupported limit file version 2"),
            std::string::npos);
  EXPECT_NE(ParseError("workload w\n").find("line 1"), std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\n" + gpu).find("no 'workload'"), std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\n").find("no 'gpu'"), std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload a/b\n" + gpu).find("line 2"), std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\ngpu GPU-xyz limit 10\n")
                .find("line 3: 'GPU-xyz' is not a GPU or MIG UUID"),
            std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit -5\n")
                .find("line 3"),
            std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 0\n")
                .find("bytes > 0"),
            std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\n" + gpu + gpu).find("listed twice"),
            std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\nlimit 5\n" + gpu).find("unknown"),
            std::string::npos);
  EXPECT_NE(ParseError("gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) +
                       " limit 99999999999999999999\n")
                .find("line 3"),
            std::string::npos);
}

TEST(LimitConfigTest, LoadReportsMissingFileAndDirectory) {
  LimitConfig c;
  char err[512];
  EXPECT_FALSE(LoadLimitFile("/nonexistent/gpufrac/limits", &c, err, sizeof(err)));
  EXPECT_NE(std::string(err).find("cannot open limit file /nonexistent/gpufrac/limits"),
            std::string::npos);
  EXPECT_FALSE(LoadLimitFile("/tmp", &c, err, sizeof(err)));
  EXPECT_NE(std::string(err).find("not a regular file"), std::string::npos);
}

// A new file in /tmp holding `text`; its path.
std::string TempLimitFile(const std::string& text) {
  char path[] = "/tmp/gpufrac-limits-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

TEST(LimitConfigTest, LoadRefusesAFileTheWorkloadCouldRewrite) {
  const std::string file =
      TempLimitFile("gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 10\n");
  const char* path = file.c_str();
  LimitConfig c;
  char err[512];
  // Owner-writable by the user who reads it. Root may read anything, so as root the check is run
  // in a child that becomes an ordinary user owning the file.
  ASSERT_EQ(chmod(path, 0644), 0);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(path, 65534, 65534), 0);
    pid_t pid = fork();
    if (pid == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      bool loaded = LoadLimitFile(path, &c, err, sizeof(err));
      _exit(loaded ? 1 : (std::strstr(err, "writable by this workload") ? 0 : 2));
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: loaded a writable file, 2: wrong message";
  } else {
    EXPECT_FALSE(LoadLimitFile(path, &c, err, sizeof(err)));
    EXPECT_NE(std::string(err).find("writable by this workload"), std::string::npos);
  }
  unlink(path);
}

// What `body` returns, run in a forked child (which may change user or namespace freely).
std::string InChild(const std::function<std::string()>& body) {
  int pipe_fds[2];
  EXPECT_EQ(pipe(pipe_fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    const std::string out = body();
    (void)!write(pipe_fds[1], out.data(), out.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(pipe_fds[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

// Loads `text` from a read-only file owned by the loading user, as an ordinary user (in a child
// when the test runs as root), with `system_dir` as the system service's directory. Returns ""
// when it loads, else the error.
std::string LoadOwnFile(const std::string& text, const char* system_dir) {
  const std::string file = TempLimitFile(text);
  const char* path = file.c_str();
  chmod(path, 0444);
  const std::string out = InChild([&] {
    if (geteuid() == 0 &&
        (chown(path, 65534, 65534) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) {
      return std::string("setup");
    }
    LimitConfig c;
    char err[512] = "";
    if (LoadLimitFile(path, &c, err, sizeof(err), system_dir)) err[0] = '\0';
    return std::string(err);
  });
  unlink(path);
  return out;
}

TEST(LimitConfigTest, AFileOfTheWorkloadsOwnUserIsOnlyAdvisoryAndOnlyWithoutASystemService) {
  const std::string text =
      "gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 10\n";
  // Read-only, but the user owns it and could chmod it back: refused.
  EXPECT_NE(LoadOwnFile(text, "/nonexistent").find("belongs to this workload's user"),
            std::string::npos);
  // Marked as the user's own: accepted where no system service runs the GPUs ...
  EXPECT_EQ(LoadOwnFile("gpufrac-limits 1\nadvisory 1\nworkload w\ngpu " + std::string(kUuid) +
                            " limit 10\n",
                        "/nonexistent"),
            "");
  // ... and refused where one does (its directory, root's, exists): a job of the service cannot
  // point its limiter at a file of its own with a larger limit.
  if (geteuid() == 0) {
    char system_dir[] = "/tmp/gpufrac-run-XXXXXX";
    ASSERT_NE(mkdtemp(system_dir), nullptr);
    EXPECT_NE(LoadOwnFile("gpufrac-limits 1\nadvisory 1\nworkload w\ngpu " + std::string(kUuid) +
                              " limit 10\n",
                          system_dir)
                  .find("gpufrac's system service runs this machine's GPUs"),
              std::string::npos);
    rmdir(system_dir);
  }
}

TEST(LimitConfigTest, CarriesAComputeShareWithItsLimit) {
  const std::string uuid(kUuid);
  const std::string text = "gpufrac-limits 1\nworkload w\ngpu " + uuid +
                           " limit 10 context 5 compute 250 compute-limit 1000\ngpu "
                           "MIG-11111111-2222-3333-4444-555555555555 limit 7\n";
  LimitConfig c;
  char err[256] = "";
  ASSERT_TRUE(ParseLimitConfig(text.data(), text.size(), &c, err, sizeof(err))) << err;
  EXPECT_EQ(c.gpus[0].compute_milli, 250u);
  EXPECT_EQ(c.gpus[0].compute_limit_milli, 1000u);
  EXPECT_TRUE(c.gpus[0].arbitrated);
  EXPECT_FALSE(c.gpus[1].arbitrated);
  char buf[1024];
  size_t n = FormatLimitConfig(c, buf, sizeof(buf));
  ASSERT_GT(n, 0u);
  EXPECT_NE(std::string(buf, n).find(" compute 250 compute-limit 1000\n"), std::string::npos);
  LimitConfig back;
  ASSERT_TRUE(ParseLimitConfig(buf, n, &back, err, sizeof(err))) << err;
  EXPECT_EQ(back.gpus[0].compute_limit_milli, 1000u);

  const std::string head = "gpufrac-limits 1\nworkload w\ngpu " + uuid + " limit 10 ";
  for (const char* bad :
       {"compute 250", "compute 300 compute-limit 200", "compute 0 compute-limit 500",
        "compute 1001 compute-limit 1001", "compute-limit 500 compute 250", "context 1 context 2",
        "compute x compute-limit 5", "compute 0 compute-limit 0", "compute-limit 500"}) {
    EXPECT_NE(ParseError(head + bad + "\n").find("line 3"), std::string::npos) << bad;
  }
}

// Loads `path` as uid 65534 from inside a user namespace it made, in which it is root (as
// `unshare -Ur` does). Returns "" when it loads, else the error ("setup" when the namespace
// cannot be made).
std::string LoadAsNamespaceRoot(const std::string& path) {
  return InChild([&] {
    char err[512] = "setup";
    // Changing user made the process non-dumpable (its /proc files root's); undo that so it can
    // write its own uid_map, as a process started by that user could.
    if (setgid(65534) == 0 && setuid(65534) == 0 && prctl(PR_SET_DUMPABLE, 1) == 0 &&
        unshare(CLONE_NEWUSER) == 0) {
      int fd = open("/proc/self/uid_map", O_WRONLY);
      if (fd >= 0 && write(fd, "0 65534 1\n", 10) == 10 && geteuid() == 0) {
        LimitConfig c;
        if (LoadLimitFile(path.c_str(), &c, err, sizeof(err), "/nonexistent")) err[0] = '\0';
      }
    }
    return std::string(err);
  });
}

TEST(LimitConfigTest, RootOfAUserNamespaceIsStillTheUserItWas) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  const std::string text =
      "gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 10\n";
  // The user's own read-only file appears as root's inside the namespace; it is still the
  // user's, so it is refused as it would be outside.
  const std::string own = TempLimitFile(text);
  ASSERT_EQ(chown(own.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod(own.c_str(), 0444), 0);
  const std::string refused = LoadAsNamespaceRoot(own);
  if (refused == "setup") GTEST_SKIP() << "user namespaces are not available here";
  EXPECT_TRUE(refused.find("writable by this workload") != std::string::npos ||
              refused.find("belongs to this workload's user") != std::string::npos)
      << refused;
  // A launcher's file (the host root's, read-only for others) still loads there.
  const std::string launchers = TempLimitFile(text);
  ASSERT_EQ(chmod(launchers.c_str(), 0644), 0);
  EXPECT_EQ(LoadAsNamespaceRoot(launchers), "");
  unlink(own.c_str());
  unlink(launchers.c_str());
}

TEST(LimitConfigTest, RefusesAFileInProc) {
  // A non-dumpable process's /proc/PID/cmdline is root's and read-only, but says what the
  // process wants: never a limit file.
  LimitConfig c;
  char err[512];
  EXPECT_FALSE(LoadLimitFile("/proc/self/cmdline", &c, err, sizeof(err)));
  EXPECT_NE(std::string(err).find("is in /proc"), std::string::npos) << err;
}

TEST(LimitConfigTest, RefusesAFileWritableThroughASupplementaryGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  const std::string path =
      TempLimitFile("gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 10\n");
  // root:disk (gid 6), 0664: writable by the members of disk, of which the reader is one only
  // through its supplementary groups.
  ASSERT_EQ(chown(path.c_str(), 0, 6), 0);
  ASSERT_EQ(chmod(path.c_str(), 0664), 0);
  pid_t pid = fork();
  if (pid == 0) {
    gid_t groups[] = {6};
    if (setgroups(1, groups) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    LimitConfig c;
    char err[512];
    bool loaded = LoadLimitFile(path.c_str(), &c, err, sizeof(err), "/nonexistent");
    _exit(loaded ? 1 : (std::strstr(err, "writable by this workload") ? 0 : 2));
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  unlink(path.c_str());
}

TEST(LimitConfigTest, RootMayUseAnyReadableFile) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  const std::string path =
      TempLimitFile("gpufrac-limits 1\nworkload w\ngpu " + std::string(kUuid) + " limit 10\n");
  LimitConfig c;
  char err[512];
  EXPECT_TRUE(LoadLimitFile(path.c_str(), &c, err, sizeof(err))) << err;
  unlink(path.c_str());
}

TEST(LimitConfigTest, ParsesUuidsWithOrWithoutPrefix) {
  unsigned char a[16], b[16];
  ASSERT_TRUE(ParseUuid(kUuid, a));
  ASSERT_TRUE(ParseUuid("5349d0a2-1b3c-4d5e-8f90-a1b2c3d4e5f6", b));
  EXPECT_EQ(std::memcmp(a, b, 16), 0);
  EXPECT_FALSE(ParseUuid("GPU-5349d0a2", a));
  EXPECT_FALSE(ParseUuid("GPU-5349d0a2-1b3c-4d5e-8f90-a1b2c3d4e5f6ff", a));
}

}  // namespace
}  // namespace gpufrac::limiter
