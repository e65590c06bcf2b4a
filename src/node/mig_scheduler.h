// Jobs on the node's GPUs in MIG mode: each pending MIG job, in queue order (priority, then
// FIFO), gets the smallest profile that holds its request and a placement chosen by the MIG
// planner; instances are created on demand, an idle one of the right profile is reused, and idle
// ones are destroyed only when their slices are needed. Instances serving a job, or holding a
// process gpufrac did not start, are never touched. What exists is always read back from the
// driver (mig::MigBackend), never assumed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "gpu/mig_catalogue.h"
#include "mig/backend.h"
#include "mig/demand.h"
#include "mig/planner.h"

namespace gpufrac::node {

struct MigGpuSpec {
  int index = 0;
  const gpu::MigModel* model = nullptr;
};

class MigScheduler {
 public:
  MigScheduler(std::vector<MigGpuSpec> gpus, mig::MigBackend* backend);

  bool empty() const { return gpus_.empty(); }
  const std::vector<MigGpuSpec>& gpus() const { return gpus_; }
  // Whether any job runs on MIG GPU `gpu`.
  bool Busy(int gpu) const;
  // OK when some MIG GPU here has a profile that holds `request` (else SmallestProfile's error
  // for the largest model, or kFailedPrecondition when there are no MIG GPUs).
  Status CheckFeasible(const GpuRequest& request) const;

  void Enqueue(int64_t id, int queue, const GpuRequest& request, int64_t submitted_ms);
  bool Dequeue(int64_t id);
  // A job (re-adopted after a restart) runs in the instance `uuid` on GPU `gpu`.
  void AddRunning(int64_t id, int gpu, const std::string& uuid);
  // The job ended: its instance becomes idle (and stays, until its slices are needed).
  bool Finish(int64_t id);

  struct Start {
    int64_t id = 0;
    int gpu = 0;
    std::string uuid;           // The instance's MIG UUID.
    uint64_t memory_bytes = 0;  // What the instance has.
    uint32_t milli = 0;         // Its share of the GPU (memory slices), in thousandths.
    std::string profile;        // "1g.10gb"
  };
  // Plans and creates instances for as many pending jobs as fit now, in order. Every returned
  // job counts as running in its instance; the caller launches it, or calls Finish.
  std::vector<Start> Schedule();

  // For status: every instance on every MIG GPU, with the job it serves (0 = none) and the
  // processes in it. `in_use` with job 0: a workload gpufrac did not start (started by hand with
  // CUDA_VISIBLE_DEVICES=MIG-..., or a job whose record was lost), which keeps the instance
  // from being reused or destroyed.
  struct SliceView {
    int gpu = 0;
    std::string model;
    int memory_slices = 0;
    struct Item {
      std::string profile;
      gpu::MigPlacement placement;
      std::string uuid;
      int64_t job = 0;
      bool in_use = false;
      std::vector<unsigned> pids;
    };
    std::vector<Item> instances;
  };
  std::vector<SliceView> Slices();
  std::string WaitReason(int64_t id) const;

 private:
  struct Pending {
    int64_t id;
    int queue;
    GpuRequest request;
    int64_t submitted_ms;
  };
  // The steps of Schedule (mig_scheduler.cc).
  struct DriverView;
  DriverView ReadDriver();
  void ReadGpu(size_t g, DriverView& view);
  std::string BlockedByStrangers(const DriverView& view, const GpuRequest& request) const;
  StatusOr<std::string> Realise(const mig::Plan& plan, const DriverView& view, bool* replan);
  size_t GpuPosition(int index) const;  // In gpus_, of GPU `index`.
  std::vector<MigGpuSpec> gpus_;
  mig::MigBackend* backend_;
  std::vector<Pending> pending_;         // Kept in (queue, submitted, id) order.
  std::map<std::string, int64_t> busy_;  // MIG UUID -> job.
  struct Running {
    int gpu;
    std::string uuid;
  };
  std::map<int64_t, Running> running_;          // job -> its GPU and instance.
  std::map<int64_t, std::string> waiting_;      // Why a pending job waits, as of the last pass.
  std::set<std::pair<int, unsigned>> refused_;  // (GPU, GI) the driver would not destroy.
  // Instances last seen holding processes gpufrac did not start: MIG UUID -> pids (logged once
  // per change).
  std::map<std::string, std::vector<unsigned>> foreign_;
  // What was asked for recently, by profile: the planner keeps room for what is in demand.
  mig::DemandTracker demand_;
};

}  // namespace gpufrac::node
