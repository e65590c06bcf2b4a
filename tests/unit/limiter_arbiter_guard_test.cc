// The SIGBUS guard of compute arbiter mappings (limiter/arbiter_guard.h), in a process of its own
// (the guard's table is the process's).
#include "limiter/arbiter_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "limiter/compute_arbiter.h"

namespace gpufrac::limiter {
namespace {

// The guard is in place from the moment a workload maps the arbiter, before it has read or
// joined it: a neighbour that truncates the file then leaves it an empty arbiter to join alone,
// not a SIGBUS (a second review: the guard came only after the join).
TEST(ArbiterGuardTest, ASegmentLostBeforeTheJoinBecomesAnEmptyArbiter) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char dir[] = "/tmp/gpufrac-guard-XXXXXX";
    if (mkdtemp(dir) == nullptr) _exit(10);
    const int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char err[256];
    if (!ComputeArbiter::CreateAt(dir_fd, "compute.x", kDefaultTurnNs, err, sizeof(err))) _exit(11);
    const int fd = openat(dir_fd, "compute.x", O_RDWR | O_CLOEXEC);
    void* map = mmap(nullptr, sizeof(ArbiterSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) _exit(12);
    auto* seg = static_cast<ArbiterSegment*>(map);
    if (!GuardArbiter(seg)) _exit(13);
    if (ftruncate(fd, 0) != 0) _exit(14);
    const bool empty = seg->magic == kArbiterMagic && seg->turn_ns == kDefaultTurnNs &&
                       seg->holder.load() == 0 && seg->slots[0].weight.load() == 0;
    unlinkat(dir_fd, "compute.x", 0);
    rmdir(dir);
    _exit(empty ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Entries are given back when a mapping is no longer guarded: a process that attaches and
// detaches again and again keeps its guard.
TEST(ArbiterGuardTest, UnguardedEntriesAreUsedAgain) {
  static ArbiterSegment segments[40];
  for (ArbiterSegment& s : segments) {
    ASSERT_TRUE(GuardArbiter(&s));
    UnguardArbiter(&s);
  }
}

}  // namespace
}  // namespace gpufrac::limiter
