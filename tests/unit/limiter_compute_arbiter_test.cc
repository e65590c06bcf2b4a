// The compute arbiter's slots: one per workload on a GPU, at most kArbiterSlots at once, and those
// of workloads that ended are given to new ones, so that a node running thousands of jobs on a
// GPU keeps arbitrating all of them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "limiter/budget.h"
#include "limiter/compute_arbiter.h"

namespace gpufrac::limiter {
namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

class ComputeArbiterSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpufrac-arbiter-XXXXXX";
    dir_ = mkdtemp(tmpl);
    dir_fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char err[256];
    ASSERT_TRUE(ComputeArbiter::CreateAt(dir_fd_, "compute.gpu", kDefaultTurnNs, err, sizeof(err)))
        << err;
    // Made again: the launcher's own segment is kept, not replaced.
    ASSERT_TRUE(ComputeArbiter::CreateAt(dir_fd_, "compute.gpu", kDefaultTurnNs, err, sizeof(err)))
        << err;
  }
  void TearDown() override {
    close(dir_fd_);
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<ComputeArbiter> Join(const std::string& workload, std::string* error) {
    auto arbiter = std::make_unique<ComputeArbiter>();
    char err[256] = "";
    if (!arbiter->Attach(dir_.c_str(), "compute.gpu", workload.c_str(), 10, 1000, err,
                         sizeof(err))) {
      *error = err;
      return nullptr;
    }
    return arbiter;
  }

  // A hand-over after published work: a holder takes a turn (a whole one: it is alone) and
  // publishes that its work ends `work_ns` later, then a waiter waits for a turn on a thread of
  // its own, and gets one at `got_at`.
  struct HandOver {
    std::unique_ptr<ComputeArbiter> holder, waiter;
    uint64_t start = 0, work_end = 0, got_at = 0;
  };
  void HandOverAfterWork(uint64_t work_ns, HandOver* h) {
    std::string error;
    h->holder = Join("holder", &error);
    ASSERT_NE(h->holder, nullptr) << error;
    h->waiter = Join("waiter", &error);
    ASSERT_NE(h->waiter, nullptr) << error;
    h->start = NowNs();
    ASSERT_TRUE(h->holder->Acquire());
    ASSERT_TRUE(h->holder->Holding());
    ASSERT_EQ(h->holder->TurnNs(), kDefaultTurnNs);
    h->work_end = h->start + work_ns;
    h->holder->Queued(h->work_end);
    std::thread wait([h] {
      if (h->waiter->Acquire()) h->got_at = NowNs();
    });
    wait.join();
    ASSERT_NE(h->got_at, 0u) << "the waiter got no turn";
  }

  std::string dir_;
  int dir_fd_ = -1;
};

