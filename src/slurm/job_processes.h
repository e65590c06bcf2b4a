// The processes of a Slurm job (or of one of its steps) on this node, found in the cgroups Slurm's
// proctrack/cgroup and task/cgroup plugins make for it, and their end. A job's GPU share is freed
// only once its processes are gone: a task that outlives its slurmstepd (SIGKILLed) still holds
// its GPU memory, and the share must not be booked again under it.
//
// Where Slurm 22.05 puts a job: under cgroup v1, in each controller it uses,
// MOUNT/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/... (slurm_<node> where Slurm is built for
// several slurmd per host, as Debian's is); under cgroup v2,
// .../slurmstepd[_<node>].scope/job_<id>/step_<step>/.... Only this node's roots count: another
// slurmd on the host (a test cluster) has jobs of the same ids. Only directories root owns count,
// from the mount down to the job's: a user's delegated cgroup subtree may hold any name. Below
// the job's directory they may be its user's (Slurm hands the step's cgroups to the user).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac::slurm {

// Slurm's step ids that are not steps a user runs programs in: the extern step (adopted ssh
// sessions) and the pending step; and those of the job's own steps (the batch script's, salloc's
// interactive one), which get the job's GPUs.
inline constexpr uint32_t kExternStep = 0xfffffffc;
inline constexpr uint32_t kPendingStep = 0xfffffffd;
inline constexpr uint32_t kBatchStep = 0xfffffffb;
inline constexpr uint32_t kInteractiveStep = 0xfffffffa;

// Where Slurm's cgroups are looked for: the cgroup and cgroup2 mount points of /proc/self/mountinfo
// by default.
std::vector<std::string> CgroupMounts();

// Slurm's name for this node, as its jobs' cgroups are named: SLURMD_NODENAME of this process's
// own environment (slurmd sets it for the epilog; a job's environment, which its user controls,
// is never read), else the node the caller's own Slurm cgroup is for (slurmstepd is in its
// step's: .../slurm_<node>/...), else the host's short name.
std::string ThisSlurmNode();

// The name of step `step`'s cgroup directory under its job's ("step_3", "step_batch", ...).
std::string StepCgroupName(uint32_t step);

// The cgroup directories of job `job` on node `node` (Slurm's name for it), in every hierarchy of
// `mounts` (its step `step`'s only, when given). Empty when Slurm made none (no cgroup plugin, or
// the job is gone).
std::vector<std::string> JobCgroups(uint32_t job, std::optional<uint32_t> step,
                                    const std::string& node,
                                    const std::vector<std::string>& mounts);

// The processes in `dirs` and the cgroups below them, `except` left out (the caller itself): every
// process whose cgroup, as /proc/<pid>/cgroup names it, is one of them or below it, however deep
// and whatever its user renamed there (a zombie waiting to be reaped aside: it holds no memory).
// kUnavailable (fail closed: processes may remain) when /proc or a process's cgroups cannot be
// read, or the scan takes longer than `wait`.
StatusOr<std::vector<pid_t>> ProcessesIn(const std::vector<std::string>& dirs, pid_t except,
                                         std::chrono::milliseconds wait);

// Kills (SIGKILL) every process in `dirs` (as ProcessesIn finds them) but `except`, or with
// `which` only those it says, thawing every frozen cgroup between each and `dirs` so that the
// signal is delivered, and waits until none is left. kUnavailable, naming the processes left,
// when some outlive `wait` (the whole operation's bound), or when they cannot be found for certain
// (as ProcessesIn).
Status EndProcessesIn(const std::vector<std::string>& dirs, pid_t except,
                      std::chrono::milliseconds wait,
                      const std::function<bool(pid_t)>& which = nullptr);

}  // namespace gpufrac::slurm
