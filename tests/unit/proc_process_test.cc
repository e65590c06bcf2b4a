// Tests of the one /proc reader: process identity across PID reuse, awkward command names,
// zombies, and the live members of a process group.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "proc/process_group.h"
#include "proc/process_identity.h"

namespace gpufrac::proc {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Field `index` of /proc/PID/stat, read independently of the code under test.
std::string StatField(pid_t pid, int index) {
  std::string text = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = text.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream rest(text.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= index && rest >> field; ++i) {
  }
  return field;
}

TEST(ProcessIdentityTest, AProcessIsKnownByItsPidAndStartTime) {
  ProcessId self;
  ASSERT_TRUE(ReadProcessId(getpid(), &self));
  EXPECT_EQ(self.pid, getpid());
  EXPECT_EQ(std::to_string(self.start_ticks), StatField(getpid(), 22));
  EXPECT_EQ(CurrentProcess(), self);
  EXPECT_TRUE(IsRunning(self));
  EXPECT_TRUE(MayBeAlive(self));
  // Same PID, another start time: the PID was reused by someone else.
  ProcessId reused{getpid(), self.start_ticks + 1};
  EXPECT_FALSE(IsRunning(reused));
  EXPECT_FALSE(MayBeAlive(reused));
  EXPECT_FALSE(IsRunning(ProcessId{}));
  ProcessId none;
  EXPECT_FALSE(ReadProcessId(0, &none));
  EXPECT_FALSE(ReadProcessId(-1, &none));
  // PIDs are below pid_max: this one cannot exist, and the kernel says so.
  pid_t impossible = static_cast<pid_t>(std::atoi(ReadFile("/proc/sys/kernel/pid_max").c_str()));
  EXPECT_FALSE(ReadProcessId(impossible, &none));
  EXPECT_FALSE(MayBeAlive(ProcessId{impossible, 1}));
}

TEST(ProcessIdentityTest, NamesWithSpacesAndParenthesesAndZombies) {
  int go[2], renamed[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(renamed), 0);
  pid_t child = fork();
  if (child == 0) {
    close(go[1]);
    close(renamed[0]);
    char c;
    (void)!read(go[0], &c, 1);
    prctl(PR_SET_NAME, "a) Z 1 2 (3 4)");
    (void)!write(renamed[1], "r", 1);
    (void)!read(go[0], &c, 1);  // Until the test closes the pipe.
    _exit(0);
  }
  close(go[0]);
  close(renamed[1]);
  ProcessId before;
  ASSERT_TRUE(ReadProcessId(child, &before));
  ASSERT_EQ(write(go[1], "g", 1), 1);
  char c;
  ASSERT_EQ(read(renamed[0], &c, 1), 1);
  ASSERT_EQ(ReadFile("/proc/" + std::to_string(child) + "/comm"), "a) Z 1 2 (3 4)\n");
  ProcessId after;
  ASSERT_TRUE(ReadProcessId(child, &after));
  EXPECT_EQ(after, before);
  EXPECT_TRUE(IsRunning(before));
  ProcessStat stat;
  ASSERT_EQ(ReadProcessStat(child, &stat), StatRead::kRead);
  EXPECT_EQ(stat.group, getpgrp());
  EXPECT_EQ(stat.threads, 1u);

  // Once it has exited, a zombie (not yet reaped) has ended, for the strict and the
  // conservative check alike.
  close(go[1]);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(StatField(child, 3), "Z");
  EXPECT_FALSE(IsRunning(before));
  EXPECT_FALSE(MayBeAlive(before));
  EXPECT_FALSE(ReadProcessId(child, &after));
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(MayBeAlive(before));
  close(renamed[0]);
}

TEST(ProcessIdentityTest, ALeaderWhoseOtherThreadsRunIsAliveUntilTheyEnd) {
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    close(done[1]);
    static int fds[2];
    fds[0] = ready[1];
    fds[1] = done[0];
    pthread_t worker;
    pthread_create(
        &worker, nullptr,
        [](void*) -> void* {
          char c;
          (void)!write(fds[0], "r", 1);
          (void)!read(fds[1], &c, 1);  // Until the test closes the pipe.
          _exit(0);
        },
        nullptr);
    // The main thread ends (the raw exit system call ends the calling thread only, with no
    // unwinding); the process lives on in its worker.
    syscall(SYS_exit, 0);
  }
  close(ready[1]);
  close(done[0]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ProcessId leader{child, 0};
  ProcessStat stat;
  // Once the main thread has exited, /proc shows the leader as a zombie with two threads.
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(ReadProcessStat(child, &stat), StatRead::kRead);
    if (stat.state == 'Z') break;
    usleep(1000);
  }
  ASSERT_EQ(stat.state, 'Z');
  EXPECT_GE(stat.threads, 2u);
  EXPECT_FALSE(stat.Ended());
  ASSERT_TRUE(ReadProcessId(child, &leader));
  EXPECT_TRUE(IsRunning(leader));
  EXPECT_TRUE(MayBeAlive(leader));
  close(done[1]);  // The worker ends the process.
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(IsRunning(leader));
  close(ready[0]);
}

TEST(ProcessGroupTest, FindsTheLiveMembersOfAGroupOnly) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t leader = fork();
  if (leader == 0) {
    setpgid(0, 0);
    if (fork() == 0) {  // A second member, which outlives nothing but waits to be killed.
      pause();
      _exit(0);
    }
    (void)!write(ready[1], "r", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  std::vector<pid_t> members = LiveGroupMembers(leader);
  EXPECT_EQ(members.size(), 2u);
  EXPECT_NE(std::find(members.begin(), members.end(), leader), members.end());
  EXPECT_EQ(std::find(members.begin(), members.end(), getpid()), members.end());
  // Members that started before `started_at_or_after` belong to an older group of that number.
  ProcessId leader_id;
  ASSERT_TRUE(ReadProcessId(leader, &leader_id));
  EXPECT_EQ(LiveGroupMembers(leader, leader_id.start_ticks).size(), 2u);
  EXPECT_TRUE(LiveGroupMembers(leader, leader_id.start_ticks + 1000000).empty());
  EXPECT_TRUE(LiveGroupMembers(0).empty());

  ASSERT_EQ(kill(-leader, SIGKILL), 0);
  ASSERT_EQ(waitpid(leader, nullptr, 0), leader);
  for (int i = 0; i < 2000 && !LiveGroupMembers(leader).empty(); ++i) usleep(1000);
  EXPECT_TRUE(LiveGroupMembers(leader).empty());
}

}  // namespace
}  // namespace gpufrac::proc
