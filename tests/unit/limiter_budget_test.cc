// The shared budget: exact limit under concurrency, nothing left behind by processes killed at any
// instruction, PID reuse not mistaken for life, and a limit that cannot be raised after creation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "limiter/budget.h"

namespace gpufrac::limiter {
namespace {

class BudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/gpufrac-test." + std::to_string(getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    Budget::Unlink(name_.c_str());
    ASSERT_TRUE(proc::ReadProcessId(getpid(), &self_));
  }
  void TearDown() override { Budget::Unlink(name_.c_str()); }

  void Open(Budget& b, uint64_t limit) {
    char err[256];
    ASSERT_TRUE(b.Open(name_.c_str(), limit, 0, err, sizeof(err))) << err;
  }

  // In a forked child: maps the budget as another member process would and takes a lane.
  int JoinAsChild(Budget* cb, ProcessId* me) {
    char err[256];
    if (!cb->Attach(name_.c_str(), err, sizeof(err)) || !proc::ReadProcessId(getpid(), me))
      _exit(1);
    cb->JoinMember(*me);
    int lane = cb->AcquireLane(*me);
    if (lane < 0) _exit(2);
    return lane;
  }

  // Forks a member process that reserves `bytes` and then waits (pause(), or exec'ing sleep when
  // `then_exec`). Returns its pid once the reservation is made; the caller kills it.
  pid_t StartHolder(uint64_t bytes, bool then_exec = false) {
    int ready[2];
    if (pipe(ready) != 0) return -1;
    pid_t child = fork();
    if (child == 0) {
      Budget c;
      ProcessId me;
      int lane = JoinAsChild(&c, &me);
      if (!c.Reserve(lane, me, bytes)) _exit(2);
      char x = 1;
      if (write(ready[1], &x, 1) != 1) _exit(3);
      if (then_exec) execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      pause();
      _exit(0);
    }
    close(ready[1]);  // so that a child that dies early reads as end-of-file, not a hang
    char x;
    bool ok = read(ready[0], &x, 1) == 1;
    close(ready[0]);
    return ok ? child : -1;
  }

  // Forks a member process that runs `before(budget, lane, me)` and then, once traced and
  // resumed, `work(budget, lane, me)`; single-steps it `steps` instructions into `work` or until
  // `work` returns, then kills it. Returns 1 if `work` returned, 0 if the process was killed
  // before, -1 if ptrace is not permitted here.
  template <typename Before, typename Work>
  int KillAfterSteps(int steps, Before before, Work work) {
    int done[2];
    if (pipe2(done, O_NONBLOCK) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      Budget cb;
      ProcessId me;
      int lane = JoinAsChild(&cb, &me);
      before(cb, lane, me);
      char x = 1;
      if (write(done[1], &x, 0) != 0) _exit(4);  // binds write() now, not while being stepped
      if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(3);
      raise(SIGSTOP);
      work(cb, lane, me);
      if (write(done[1], &x, 1) != 1) _exit(4);
      pause();
    }
    int status = 0, finished = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) finished = -1;
    EXPECT_TRUE(finished == -1 || WIFSTOPPED(status)) << "child failed to set up: " << status;
    for (int i = 0; i < steps && finished == 0 && WIFSTOPPED(status); ++i) {
      if (ptrace(PTRACE_SINGLESTEP, pid, nullptr, nullptr) != 0 ||
          waitpid(pid, &status, 0) != pid) {
        ADD_FAILURE() << "cannot step the child";
        break;
      }
      char x;
      if (read(done[0], &x, 1) == 1) finished = 1;
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(done[0]);
    close(done[1]);
    return finished;
  }

  std::string name_;
  ProcessId self_;
};

TEST_F(BudgetTest, ReservesExactlyUpToTheLimit) {
  Budget b;
  Open(b, 1000);
  ASSERT_GE(b.JoinMember(self_), 0);
  int lane = b.AcquireLane(self_);
  ASSERT_GE(lane, 0);
  EXPECT_TRUE(b.Reserve(lane, self_, 600));
  EXPECT_TRUE(b.Reserve(lane, self_, 400));
  EXPECT_EQ(b.used(), 1000u);
  EXPECT_FALSE(b.Reserve(lane, self_, 1));
  EXPECT_EQ(b.used(), 1000u);  // a refused reservation leaves nothing behind
  b.Release(lane, 400);
  EXPECT_TRUE(b.Reserve(lane, self_, 400));
  b.Release(lane, 1000);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.HeldBy(self_), 0);
}

