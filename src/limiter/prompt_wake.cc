// WakePromptly (see prompt_wake.h).
#include "limiter/prompt_wake.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace gpufrac::limiter {
namespace {

// The kernel's struct sched_attr (glibc has no wrapper for its calls), as of its first size.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};

constexpr uint64_t kShortestSliceNs = 100'000;

__thread bool t_asked __attribute__((tls_model("initial-exec")));

}  // namespace

void WakePromptly() {
  if (t_asked) return;
  t_asked = true;
  SchedAttr attr{};
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) != 0 ||
      attr.sched_policy != SCHED_OTHER || attr.sched_runtime == kShortestSliceNs) {
    return;
  }
  attr.size = sizeof(attr);
  attr.sched_flags = 0;
  attr.sched_runtime = kShortestSliceNs;
  syscall(SYS_sched_setattr, 0, &attr, 0);
}

}  // namespace gpufrac::limiter
