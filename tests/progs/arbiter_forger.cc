// arbiter_forger: the attack of a workload that keeps the limiter but rewrites its own weight in
// its GPU's compute arbiter (a segment every workload on the GPU may write), so that the turns
// give it more than its request. It waits for a slot of weight FROM to appear (its workload's,
// once the workload's limiter joined), then writes TO there every millisecond for SECONDS.
//
//   arbiter_forger ARBITER FROM TO SECONDS
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "limiter/compute_arbiter.h"

using gpufrac::limiter::ArbiterSegment;
using gpufrac::limiter::kArbiterSlots;

namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: arbiter_forger ARBITER FROM TO SECONDS\n");
    return 2;
  }
  const unsigned from = static_cast<unsigned>(std::atoi(argv[2]));
  const unsigned to = static_cast<unsigned>(std::atoi(argv[3]));
  const double end = Now() + std::atof(argv[4]);
  int fd = -1;
  while (fd < 0 && Now() < end) {
    fd = open(argv[1], O_RDWR | O_CLOEXEC);
    if (fd < 0) usleep(10'000);
  }
  if (fd < 0) {
    std::perror(argv[1]);
    return 1;
  }
  void* map = mmap(nullptr, sizeof(ArbiterSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* seg = static_cast<ArbiterSegment*>(map);
  int mine = -1;
  while (mine < 0 && Now() < end) {
    for (int i = 0; i < kArbiterSlots; ++i) {
      if (seg->slots[i].key.load() != 0 && seg->slots[i].weight.load() == from) mine = i;
    }
    if (mine < 0) usleep(1000);
  }
  if (mine < 0) {
    std::fprintf(stderr, "arbiter_forger: no slot of weight %u appeared\n", from);
    return 1;
  }
  std::printf("forging slot %d: weight %u -> %u\n", mine, from, to);
  std::fflush(stdout);
  while (Now() < end) {
    seg->slots[mine].weight.store(to);
    seg->slots[mine].limit.store(1000);
    usleep(1000);
  }
  return 0;
}
