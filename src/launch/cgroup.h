// A workload's own cgroup, as Slurm's ConstrainDevices gives each job one: every process the
// workload starts stays in it (setsid or double fork cannot leave it), so all of them can be
// found and killed when the workload ends; and it cannot open the device nodes of GPUs it was not
// given, whatever it does to CUDA_VISIBLE_DEVICES or the limiter.
//
// Where the host mounts the v1 `devices` controller (this is what it enforces there), the cgroup
// is made in that hierarchy and the nodes are denied by its devices.deny list. On a cgroup v2
// host it is made in the unified hierarchy, the nodes are denied by a BPF device program attached
// to it, and cgroup.kill ends its processes. Everything here acts on cgroup file systems, which
// only root can write; no path comes from a user.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::launch {

// A character device node by number, e.g. /dev/nvidia3 is {195, 3}.
struct DeviceNode {
  unsigned major = 0;
  unsigned minor = 0;
};

// The NVIDIA driver's character major: /dev/nvidiaN is 195:N for GPUs; from 254 on are its
// control nodes (254 nvidia-modeset, 255 nvidiactl), which every CUDA process opens.
inline constexpr unsigned kNvidiaMajor = 195;
inline constexpr unsigned kNvidiaFirstControlMinor = 254;

class WorkloadCgroup {
 public:
  enum class Kind { kDevicesV1, kUnifiedV2 };

  // The kind this host offers for workload cgroups: the v1 devices controller when mounted, else
  // cgroup v2; nullopt when neither is mounted (or the caller is not root).
  static std::optional<Kind> Available();

  // Creates the cgroup of workload `name` (gpufrac/<name>, replacing an empty leftover of the
  // same name) of kind `kind`, in which `denied` nodes cannot be opened, read, written or made.
  static StatusOr<WorkloadCgroup> Create(Kind kind, const std::string& name,
                                         const std::vector<DeviceNode>& denied);
  // The cgroup of workload `name` if it exists (after a service restart).
  static std::optional<WorkloadCgroup> Find(const std::string& name);

  // The cgroup at `dir` (one Create made, e.g. named in a job's spec).
  static WorkloadCgroup At(std::string dir);

  const std::string& dir() const { return dir_; }
  // Moves process `pid` into it (the job's supervisor does this to the job's process before it
  // drops privileges, so that everything the job starts is born inside).
  Status Join(pid_t pid) const;
  // The files Join writes the pid to (its own cgroup.procs, and its freezer twin's in v1), for a
  // process that joins after fork, where it may not allocate.
  std::vector<std::string> ProcsFiles() const;

  // Stops (true) or resumes (false) every process in it, as cgroup v2's cgroup.freeze does (in
  // v1, through its namesake in the freezer hierarchy, which Create makes and Join joins).
  // A frozen process cannot run, or undo the freezing by any signal; work it queued on a GPU
  // before it was frozen still runs.
  Status Freeze(bool frozen) const;

  // The processes in it now.
  std::vector<pid_t> Members() const;
  // Sends SIGKILL to every process in it, again until none is left or `wait` has passed; true
  // when it is empty.
  bool KillAll(std::chrono::milliseconds wait) const;
  // Removes it; false while processes remain. Waits up to a second for the exits of processes
  // that have left it but whose exit the kernel has not finished.
  bool Remove() const;

 private:
  explicit WorkloadCgroup(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace gpufrac::launch