TEST_F(BudgetTest, AnExistingBudgetKeepsItsLimit) {
  Budget first, second;
  Open(first, 1000);
  char err[256];
  ASSERT_TRUE(second.Open(name_.c_str(), 1u << 30, 0, err, sizeof(err))) << err;
  EXPECT_EQ(second.limit(), 1000u);
}

TEST_F(BudgetTest, ThreadsNeverHoldMoreThanTheLimitTogether) {
  Budget b;
  Open(b, 10000);
  ASSERT_GE(b.JoinMember(self_), 0);
  // Each thread holds up to 8 reservations of up to 3000 bytes: together they ask for far more
  // than the limit, so it is hit constantly.
  std::atomic<int64_t> held{0}, max_held{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      int lane = b.AcquireLane(self_);
      ASSERT_GE(lane, 0);
      std::mt19937 rng(t);
      std::vector<uint64_t> mine;
      for (int i = 0; i < 20000; ++i) {
        if (mine.size() < 8 && rng() % 2 == 0) {
          uint64_t n = 1 + rng() % 3000;
          if (!b.Reserve(lane, self_, n)) {
            refused++;
            continue;
          }
          mine.push_back(n);
          int64_t now = held.fetch_add(n) + n;
          int64_t m = max_held.load();
          while (now > m && !max_held.compare_exchange_weak(m, now)) {
          }
        } else if (!mine.empty()) {
          held.fetch_sub(mine.back());
          b.Release(lane, mine.back());
          mine.pop_back();
        }
      }
      for (uint64_t n : mine) {
        held.fetch_sub(n);
        b.Release(lane, n);
      }
      b.IdleLane(lane, self_);  // as the limiter does when a thread exits
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(max_held.load(), 10000);
  EXPECT_GT(max_held.load(), 7000);  // the limit was approached...
  EXPECT_GT(refused.load(), 0);      // ...and enforced
  EXPECT_EQ(b.used(), 0u);
}

TEST_F(BudgetTest, ReclaimsWhatAKilledProcessHeld) {
  Budget b;
  Open(b, 1000);
  pid_t child = StartHolder(700);
  ASSERT_GT(child, 0);
  EXPECT_EQ(b.used(), 700u);
  EXPECT_FALSE(b.MemberDied());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // The kernel marked the dead member's mutex: noticed without a system call.
  EXPECT_TRUE(b.MemberDied());
  ASSERT_GE(b.JoinMember(self_), 0);
  int lane = b.AcquireLane(self_);
  ASSERT_GE(lane, 0);
  EXPECT_TRUE(b.Reserve(lane, self_, 1000));
  EXPECT_FALSE(b.MemberDied());
  b.Release(lane, 1000);
  EXPECT_EQ(b.used(), 0u);
}

// Processes killed at arbitrary instructions of the protocol (mid-reservation, mid-commit,
// mid-release) must leave the budget exact once they are reclaimed.
TEST_F(BudgetTest, KillsAtAnyInstructionLeaveNoCharge) {
  Budget b;
  Open(b, 1 << 20);
  std::mt19937 rng(42);
  for (int round = 0; round < 30; ++round) {
    std::vector<pid_t> children;
    for (int c = 0; c < 4; ++c) {
      pid_t pid = fork();
      if (pid == 0) {
        Budget cb;
        ProcessId me;
        int lanes[2] = {JoinAsChild(&cb, &me), -1};
        std::thread second([&] {
          lanes[1] = cb.AcquireLane(me);
          for (uint64_t i = 0;; ++i) {
            if (cb.Reserve(lanes[1], me, 64 + i % 512)) cb.Release(lanes[1], 64 + i % 512);
          }
        });
        for (uint64_t i = 0;; ++i) {
          if (cb.Reserve(lanes[0], me, 100 + i % 1000)) cb.Release(lanes[0], 100 + i % 1000);
          if (i % 7 == 0) cb.Reserve(lanes[0], me, 3);  // keeps a little, so there is a charge
        }
      }
      children.push_back(pid);
    }
    usleep(2000 + rng() % 20000);
    for (pid_t pid : children) kill(pid, SIGKILL);
    for (pid_t pid : children) waitpid(pid, nullptr, 0);
    b.Reclaim(self_);
    ASSERT_EQ(b.used(), 0u) << "round " << round;
  }
}

// The same, made exhaustive: a process is single-stepped through a reservation and a release and
// killed after 0, 1, 2, ... instructions, until it gets to the end. Every kill point must leave
// the budget exact after reclaiming.
TEST_F(BudgetTest, AKillAtEveryInstructionLeavesNoCharge) {
  Budget b;
  Open(b, 1 << 20);
  for (int steps = 0, finished = 0; finished == 0; ++steps) {
    finished = KillAfterSteps(
        steps,
        [](Budget& cb, int lane, const ProcessId& me) {
          if (!cb.Reserve(lane, me, 100)) _exit(2);
        },
        [](Budget& cb, int lane, const ProcessId& me) {
          cb.Reserve(lane, me, 5000);
          cb.Release(lane, 3000);
        });
    if (finished < 0) GTEST_SKIP() << "ptrace is not permitted";
    b.Reclaim(self_);
    ASSERT_EQ(b.used(), 0u) << "killed after " << steps << " instructions";
    ASSERT_LT(steps, 100000) << "the child never finished";
    if (finished) RecordProperty("instructions", steps);
  }
}

TEST_F(BudgetTest, PidReuseIsNotMistakenForLife) {
  Budget b;
  Open(b, 1000);
  // A lane whose owner has a live PID (ours) but another start time: the process that charged it
  // is gone and its PID was reused.
  ProcessId ghost{getpid(), self_.start_ticks + 12345};
  int lane = b.AcquireLane(ghost);
  ASSERT_GE(lane, 0);
  ASSERT_TRUE(b.Reserve(lane, ghost, 800));
  EXPECT_EQ(b.Reclaim(self_), 800u);
  EXPECT_EQ(b.used(), 0u);
}

// A dead process's lanes can hold negative amounts (freed on another thread than allocated on).
// Releasing its positive lane first would let `global` dip below what the living hold, and a
// reservation in that moment would pass the limit. Live: 600 of 1000; the ghost: +400 and -100.
TEST_F(BudgetTest, ReclaimingNeverLetsTheLivingPassTheLimit) {
  Budget b;
  Open(b, 1000);
  int mine = b.AcquireLane(self_);
  ASSERT_TRUE(b.Reserve(mine, self_, 600));
  std::atomic<bool> stop{false};
  std::atomic<int> granted{0};
  std::thread greedy([&] {
    int lane = b.AcquireLane(self_);
    while (!stop.load()) {
      if (b.TryReserve(lane, 480)) {
        granted++;
        b.Release(lane, 480);
      }
    }
  });
  ProcessId ghost{getpid(), self_.start_ticks + 777};
  int refused = 0;
  for (int i = 0; i < 20000 && refused == 0; ++i) {
    int up = b.AcquireLane(ghost), down = b.AcquireLane(ghost);
    // Refused only if the greedy thread got in (then it holds more than the limit allows).
    if (up < 0 || down < 0 || !b.TryReserve(up, 300)) {
      ++refused;
      break;
    }
    b.Release(down, 100);  // net 200 held by the ghost: 800 in all
    b.Reclaim(self_);
  }
  stop = true;
  greedy.join();
  EXPECT_EQ(granted.load(), 0);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(b.used(), 600u);
}

// Running out of file descriptors must not make other processes look dead.
TEST_F(BudgetTest, AReclaimerThatCannotReadProcKeepsOthersCharges) {
  Budget b;
  Open(b, 1000);
  pid_t child = StartHolder(700);
  ASSERT_GT(child, 0);
  std::vector<int> fds;
  for (int fd; (fd = dup(0)) >= 0;) fds.push_back(fd);
  uint64_t released = b.Reclaim(self_);
  for (int fd : fds) close(fd);
  EXPECT_EQ(released, 0u);
  EXPECT_EQ(b.used(), 700u);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(b.Reclaim(self_), 700u);
}

// A process whose main thread has exited shows as a zombie in /proc while its other threads run:
// it is alive, and what it holds must stay charged.
TEST_F(BudgetTest, AProcessWhoseMainThreadExitedIsAlive) {
  Budget b;
  Open(b, 1000);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    std::thread([&] {
      Budget c;
      ProcessId me;
      int lane = JoinAsChild(&c, &me);
      if (!c.Reserve(lane, me, 600)) _exit(2);
      char x = 1;
      if (write(ready[1], &x, 1) != 1) _exit(3);
      for (;;) pause();
    }).detach();
    syscall(SYS_exit, 0);  // ends this thread only, without unwinding through the test framework
  }
  close(ready[1]);
  char x;
  ASSERT_EQ(read(ready[0], &x, 1), 1);
  usleep(50000);  // let the main thread finish exiting
  EXPECT_EQ(b.Reclaim(self_), 0u);
  EXPECT_EQ(b.used(), 600u);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(b.Reclaim(self_), 600u);
  close(ready[0]);
}

