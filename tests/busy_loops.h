// CPU-bound neighbours for timing tests and benchmarks: busy loops, ended with the object or its
// creator. Each runs in a session of its own, as another user's work would (Linux's autogroup
// then schedules each as a group of its own beside the workloads'), or, with kCallersGroup, in
// the caller's, where every thread competes with every other one alone: so are all processes of a
// host without autogroup, or of one container or systemd service (a cgroup of their own).
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace gpufrac::testing {

class BusyLoops {
 public:
  enum class Group { kOwnSessions, kCallersGroup };
  // `per_core` loops for each online CPU.
  explicit BusyLoops(int per_core, Group group = Group::kOwnSessions) {
    for (long i = 0; i < per_core * sysconf(_SC_NPROCESSORS_ONLN); ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (group == Group::kOwnSessions) setsid();
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
