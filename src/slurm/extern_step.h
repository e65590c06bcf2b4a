// A job's extern step on a node whose GPUs gpufrac shares. With PrologFlags=contain, Slurm makes
// each job an extern step, and pam_slurm_adopt puts its user's ssh sessions into the node there.
// ConstrainDevices opens the job's GPUs' device nodes to that step as to the job's other steps,
// but no task Slurm starts runs in it, so nothing preloads the limiter: a program started from
// such a session would use the whole GPU beside the shares of other jobs (issue 29). gpufrac
// therefore gives the extern step no NVIDIA device node: it denies them in the step's cgroup when
// the step starts, and ends any process of the step that holds one open already.
//
// What this needs: cgroup v1's devices controller (Slurm's cgroup/v1 with ConstrainDevices).
// Under cgroup v2 Slurm attaches a BPF program of its own to the step's cgroup, which gpufrac
// does not replace: there the fence finds no devices hierarchy and says so.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::slurm {

// The character majors of NVIDIA's device nodes on this host: 195 (the GPUs, nvidiactl and
// nvidia-modeset) and each `proc_devices` lists under a name starting "nvidia" (nvidia-uvm,
// nvidia-caps, nvidia-nvswitch, ...), which are numbered when the driver loads.
std::vector<unsigned> NvidiaDeviceMajors(const std::string& proc_devices = "/proc/devices");

// What a fence did: in how many devices hierarchies it denied the majors, and how many processes
// that held one open it ended.
struct ExternFence {
  int hierarchies = 0;
  int ended = 0;
};

// Denies every character device of `majors` (read, write and mknod) to job `job`'s extern step on
// node `node` (Slurm's name for it), in each cgroup v1 devices hierarchy of `mounts` where the
// step has a cgroup (the kernel carries a parent's denial to every cgroup below it), then ends
// (SIGKILL) each process of the step, in any hierarchy and below, that holds such a device open,
// within `wait`. `hierarchies` is 0 when the step has no cgroup in a devices hierarchy (no
// PrologFlags=contain, no ConstrainDevices, or cgroup v2): nothing is denied then. An error when a
// denial cannot be written, or the step's processes cannot be found or ended for certain (fail
// closed).
StatusOr<ExternFence> FenceExternStep(uint32_t job, const std::string& node,
                                      const std::vector<std::string>& mounts,
                                      const std::vector<unsigned>& majors,
                                      std::chrono::milliseconds wait);

}  // namespace gpufrac::slurm