// A member that replaces itself with exec is alive, though the kernel released its mutex: it must
// not be reclaimed, nor make every reservation read /proc from then on.
TEST_F(BudgetTest, AMemberThatExecsDoesNotKeepReclaimsRunning) {
  Budget b;
  Open(b, 1000);
  pid_t child = StartHolder(300, /*then_exec=*/true);
  ASSERT_GT(child, 0);
  for (int i = 0; i < 200 && !b.MemberDied(); ++i) usleep(5000);  // wait for the exec
  EXPECT_TRUE(b.MemberDied());
  EXPECT_EQ(b.Reclaim(self_), 0u);  // alive: nothing taken
  EXPECT_FALSE(b.MemberDied());     // and not looked at again for a while
  EXPECT_EQ(b.used(), 300u);
  usleep(150000);
  EXPECT_TRUE(b.MemberDied());  // then looked at again, in case it has died since
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(b.Reclaim(self_), 300u);
}

TEST_F(BudgetTest, AThreadsLaneOutlivesTheThread) {
  Budget b;
  Open(b, 1000);
  int lane = b.AcquireLane(self_);
  ASSERT_TRUE(b.Reserve(lane, self_, 300));
  b.IdleLane(lane, self_);
  // Our own idle lane is reused, with what it holds, and is not reclaimed while we live.
  EXPECT_EQ(b.AcquireLane(self_), lane);
  EXPECT_EQ(b.Reclaim(self_), 0u);
  EXPECT_EQ(b.HeldBy(self_), 300);
}