TEST_F(ComputeArbiterSlotsTest, SlotsOfWorkloadsNotHeardFromAreGivenToNewOnes) {
  std::vector<std::unique_ptr<ComputeArbiter>> members;
  std::string error;
  for (int i = 0; i < kArbiterSlots; ++i) {
    members.push_back(Join("w" + std::to_string(i), &error));
    ASSERT_NE(members.back(), nullptr) << error;
  }
  // A process of a workload already there shares its slot.
  EXPECT_NE(Join("w7", &error), nullptr) << error;
  // All slots are in use by workloads heard from just now.
  EXPECT_EQ(Join("late", &error), nullptr);
  EXPECT_NE(error.find("has no free slot"), std::string::npos) << error;

  // Workload w3 has not held or waited for a turn for longer than kStaleNs: it ended.
  int fd = openat(dir_fd_, "compute.gpu", O_RDWR);
  ASSERT_GE(fd, 0);
  void* map = mmap(nullptr, sizeof(ArbiterSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(map, MAP_FAILED);
  auto* seg = static_cast<ArbiterSegment*>(map);
  seg->slots[3].busy_at_ns.store(NowNs() - kStaleNs - 1'000'000'000);
  auto late = Join("late", &error);
  ASSERT_NE(late, nullptr) << error;
  EXPECT_EQ(late->UsedNs(), 0u);
  uint64_t ns = 1;
  EXPECT_TRUE(ComputeArbiter::PeekUsedNs(dir_fd_, "compute.gpu", "late", &ns));
  EXPECT_EQ(ns, 0u);
  // w3's slot is late's now: w3 is no longer in the segment.
  EXPECT_FALSE(ComputeArbiter::PeekUsedNs(dir_fd_, "compute.gpu", "w3", &ns));
  munmap(map, sizeof(ArbiterSegment));
}

TEST_F(ComputeArbiterSlotsTest, OnlyASegmentOfTheLaunchersOwnIsKept) {
  // Something else under the name (a directory here) is not adopted.
  char err[256] = "";
  ASSERT_EQ(mkdirat(dir_fd_, "compute.other", 0700), 0);
  EXPECT_FALSE(
      ComputeArbiter::CreateAt(dir_fd_, "compute.other", kDefaultTurnNs, err, sizeof(err)));
  EXPECT_NE(std::string(err).find("is not a compute arbiter and cannot be replaced"),
            std::string::npos)
      << err;
  ComputeArbiter arbiter;
  EXPECT_FALSE(arbiter.Attach(dir_.c_str(), "compute.other", "w", 10, 1000, err, sizeof(err)));
  EXPECT_NE(std::string(err).find("no compute arbiter at"), std::string::npos) << err;
}

// The service reads charges as root from a segment every workload can write: something else at
// the name (a FIFO that would block a reader, a link to another file) is not read.
TEST_F(ComputeArbiterSlotsTest, ChargesAreReadOnlyFromASegment) {
  std::string error;
  auto member = Join("w", &error);
  ASSERT_NE(member, nullptr) << error;
  uint64_t ns = 1;
  EXPECT_TRUE(ComputeArbiter::PeekUsedNs(dir_fd_, "compute.gpu", "w", &ns));
  EXPECT_EQ(ns, 0u);
  ASSERT_EQ(mkfifoat(dir_fd_, "compute.fifo", 0666), 0);
  ASSERT_EQ(symlinkat((dir_ + "/compute.gpu").c_str(), dir_fd_, "compute.link"), 0);
  for (const char* name : {"compute.fifo", "compute.link"}) {
    SCOPED_TRACE(name);
    const uint64_t start = NowNs();
    EXPECT_FALSE(ComputeArbiter::PeekUsedNs(dir_fd_, name, "w", &ns));
    EXPECT_LT(NowNs() - start, 1'000'000'000u);  // it did not wait for a writer
  }
}

// A turn passes as the holder's published work runs out, with nothing from the holder's own
// thread (which a busy CPU may not run for milliseconds): the waiter takes it then, not at the
// end of the holder's turn (20 ms) nor 250 ms past it; the holder is charged up to the end of its
// work, and the waiter's turn starts there.
TEST_F(ComputeArbiterSlotsTest, ATurnPassesAsTheHoldersPublishedWorkRunsOut) {
  HandOver h;
  ASSERT_NO_FATAL_FAILURE(HandOverAfterWork(60'000'000, &h));
  const auto& [holder, waiter, start, work_end, got_at] = h;
  EXPECT_TRUE(waiter->Holding());
  EXPECT_FALSE(holder->Holding());
  std::printf("taken %.1f ms after the holder's turn began (its work ended at 60 ms)\n",
              (got_at - start) / 1e6);
  EXPECT_GE(got_at, work_end);
  EXPECT_LT(got_at - start, 200'000'000u);
  EXPECT_GE(holder->UsedNs(), 59'000'000u);
  EXPECT_LE(holder->UsedNs(), 60'000'000u);
  EXPECT_GE(waiter->TurnStartNs(), work_end);
}

// A holder that goes quiet within its turn (its published work ran out and it launches nothing)
// leaves the rest of its turn to the others within kStealSlackNs of its work's end, not at the
// end of its 20 ms turn; it is charged up to the end of its work.
TEST_F(ComputeArbiterSlotsTest, AQuietHoldersTurnPassesWithinTheSlackOfItsWorksEnd) {
  HandOver h;
  ASSERT_NO_FATAL_FAILURE(HandOverAfterWork(3'000'000, &h));
  const auto& [holder, waiter, start, work_end, got_at] = h;
  EXPECT_FALSE(holder->Holding());
  std::printf("taken %.1f ms after the holder's turn began (its work ended at 3 ms, its turn "
              "would at 20 ms)\n",
              (got_at - start) / 1e6);
  EXPECT_GE(got_at, work_end + kStealSlackNs);
  EXPECT_LT(got_at, start + kDefaultTurnNs);
  EXPECT_LE(holder->UsedNs(), 3'000'000u);
  EXPECT_GE(waiter->TurnStartNs(), work_end);
}

// A turn handed on while the next holder's thread is not running (a busy CPU, here SIGSTOP)
// starts when that thread takes it: the GPU's idle time between is charged to neither workload.
// (Charged from the hand-over, a workload of short turns paid that delay at each of its turns and
// got less than its share: 0.23 of the GPU against 0.25 charged, beside two busy loops per core.)
TEST_F(ComputeArbiterSlotsTest, ATurnTakenLateStartsWhenItIsTaken) {
  std::string error;
  auto holder = Join("holder", &error);
  ASSERT_NE(holder, nullptr) << error;
  ASSERT_TRUE(holder->Acquire());
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t late = fork();
  if (late == 0) {
    close(report[0]);
    std::string child_error;
    auto waiter = Join("late", &child_error);
    const uint64_t start = waiter != nullptr && waiter->Acquire() ? waiter->TurnStartNs() : 0;
    (void)!write(report[1], &start, sizeof(start));
    _exit(0);
  }
  close(report[1]);
  for (int i = 0; i < 2000 && !holder->Contended(); ++i) {  // until it waits
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(holder->Contended());
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(kill(late, SIGSTOP), 0);
  const uint64_t handed = NowNs();
  EXPECT_FALSE(holder->Release());  // to the waiting workload
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  ASSERT_EQ(kill(late, SIGCONT), 0);
  uint64_t started = 0;
  ASSERT_EQ(read(report[0], &started, sizeof(started)), static_cast<ssize_t>(sizeof(started)));
  close(report[0]);
  waitpid(late, nullptr, 0);
  std::printf("handed over at 0, taken and begun %.2f ms later\n", (started - handed) / 1e6);
  EXPECT_GE(started, handed + 2'500'000);
}

// A turn is the workload's: while one of its processes holds it, every other process of the
// workload may launch too (nothing waits for a sibling's thread), and no process of another
// workload may.
TEST_F(ComputeArbiterSlotsTest, AWorkloadsTurnIsEveryOneOfItsProcesses) {
  std::string error;
  auto holder = Join("w", &error);
  ASSERT_NE(holder, nullptr) << error;
  ASSERT_TRUE(holder->Acquire());
  // In processes of their own (a turn is taken by a process: its pid is in the holder word).
  auto gate_in_child = [&](const char* workload) {
    int report[2];
    EXPECT_EQ(pipe(report), 0);
    const pid_t child = fork();
    if (child == 0) {
      close(report[0]);
      std::string child_error;
      auto member = Join(workload, &child_error);
      const int gate = member == nullptr ? -1
                       : member->Check() == ComputeArbiter::Gate::kGo && member->Holding() ? 1
                                                                                           : 0;
      (void)!write(report[1], &gate, sizeof(gate));
      _exit(0);
    }
    close(report[1]);
    int gate = -1;
    EXPECT_EQ(read(report[0], &gate, sizeof(gate)), static_cast<ssize_t>(sizeof(gate)));
    close(report[0]);
    waitpid(child, nullptr, 0);
    return gate;
  };
  EXPECT_EQ(gate_in_child("w"), 1) << "a sibling process may launch in its workload's turn";
  EXPECT_EQ(gate_in_child("other"), 0) << "another workload's process must wait for a turn";
}

// Where the driver measures the process's GPU time, a measure replaces what the turns charged
// since the last one: the workload is charged what the GPU did, not how long its turns lasted.
TEST_F(ComputeArbiterSlotsTest, AMeasureReplacesWhatTheTurnsEstimated) {
  struct Scripted final : GpuTimeSource {
    uint64_t next = 0;
    Measured due = Measured::kNothing;
    uint64_t NextPollNs() const override { return 0; }
    Measured Take(uint64_t, uint64_t* ns) override {
      const Measured now = due;
      due = Measured::kNothing;
      *ns = next;
      return now;
    }
  } measured;
  std::string error;
  auto arbiter = Join("w", &error);
  ASSERT_NE(arbiter, nullptr) << error;
  arbiter->MeasureBy(&measured);
  auto turn = [&] {
    ASSERT_TRUE(arbiter->Acquire());
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    arbiter->Release();  // charged from the turn's start: at least 3 ms
  };
  ASSERT_NO_FATAL_FAILURE(turn());
  EXPECT_GE(arbiter->UsedNs(), 3'000'000u);
  arbiter->Measure();  // nothing due: the estimate stands
  EXPECT_GE(arbiter->UsedNs(), 3'000'000u);
  measured.next = 1'000'000;  // the GPU ran its work for 1 ms of those turns
  measured.due = GpuTimeSource::Measured::kTime;
  arbiter->Measure();
  EXPECT_EQ(arbiter->UsedNs(), 1'000'000u);
  ASSERT_NO_FATAL_FAILURE(turn());
  EXPECT_GE(arbiter->UsedNs(), 4'000'000u);
  measured.next = 10'000'000;  // more than the turns' wall time (others' streams, for example)
  measured.due = GpuTimeSource::Measured::kTime;
  arbiter->Measure();
  EXPECT_EQ(arbiter->UsedNs(), 11'000'000u);
  // A measure after a gap in which the driver's samples may have gone only starts counting
  // again: the turns' estimates since the last measure stand, and the next replaces only later
  // ones.
  ASSERT_NO_FATAL_FAILURE(turn());
  const uint64_t estimated = arbiter->UsedNs();
  EXPECT_GE(estimated, 14'000'000u);
  measured.next = 0;
  measured.due = GpuTimeSource::Measured::kBaseline;
  arbiter->Measure();
  EXPECT_EQ(arbiter->UsedNs(), estimated);
  ASSERT_NO_FATAL_FAILURE(turn());
  measured.next = 2'000'000;
  measured.due = GpuTimeSource::Measured::kTime;
  arbiter->Measure();
  EXPECT_EQ(arbiter->UsedNs(), estimated + 2'000'000u);
}

// A segment an older version made (another layout), or a file cut short, is replaced by one this
// version's workloads can join.
TEST_F(ComputeArbiterSlotsTest, AnOlderVersionsSegmentIsReplaced) {
  for (const off_t size : {static_cast<off_t>(sizeof(ArbiterSegment)), off_t{4096}}) {
    SCOPED_TRACE(size);
    int fd = openat(dir_fd_, "compute.old", O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, size), 0);
    const uint64_t magic = 0x6770756672616361ULL;
    const uint32_t version = 1;
    ASSERT_EQ(pwrite(fd, &magic, sizeof(magic), offsetof(ArbiterSegment, magic)), 8);
    ASSERT_EQ(pwrite(fd, &version, sizeof(version), offsetof(ArbiterSegment, version)), 4);
    close(fd);
    char err[256] = "";
    ComputeArbiter before;
    EXPECT_FALSE(before.Attach(dir_.c_str(), "compute.old", "w", 10, 1000, err, sizeof(err)));
    ASSERT_TRUE(ComputeArbiter::CreateAt(dir_fd_, "compute.old", kDefaultTurnNs, err, sizeof(err)))
        << err;
    ComputeArbiter after;
    EXPECT_TRUE(after.Attach(dir_.c_str(), "compute.old", "w", 10, 1000, err, sizeof(err))) << err;
  }
}

// Runs `body` on a 256 KiB tmpfs of its own (as root, in a child process with a mount namespace
// of its own) and returns the child's exit status, or -signal when a signal ended it.
int InSmallTmpfs(const std::function<int(int dir_fd)>& body) {
  const pid_t child = fork();
  if (child < 0) return -1000;
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      _exit(10);
    }
    char dir[] = "/tmp/gpufrac-full-XXXXXX";
    if (mkdtemp(dir) == nullptr) _exit(11);
    if (mount("tmpfs", dir, "tmpfs", 0, "size=256k") != 0) _exit(12);
    const int status = body(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    umount2(dir, MNT_DETACH);
    rmdir(dir);
    _exit(status);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1001;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Writes to file `name` in `dir_fd` until its filesystem is full.
void FillWith(int dir_fd, const char* name) {
  const int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  static char block[4096];
  lseek(fd, 0, SEEK_END);
  while (write(fd, block, sizeof(block)) > 0) {
  }
  close(fd);
}

// A local user may fill /dev/shm. Making an arbiter or a budget there (root services do:
// gpufracd, the Slurm plugin in slurmstepd) then fails with ENOSPC; before, the first write
// through the fresh mapping raised SIGBUS and killed the service's process.
TEST(SegmentsOnAFullTmpfs, AreRefusedWithNoSpaceInsteadOfSigbus) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const int status = InSmallTmpfs([](int dir_fd) {
    FillWith(dir_fd, "fill");
    char err[256] = "";
    const bool arbiter =
        ComputeArbiter::CreateAt(dir_fd, "compute.x", kDefaultTurnNs, err, sizeof(err));
    const bool arbiter_said = std::strstr(err, std::strerror(ENOSPC)) != nullptr;
    err[0] = '\0';
    const bool budget =
        Budget::CreateAt(dir_fd, "budget.x", uint64_t{1} << 30, 0, -1, -1, err, sizeof(err));
    const bool budget_said = std::strstr(err, std::strerror(ENOSPC)) != nullptr;
    return !arbiter && arbiter_said && !budget && budget_said ? 0 : 1;
  });
  ASSERT_GE(status, 0) << "killed by signal " << -status;
  EXPECT_EQ(status, 0) << "made on a full tmpfs, or failed without saying why";
}

// Every workload on the GPU may write its arbiter, so one may grow it until its filesystem is
// full (an attacker's review: on a Slurm node's 8 MiB budget tmpfs, the next step then replaced
// it, could not get pages for the new one, and every shared step on the GPU was refused). The
// launcher cuts it back to its size and keeps it, what the workloads wrote in it untouched.
TEST(SegmentsOnAFullTmpfs, AnArbiterGrownToFillItIsCutBackAndKept) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const int status = InSmallTmpfs([](int dir_fd) {
    char err[256] = "";
    if (!ComputeArbiter::CreateAt(dir_fd, "compute.x", kDefaultTurnNs, err, sizeof(err))) return 2;
    struct stat before {};
    const int fd = openat(dir_fd, "compute.x", O_RDONLY | O_CLOEXEC);
    fstat(fd, &before);
    FillWith(dir_fd, "compute.x");
    struct stat grown {};
    fstat(fd, &grown);
    if (grown.st_size <= before.st_size) return 3;  // The attack did not grow it.
    const bool kept =
        ComputeArbiter::CreateAt(dir_fd, "compute.x", kDefaultTurnNs, err, sizeof(err));
    struct stat after {};
    fstat(fd, &after);  // The same file, not a new one under the name.
    close(fd);
    return kept && after.st_size == before.st_size ? 0 : 1;
  });
  ASSERT_GE(status, 0) << "killed by signal " << -status;
  EXPECT_EQ(status, 0) << "not kept at its size (2: not made, 3: not grown)";
}

}  // namespace
}  // namespace gpufrac::limiter
