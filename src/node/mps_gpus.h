// The node's GPUs in MPS mode, for the service: which they are (the state directory's mps-gpus
// record), what each GPU's MPS daemon must allow its clients, and the daemons themselves
// (machine::MpsDaemons) driven off the service's lock. Each GPU's daemon is talked to by a worker
// thread of its own, which also watches it; the service hands work over, takes the outcomes
// back, and is woken when there are some. So a daemon that stops answering holds up only the jobs
// starting on its GPU, each for at most the control timeout per command (machine/mps_control.h),
// never the service's lock, its scheduling loop or the other GPUs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "launch/gpu_grant.h"
#include "launch/grant_limits.h"
#include "machine/mps_daemons.h"
#include "machine/node_gpu.h"

namespace gpufrac::node {

class MpsGpus {
 public:
  struct Options {
    std::string state_dir;  // The record is state_dir/mps-gpus, the daemons under state_dir/mps.
    std::string control;    // nvidia-cuda-mps-control, absolute.
    std::vector<std::string> env;  // The simulated driver's variables, for the daemons.
    // Called from a worker (with no lock of this class held) when TakePrepared or TakeEnded has
    // something new.
    std::function<void()> wake;
  };
  explicit MpsGpus(Options options) : options_(std::move(options)) {}
  // Lets each worker finish what it is doing and the Keep and Stop asked of it (not the Prepare
  // still waiting: those jobs were never let go, and the next service starts them afresh); each
  // then stops its daemon if it serves no client; the others are kept for the next service.
  ~MpsGpus();
  MpsGpus(const MpsGpus&) = delete;
  MpsGpus& operator=(const MpsGpus&) = delete;

  // Writes which of `gpus` are in MPS mode to the record (replacing it whole).
  Status Record(const std::vector<machine::NodeGpu>& gpus) const;
  // Sets the mode of each of `gpus` neither in MIG mode nor whole-only to what the record says:
  // once there is one, it decides (not --mps-gpus). On the first start it writes one.
  Status Load(std::vector<machine::NodeGpu>* gpus) const;

  // Why `gpu` cannot go into (`enabled`) or out of MPS mode: it is in MIG mode or serves whole
  // GPUs only, or there is no control program (kFailedPrecondition, saying what to do).
  Status CheckModeChange(const machine::NodeGpu& gpu, bool enabled) const;

  // What a workload holding `grants` needs of the MPS daemons of `gpus`: one entry per GPU in
  // MPS mode it has a share of (a whole GPU runs its job alone, outside MPS), with the most any
  // client there may have, it or one of the workloads holding `others` (the grants of every
  // other job starting or running): a client's environment can only lower its own limits.
  static std::vector<launch::MpsClient> NeedsOf(const std::vector<launch::GpuGrant>& grants,
                                                const std::vector<machine::NodeGpu>& gpus,
                                                const std::vector<launch::GpuGrant>& others);

  // Has the daemon of each of `needs` started (or taken back) and its limits raised to the
  // need's, on the GPUs' workers; job `job`'s outcome then comes from TakePrepared.
  void Prepare(int64_t job, std::vector<launch::MpsClient> needs);
  struct Prepared {
    int64_t job = 0;
    // The pipe directory of each GPU's daemon by GPU index, or why one is not ready.
    StatusOr<std::map<int, std::string>> pipes;
  };
  std::vector<Prepared> TakePrepared();

  // Takes back (or starts again) the daemon of each of `gpus` in MPS mode that running job `job`
  // holds one of `grants` on, so that it is watched (after a restart); a failure is logged.
  void Keep(int64_t job, const std::vector<launch::GpuGrant>& grants,
            const std::vector<machine::NodeGpu>& gpus);
  // Stops GPU `index`'s daemon (the GPU leaves MPS mode).
  void Stop(int index);
  // The daemons that ended since the last call; each was started again at once.
  std::vector<machine::MpsDaemons::Ended> TakeEnded();

 private:
  struct Task {
    bool at_exit = false;  // Still done when the service stops.
    std::function<void(machine::MpsDaemons&)> run;
  };
  struct Lane {
    std::deque<Task> tasks;
    std::thread thread;
  };
  void Post(int index, Task task);
  // A worker: the tasks of GPU `index`, and between them a watch on its daemon.
  void Work(int index);
  // Records the outcome of job `job`'s need on GPU `index`.
  void Done(int64_t job, int index, StatusOr<std::string> pipe);
  void Wake();

  const Options options_;
  std::mutex mu_;
  std::condition_variable work_;
  bool stopping_ = false;
  std::map<int, Lane> lanes_;  // By GPU index; a lane is made by its first task.
  struct Pending {
    size_t left = 0;
    std::map<int, std::string> pipes;
    Status status;
  };
  std::map<int64_t, Pending> pending_;  // Jobs whose needs are not all met yet.
  std::vector<Prepared> prepared_;
  std::vector<machine::MpsDaemons::Ended> ended_;
};

}  // namespace gpufrac::node