// A thread keeps what it frees, still charged, for its next allocation; the cap and the thread's
// exit give the rest back.
TEST_F(BudgetTest, AThreadKeepsWhatItFreesForItsNextAllocation) {
  Budget b;
  Open(b, 1ull << 30);
  int lane = b.AcquireLane(self_);
  ASSERT_GE(lane, 0);
  ASSERT_TRUE(b.Reserve(lane, self_, 4096));
  b.Release(lane, 4096);
  EXPECT_EQ(b.SpareOf(lane), 4096u);
  EXPECT_EQ(b.used(), 4096u);  // still charged: the ceiling holds whatever the others do
  EXPECT_EQ(b.HeldBy(self_), 0);
  ASSERT_TRUE(b.Reserve(lane, self_, 1000));
  EXPECT_EQ(b.SpareOf(lane), 3096u);
  EXPECT_EQ(b.used(), 4096u);
  // Past the cap a release goes back to the budget; the spare bytes count toward a larger request.
  ASSERT_TRUE(b.Reserve(lane, self_, 3 * kSpareMax));
  EXPECT_EQ(b.SpareOf(lane), 0u);
  EXPECT_EQ(b.used(), 3 * kSpareMax + 1000);
  b.Release(lane, 3 * kSpareMax);
  EXPECT_EQ(b.used(), 1000u);
  b.Release(lane, 1000);
  EXPECT_EQ(b.SpareOf(lane), 1000u);
  b.IdleLane(lane, self_);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(b.SpareOf(lane), 0u);
}

// What another process keeps spare is taken back rather than refusing a reservation that fits.
TEST_F(BudgetTest, SpareBytesNeverCauseAnOutOfMemoryError) {
  Budget b;
  const uint64_t limit = 64ull << 20;  // spare bytes up to 1 MiB a lane
  Open(b, limit);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    Budget c;
    ProcessId me;
    int lane = JoinAsChild(&c, &me);
    if (!c.Reserve(lane, me, 1 << 20)) _exit(2);
    c.Release(lane, 1 << 20);
    if (write(ready[1], &lane, sizeof(lane)) != sizeof(lane)) _exit(3);
    pause();
    _exit(0);
  }
  close(ready[1]);
  int child_lane = -1;
  ASSERT_EQ(read(ready[0], &child_lane, sizeof(child_lane)), static_cast<ssize_t>(sizeof(int)));
  close(ready[0]);
  EXPECT_EQ(b.SpareOf(child_lane), 1u << 20);
  ASSERT_GE(b.JoinMember(self_), 0);
  int lane = b.AcquireLane(self_);
  EXPECT_TRUE(b.Reserve(lane, self_, limit));
  EXPECT_EQ(b.SpareOf(child_lane), 0u);
  EXPECT_EQ(b.used(), limit);
  EXPECT_FALSE(b.Reserve(lane, self_, 1));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(b.Reclaim(self_), 0u);  // the child held nothing any more
  b.Release(lane, limit);
  EXPECT_EQ(b.used(), 0u);
}

