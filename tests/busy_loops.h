// CPU-bound neighbours for timing tests and benchmarks: busy loops, each in a session of its own
// as another user's work would be (in the same session as the workloads, Linux's autogroup would
// charge them to the workloads' CPU group instead), ended with the object or its creator.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace gpufrac::testing {

class BusyLoops {
 public:
  // `per_core` loops for each online CPU.
  explicit BusyLoops(int per_core) {
    for (long i = 0; i < per_core * sysconf(_SC_NPROCESSORS_ONLN); ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setsid();
        volatile unsigned long spins = 0;
        for (;;) spins = spins + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::vector<pid_t> pids_;
};

}  // namespace gpufrac::testing
