// Which workloads on a GPU take more of its time than their compute share, judged from what the
// driver measured of each (node/job_gpu_time.h), never from what a workload or its arbiter wrote;
// and, where the service enforces shares from outside the processes (--gpu-compute-enforce),
// what part of the time each such workload is to be held frozen (node/compute_watch.h does it).
//
// Shares are judged over windows of at least kWindowMs of the driver's counted time. In a window,
// a workload with compute pair {request, limit} that used the part `used` of the GPU's time is
//   over its limit    when used > limit + kTolerance (a ceiling, whatever the others do);
//   over its request  when used > request + kTolerance while the GPU was busy (its workloads
//                     used at least kBusy of it together) and a neighbour that used some of it
//                     got less than its own request - kTolerance: a starved neighbour.
// The second is what a neighbour that removed the limiter does; it is also what a workload that
// keeps the limiter looks like beside a neighbour that wants less than its request (the driver's
// samples cannot tell the two apart). A hold tells them apart: a neighbour that, in a window with
// idle time on the GPU while a workload there was held, took no more than in the window before
// took what it wanted, so for kRememberMs it is not starved while it uses no more than that
// (plus kTolerance). Without
// enforcing, the flag may name a workload beside such a neighbour; a hold costs one window to
// learn it.
//
// A workload is flagged once it was over for kWindowsToFlag windows in a row, and unflagged after
// as many windows within its share; a workload that arrives within a window is judged from the
// next. A flagged workload is held: its part frozen, h, is set so that its rate unheld,
// used / (1 - h), held to the new part gives its target: its limit when over its limit, else
// what is left after its part of its starved neighbours' shortfall (shared by those over their
// requests in proportion to how far over), never below its request; a held workload that got
// less than its request for kWindowsToFlag windows is held less. When it is
// no longer over and the GPU has idle time, h is lowered to give it that idle time, up to its
// limit; when no neighbour uses the GPU any more, it is held to its limit only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "common/compute_share.h"

namespace gpufrac::node {

class ComputeGuard {
 public:
  static constexpr int64_t kWindowMs = 500;
  static constexpr double kTolerance = 0.05;
  static constexpr double kBusy = 0.95;
  static constexpr int kWindowsToFlag = 2;
  // The most of the time a workload is held frozen: it always runs some of the time.
  static constexpr double kMostHeld = 0.95;
  static constexpr double kLeastHeld = 0.04;
  // A neighbour that used less than this of a window did not want the GPU then.
  static constexpr double kActive = 0.01;
  // How long a neighbour seen taking less than it could is believed to want no more.
  static constexpr int64_t kRememberMs = 30'000;
  static constexpr int64_t kStaleMs = 2'000;

  // `enforce`: compute holds (else Held is always 0 and workloads are only flagged).
  explicit ComputeGuard(bool enforce) : enforce_(enforce) {}

  struct Workload {
    int64_t job = 0;
    ComputePair compute;
    uint64_t used_ns = 0;  // its running total of GPU time on this GPU (the driver's measure)
  };
  // Records the running totals of GPU `gpu`'s arbitrated workloads, counted up to `until_ms`
  // (a steady clock, in ms). Judges a window when the last judged one ended kWindowMs before.
  void Observe(int gpu, int64_t until_ms, const std::vector<Workload>& workloads);

  enum class Over { kNo, kLimit, kRequest };
  struct Verdict {
    Over over = Over::kNo;  // as flagged (kWindowsToFlag windows in a row)
    double used = 0;        // its part of the GPU's time in the last window
    double held = 0;        // the part of the time it is to be held frozen
  };
  // Job `job` on GPU `gpu`; nullopt before a window with it was judged.
  std::optional<Verdict> Of(int64_t job, int gpu) const;
  // The part of the time job `job` is to be held frozen at `now_ms` (the clock of Observe): the
  // most any of its GPUs asks for, of GPUs judged within kStaleMs (a GPU whose samples stopped
  // coming, or whose clock stepped back, holds nobody).
  double Held(int64_t job, int64_t now_ms) const;
  void Forget(int64_t job);

 private:
  struct Judged {
    Verdict verdict;
    int over_streak = 0;    // windows over, in a row
    int within_streak = 0;  // windows within its share, in a row
    int64_t satisfied_ms = 0;  // the end of its last window with idle time on the GPU (0: none)
    double satisfied_used = 0;  // what it used in that window
  };
  struct Gpu {
    int64_t base_ms = 0;
    std::map<int64_t, uint64_t> base_ns;  // by job
  };
  void Judge(int gpu, int64_t until_ms, double window_ms, const std::vector<Workload>& workloads,
             const Gpu& base);

  bool enforce_;
  std::map<int, Gpu> gpus_;
  std::map<std::pair<int64_t, int>, Judged> judged_;  // by job and GPU
};

const char* OverName(ComputeGuard::Over over);  // "no", "limit", "request"

}  // namespace gpufrac::node