// A process single-stepped through taking another lane's spare bytes back, killed after 0, 1, 2,
// ... instructions: the lane it took from must stay usable and the budget exact, whether the
// lane's owner or a reclaimer is the first to find the dead holder.
TEST_F(BudgetTest, AKillAtEveryInstructionOfATakeBackLeavesNoCharge) {
  Budget b;
  const uint64_t limit = 64ull << 20, spare = 512 << 10;
  Open(b, limit);
  ASSERT_GE(b.JoinMember(self_), 0);
  int keeper = b.AcquireLane(self_), filler = b.AcquireLane(self_);
  ASSERT_GE(filler, 0);
  for (int steps = 0, finished = 0; finished == 0; ++steps) {
    // The budget is full: `keeper` has `spare` bytes spare and `filler` holds the rest.
    ASSERT_TRUE(b.Reserve(keeper, self_, spare));
    b.Release(keeper, spare);
    ASSERT_TRUE(b.Reserve(filler, self_, limit - spare));
    ASSERT_EQ(b.SpareOf(keeper), spare);
    finished = KillAfterSteps(
        steps, [](Budget&, int, const ProcessId&) {},
        [spare](Budget& cb, int lane, const ProcessId& me) {
          if (!cb.Reserve(lane, me, spare / 2)) _exit(5);
        });
    if (finished < 0) GTEST_SKIP() << "ptrace is not permitted";
    if (steps % 2 == 1) {
      // The keeper's own thread finds the dead holder first.
      ASSERT_TRUE(b.TryReserve(keeper, 1)) << "killed after " << steps << " instructions";
      b.Release(keeper, 1);
    }
    b.Reclaim(self_);
    ASSERT_EQ(b.used(), limit - spare + b.SpareOf(keeper))
        << "killed after " << steps << " instructions";
    b.Release(filler, limit - spare);
    b.ReleaseSpare(keeper);
    ASSERT_EQ(b.used(), 0u) << "killed after " << steps << " instructions";
    ASSERT_LT(steps, 100000) << "the child never finished";
    if (finished) RecordProperty("instructions", steps);
  }
}

// A reclaimer killed while it held a living lane's spare word (finishing a dead thread's take-back)
// leaves the word naming "a reclaimer". The lane's owner must not wait on it for ever, and the
// next reclaim must give the word back. The state is written into the segment directly, as the
// dead reclaimer would have left it (encoding as in budget.cc); only ptrace could stop a real
// reclaimer there.
TEST_F(BudgetTest, AReclaimerKilledHoldingALivingLanesSpareWordBlocksNobody) {
  Budget b;
  const uint64_t limit = 64ull << 20, spare = 512 << 10;
  Open(b, limit);
  ASSERT_GE(b.JoinMember(self_), 0);
  int keeper = b.AcquireLane(self_), other = b.AcquireLane(self_);
  ASSERT_GE(other, 0);
  for (int finder = 0; finder < 2; ++finder) {
    ASSERT_TRUE(b.Reserve(keeper, self_, spare));
    b.Release(keeper, spare);
    ASSERT_EQ(b.SpareOf(keeper), spare);
    pid_t child = fork();
    if (child == 0) {
      int fd = open(("/dev/shm" + name_).c_str(), O_RDWR);
      void* p = mmap(nullptr, sizeof(BudgetSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (fd < 0 || p == MAP_FAILED) _exit(1);
      auto* seg = static_cast<BudgetSegment*>(p);
      if (pthread_mutex_lock(&seg->reclaim_lock) != 0) _exit(2);
      BudgetLane& lane = seg->lanes[keeper];
      uint64_t seq = (lane.committed.load() >> 40) & 0x1fff;
      lane.spare.store(spare | uint64_t{2047} << 40 | seq << 51);
      raise(SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child failed to set up: " << status;
    alarm(20);  // a wait that never ends fails the test instead of hanging it
    if (finder == 0) {
      // The owner finds it: the reclaim lock is free, so the reclaimer that held it is gone.
      ASSERT_TRUE(b.TryReserve(keeper, 1));
      EXPECT_EQ(b.SpareOf(keeper), spare - 1);
      b.Release(keeper, 1);
    } else {
      // A reclaim finds it, and another thread can then take the spare bytes back.
      b.Reclaim(self_);
      ASSERT_TRUE(b.Reserve(other, self_, limit));
      EXPECT_EQ(b.SpareOf(keeper), 0u);
      b.Release(other, limit);
      b.ReleaseSpare(other);
    }
    alarm(0);
    b.ReleaseSpare(keeper);
    EXPECT_EQ(b.used(), 0u) << "found by " << (finder == 0 ? "the owner" : "a reclaim");
  }
}

}  // namespace
}  // namespace gpufrac::limiter
