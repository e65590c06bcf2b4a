// libgpufrac_spank.so: gpufrac's SPANK plugin. It adds --gpu-memory, --gpu-fraction,
// --gpu-compute and --gpu-compute-limit to srun, sbatch and salloc, and in each job step on a
// node (slurmstepd, as root) that asked for them or holds shards or MPS units gives the step's
// tasks the limiter: the job's read-only limit file and budgets (node_state.h) on the GPUs Slurm
// gave the step, LD_PRELOAD and GPUFRAC_LIMIT_FILE.
// Its state is removed when the job's last step on the node ends, at the job's epilog, and by
// the next step after a slurmstepd that could not clean up (killed, or the node rebooted).
//
// plugstack.conf: required /path/libgpufrac_spank.so [state_dir=DIR] [limiter=PATH] [nvml=PATH]
//                 [shard_memory=SIZE]
// Nothing here may throw into Slurm or crash slurmstepd: every callback catches and reports.
extern "C" {
#include <slurm/spank.h>
}

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "gpu/devices.h"
#include "launch/environment.h"
#include "launch/limit_file.h"
#include "proc/process_identity.h"
#include "slurm/booked_share.h"
#include "slurm/extern_step.h"
#include "slurm/job_processes.h"
#include "slurm/node_state.h"
#include "slurm/step_request.h"

extern "C" {
// What SPANK_PLUGIN declares, with C linkage and visible (C++ would give the constants internal
// linkage).
__attribute__((visibility("default"))) extern const char plugin_name[] = "gpufrac";
__attribute__((visibility("default"))) extern const char plugin_type[] = "spank";
__attribute__((visibility("default"))) extern const unsigned int plugin_version =
    SLURM_VERSION_NUMBER;
__attribute__((visibility("default"))) extern const unsigned int spank_plugin_version = 1;
}

namespace {

using gpufrac::Status;
using gpufrac::StatusOr;
namespace slurm = gpufrac::slurm;

constexpr char kDefaultStateDir[] = "/run/gpufrac/slurm";
constexpr char kDefaultLimiter[] = "/usr/lib/gpufrac/libgpufrac.so";
using slurm::kBatchStep;
using slurm::kExternStep;
using slurm::kInteractiveStep;
using slurm::kPendingStep;

struct Config {
  std::string state_dir = kDefaultStateDir;
  std::string limiter = kDefaultLimiter;
  std::string nvml;  // "" : libnvidia-ml.so.1 from the library path.
  // The memory one `shard` GRES stands for on this node's GPUs (job_submit.lua's memory / shards);
  // 0 when not given: a step on shards is then refused, as its limit cannot be checked.
  uint64_t shard_bytes = 0;
  // The GRES this node shares its GPUs by (gres=shard|mps): only its variable names the booking.
  slurm::SharingGres gres = slurm::SharingGres::kEither;
  // Whether ssh sessions adopted into a job (its extern step) keep its GPUs' device nodes
  // (extern_gpus=allow, for nodes that share no GPU); by default they get none.
  bool extern_gpus = false;
};

// One process holds one step (slurmstepd) or one client (srun, sbatch, salloc): these live for
// the process, filled in the order Slurm calls the callbacks.
Config g_config;
slurm::StepOptions g_options;
std::optional<gpufrac::GpuRequest> g_request;
std::string g_limit_file;               // Set when this step's tasks run under the limiter.
std::vector<std::string> g_step_uuids;  // The step's GPUs, in Slurm's order.
slurm::Booking g_booking;               // What Slurm booked for the step (BeginStep read it).
bool g_step_recorded = false;
// Why this step cannot run under the limiter. Reported by each task, which then fails: failing
// slurmstepd's own callbacks would make Slurm drain the node for a user's mistake.
std::string g_step_error;
uint32_t g_job = 0, g_step = 0;

// SPANK keeps pointers to the option table: it must be static and writable.
std::vector<std::string> g_option_names, g_option_placeholders, g_option_help;
std::vector<spank_option> g_option_table;

int OnOption(int index, const char* value, int remote) {
  try {
    const auto& specs = slurm::StepOptionSpecs();
    if (index < 0 || static_cast<size_t>(index) >= specs.size()) return -1;
    const slurm::StepOptionSpec& spec = specs[static_cast<size_t>(index)];
    std::string text = value != nullptr ? value : "";
    Status checked = slurm::CheckStepOption(spec.name, text);
    if (!checked.ok()) {
      slurm_error("gpufrac: %s", checked.message().c_str());
      // In slurmstepd, Slurm only logs a refused option and runs the step without it: the step
      // must not then run unlimited. Its tasks fail with the reason (as for any step error).
      if (remote != 0 && g_step_error.empty()) g_step_error = checked.message();
      return -1;
    }
    g_options.*spec.text = std::move(text);
    return 0;
  } catch (const std::exception& e) {
    slurm_error("gpufrac: option %d: %s", index, e.what());
    return -1;
  }
}

Status ParseArguments(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    std::string key = arg.substr(0, eq), value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "shard_memory" && eq != std::string::npos) {
      StatusOr<uint64_t> bytes = gpufrac::ParseSize(value);
      if (!bytes.ok()) {
        return gpufrac::InvalidArgumentError("plugstack.conf argument shard_memory: " +
                                             bytes.status().message());
      }
      g_config.shard_bytes = *bytes;
      continue;
    }
    if (key == "gres" && eq != std::string::npos) {
      GPUFRAC_ASSIGN_OR_RETURN(g_config.gres, slurm::ParseSharingGres(value));
      continue;
    }
    if (key == "extern_gpus") {
      if (value != "deny" && value != "allow") {
        return gpufrac::InvalidArgumentError(
            "plugstack.conf argument extern_gpus is deny or allow, not \"" + value + "\"");
      }
      g_config.extern_gpus = value == "allow";
      continue;
    }
    if (eq == std::string::npos || value.empty() || value[0] != '/') {
      return gpufrac::InvalidArgumentError("plugstack.conf argument \"" + arg +
                                           "\" is not NAME=/absolute/path");
    }
    if (key == "state_dir") {
      g_config.state_dir = value;
    } else if (key == "limiter") {
      g_config.limiter = value;
    } else if (key == "nvml") {
      g_config.nvml = value;
    } else {
      return gpufrac::InvalidArgumentError(
          "unknown plugstack.conf argument \"" + key +
          "\" (known: state_dir, limiter, nvml, shard_memory, gres, extern_gpus)");
    }
  }
  return gpufrac::OkStatus();
}

Status RegisterOptions(spank_t sp) {
  const auto& specs = slurm::StepOptionSpecs();
  g_option_names.clear();
  g_option_placeholders.clear();
  g_option_help.clear();
  g_option_table.clear();
  for (const slurm::StepOptionSpec& spec : specs) {
    g_option_names.emplace_back(spec.name);
    g_option_placeholders.emplace_back(spec.placeholder);
    g_option_help.emplace_back(std::string(spec.help) + " (gpufrac)");
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    g_option_table.push_back({g_option_names[i].data(), g_option_placeholders[i].data(),
                              g_option_help[i].data(), 1, static_cast<int>(i), OnOption});
  }
  for (spank_option& option : g_option_table) {
    spank_err_t err = spank_option_register(sp, &option);
    if (err != ESPANK_SUCCESS) {
      return gpufrac::InternalError(std::string("cannot register --") + option.name + ": " +
                                    spank_strerror(err));
    }
  }
  return gpufrac::OkStatus();
}

std::optional<std::string> GetEnv(spank_t sp, const char* name) {
  char buf[4096];
  if (spank_getenv(sp, name, buf, sizeof(buf)) != ESPANK_SUCCESS) return std::nullopt;
  return std::string(buf);
}

// Slurm writes the job's GPUs for its batch and interactive steps and the step's for the others;
// the other variable is whatever the user's environment held, so it is never read.
const char* GpusVariable(uint32_t step) {
  return step == kBatchStep || step == kInteractiveStep ? "SLURM_JOB_GPUS" : "SLURM_STEP_GPUS";
}

bool HasGpus(spank_t sp, uint32_t step) {
  std::optional<std::string> listed = GetEnv(sp, GpusVariable(step));
  return listed && !listed->empty();
}

// The GPUs Slurm gave this step, as NVML knows them (global indices: SLURM_STEP_GPUS, which
// Slurm sets for gpu and shard GRES alike, whatever ConstrainDevices does to
// CUDA_VISIBLE_DEVICES).
StatusOr<std::vector<gpufrac::gpu::DeviceInfo>> StepGpus(spank_t sp, uint32_t step) {
  std::optional<std::string> listed = GetEnv(sp, GpusVariable(step));
  if (!listed || listed->empty()) {
    return gpufrac::FailedPreconditionError(
        "the step has no GPU from Slurm: ask for shards (--gres=shard:N) or a GPU "
        "(--gres=gpu:1) with --gpu-memory/--gpu-fraction");
  }
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<unsigned> indices, slurm::ParseGpuIndices(*listed));
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<gpufrac::gpu::DeviceInfo> devices,
                           g_config.nvml.empty() ? gpufrac::gpu::ListDevices()
                                                 : gpufrac::gpu::ListDevices(g_config.nvml));
  std::vector<gpufrac::gpu::DeviceInfo> out;
  for (unsigned index : indices) {
    bool found = false;
    for (const gpufrac::gpu::DeviceInfo& device : devices) {
      if (device.index == index) {
        out.push_back(device);
        found = true;
      }
    }
    if (!found) {
      return gpufrac::FailedPreconditionError("Slurm gave the step GPU " + std::to_string(index) +
                                              ", which NVML does not list on this node");
    }
  }
  return out;
}

// In slurmstepd, as root, before the tasks start: the job's limit file and budgets, for the step's
// `request`, or without one (no gpufrac option) for what Slurm booked it, shards or MPS units: no
// step holds part of a GPU without a limit.
Status BeginStep(spank_t sp, std::optional<gpufrac::GpuRequest> request) {
  uint32_t job = 0, step = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
    return gpufrac::InternalError("cannot read the step's job, step and user from Slurm");
  }
  if (step == kExternStep || step == kPendingStep) return gpufrac::OkStatus();
  const bool asked = request.has_value();
  // Without options, a step without GPUs (a CPU job submitted from inside a shard job keeps its
  // SLURM_SHARDS_ON_NODE) has nothing to hold, and the variables, which its user may have
  // exported, are not read.
  if (!request && !HasGpus(sp, step)) return gpufrac::OkStatus();
  // What the job booked on the GPU, as Slurm set it for this step (SLURM_SHARDS_ON_NODE and
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE are Slurm's in every step on shards or MPS units).
  const std::optional<std::string> shards = GetEnv(sp, "SLURM_SHARDS_ON_NODE");
  const std::optional<std::string> percentage = GetEnv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  // Without options, whole GPUs are the step's own.
  if (!request && !shards && !percentage) return gpufrac::OkStatus();
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<gpufrac::gpu::DeviceInfo> gpus, StepGpus(sp, step));
  GPUFRAC_ASSIGN_OR_RETURN(
      slurm::Booking booking,
      slurm::BookingFromEnvironment(shards, percentage, g_config.gres, g_config.shard_bytes, gpus));
  if (!request && booking.kind == slurm::Booking::Kind::kWholeGpus) return gpufrac::OkStatus();
  // Shards and MPS units say how much of one GPU the scheduler booked, not how it split them
  // between GPUs: a limit per GPU would be a guess.
  if (booking.kind != slurm::Booking::Kind::kWholeGpus && gpus.size() > 1) {
    return gpufrac::FailedPreconditionError(
        std::string("the step's ") +
        (booking.kind == slurm::Booking::Kind::kShards ? "shards" : "MPS units") + " are on " +
        std::to_string(gpus.size()) + " GPUs; gpufrac limits a share of one GPU");
  }
  if (!request) {
    GPUFRAC_ASSIGN_OR_RETURN(request, slurm::BookedRequest(booking, g_config.shard_bytes, gpus));
  }
  GPUFRAC_ASSIGN_OR_RETURN(std::vector<gpufrac::launch::LimitedGpu> limits,
                           slurm::StepLimits(*request, gpus));
  // No more than the job booked.
  GPUFRAC_RETURN_IF_ERROR(slurm::CheckWithinBooking(booking, g_config.shard_bytes, limits, gpus));
  g_request = request;
  g_booking = booking;
  GPUFRAC_ASSIGN_OR_RETURN(slurm::NodeState state,
                           slurm::NodeState::Open(g_config.state_dir, slurm::ThisSlurmNode()));
  GPUFRAC_ASSIGN_OR_RETURN(
      std::string text, gpufrac::launch::LimitFileText(slurm::NodeState::WorkloadName(job), limits,
                                                       {.budget_dir = state.JobBudgetDir(job),
                                                        .arbiter_dir = state.budgets().path()}));
  std::optional<gpufrac::launch::WorkloadBudgets::Owner> owner;
  if (uid != geteuid()) owner = gpufrac::launch::WorkloadBudgets::Owner{uid, gid};
  GPUFRAC_ASSIGN_OR_RETURN(
      slurm::BegunStep begun,
      state.BeginStep(job, step, gpufrac::proc::CurrentProcess(), text, limits, owner,
                      /*join_running=*/!asked));
  g_limit_file = begun.limit_file;
  // For the administrator (slurmd's log): what this node cannot keep from the job's user.
  if (!begun.warning.empty()) slurm_error("gpufrac: job %u: %s", job, begun.warning.c_str());
  g_step_recorded = true;
  g_job = job;
  g_step = step;
  for (const gpufrac::gpu::DeviceInfo& gpu : gpus) g_step_uuids.push_back(gpu.uuid);
  slurm_info("gpufrac: job %u step %u: limits in %s", job, step, g_limit_file.c_str());
  return gpufrac::OkStatus();
}

// In the extern step's slurmstepd, as root, once its cgroups are made: no NVIDIA device node for
// the ssh sessions pam_slurm_adopt puts there, which no limiter is preloaded into.
Status FenceExternStep(spank_t sp) {
  uint32_t job = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
    return gpufrac::InternalError("cannot read the extern step's job from Slurm");
  }
  GPUFRAC_ASSIGN_OR_RETURN(
      slurm::ExternFence fence,
      slurm::FenceExternStep(job, slurm::ThisSlurmNode(), slurm::CgroupMounts(),
                             slurm::NvidiaDeviceMajors(), std::chrono::seconds(10)));
  if (fence.hierarchies == 0) {
    // For the administrator: what this node cannot keep from the job's ssh sessions.
    slurm_error(
        "gpufrac: job %u: the extern step has no cgroup v1 devices hierarchy (ConstrainDevices "
        "under cgroup/v1); ssh sessions adopted into it can open the job's GPUs without a limit",
        job);
  } else {
    slurm_info("gpufrac: job %u: no GPU in the extern step (%d processes holding one ended)", job,
               fence.ended);
  }
  return gpufrac::OkStatus();
}

// In each task, as its user, just before exec: the limiter and its limit file.
Status SetTaskEnvironment(spank_t sp) {
  std::vector<std::string> base;
  if (std::optional<std::string> preload = GetEnv(sp, "LD_PRELOAD")) {
    base.push_back("LD_PRELOAD=" + *preload);
  }
  for (const std::string& entry :
       gpufrac::launch::WithWorkloadEnvironment(base, {.limiter_path = g_config.limiter,
                                                      .limit_file = g_limit_file,
                                                      .visible_uuids = g_step_uuids,
                                                      .extra = {}})) {
    size_t eq = entry.find('=');
    std::string name = entry.substr(0, eq), value = entry.substr(eq + 1);
    if (spank_setenv(sp, name.c_str(), value.c_str(), 1) != ESPANK_SUCCESS) {
      return gpufrac::InternalError("cannot set " + name + " for the task");
    }
  }
  // Under Slurm's mps GRES, MPS caps the step's SMs: at its compute share, never above the
  // percentage Slurm set from the units the job booked (the request may lower it, not raise it).
  if (g_booking.kind == slurm::Booking::Kind::kMpsPercent) {
    std::optional<unsigned> percent = slurm::MpsThreadPercentage(*g_request);
    if (percent && *percent < g_booking.count) {
      spank_setenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(*percent).c_str(), 1);
    }
  }
  return gpufrac::OkStatus();
}

template <typename F>
int Guarded(const char* where, F&& body) {
  try {
    Status status = body();
    if (status.ok()) return 0;
    slurm_error("gpufrac: %s", status.message().c_str());
  } catch (const std::exception& e) {
    slurm_error("gpufrac: %s: %s", where, e.what());
  } catch (...) {
    slurm_error("gpufrac: %s failed", where);
  }
  return -1;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int slurm_spank_init(spank_t sp, int argc, char** argv) {
  return Guarded("init", [&]() -> Status {
    GPUFRAC_RETURN_IF_ERROR(ParseArguments(argc, argv));
    spank_context_t context = spank_context();
    if (context == S_CTX_LOCAL || context == S_CTX_ALLOCATOR || context == S_CTX_REMOTE) {
      return RegisterOptions(sp);
    }
    return gpufrac::OkStatus();
  });
}

__attribute__((visibility("default"))) int slurm_spank_init_post_opt(spank_t sp, int, char**) {
  return Guarded("options", [&]() -> Status {
    if (spank_remote(sp) != 1) {  // srun, sbatch, salloc: refuse a bad request now.
      return g_options.empty() ? gpufrac::OkStatus() : slurm::ParseStepOptions(g_options).status();
    }
    // slurmstepd: the step's request, or without options what it booked.
    std::optional<gpufrac::GpuRequest> request;
    Status begun = gpufrac::OkStatus();
    if (!g_options.empty()) {
      StatusOr<gpufrac::GpuRequest> parsed = slurm::ParseStepOptions(g_options);
      if (parsed.ok()) request = *parsed;
      begun = parsed.status();
    }
    if (begun.ok()) begun = BeginStep(sp, request);
    if (!begun.ok()) {
      g_step_error = begun.message();
      slurm_error("gpufrac: %s", g_step_error.c_str());
    }
    return gpufrac::OkStatus();
  });
}

__attribute__((visibility("default"))) int slurm_spank_task_init(spank_t sp, int, char**) {
  if (!g_step_error.empty()) {
    // The task's stderr is the user's: one line saying why, and the task does not run.
    std::fprintf(stderr, "gpufrac: %s\n", g_step_error.c_str());
    return -1;
  }
  if (g_limit_file.empty()) return 0;
  return Guarded("task", [&] { return SetTaskEnvironment(sp); });
}

__attribute__((visibility("default"))) int slurm_spank_task_post_fork(spank_t sp, int, char**) {
  uint32_t step = 0;
  if (spank_context() != S_CTX_REMOTE || g_config.extern_gpus ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS || step != kExternStep) {
    return 0;
  }
  return Guarded("extern step", [&] { return FenceExternStep(sp); });
}

__attribute__((visibility("default"))) int slurm_spank_exit(spank_t, int, char**) {
  if (!g_step_recorded || spank_context() != S_CTX_REMOTE) return 0;
  return Guarded("exit", [&]() -> Status {
    GPUFRAC_ASSIGN_OR_RETURN(slurm::NodeState state,
                             slurm::NodeState::Open(g_config.state_dir, slurm::ThisSlurmNode()));
    g_step_recorded = false;
    return state.EndStep(g_job, g_step, gpufrac::proc::CurrentProcess());
  });
}

__attribute__((visibility("default"))) int slurm_spank_job_epilog(spank_t sp, int argc,
                                                                  char** argv) {
  return Guarded("epilog", [&]() -> Status {
    // slurmstepd's epilog calls no slurm_spank_init first: plugstack.conf's arguments (state_dir)
    // come here.
    GPUFRAC_RETURN_IF_ERROR(ParseArguments(argc, argv));
    uint32_t job = 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) return gpufrac::OkStatus();
    if (access(g_config.state_dir.c_str(), F_OK) != 0) return gpufrac::OkStatus();
    GPUFRAC_ASSIGN_OR_RETURN(slurm::NodeState state,
                             slurm::NodeState::Open(g_config.state_dir, slurm::ThisSlurmNode()));
    // A process left (its slurmstepd killed) is ended first; one that outlives that keeps the
    // job's share and fails the epilog, so that Slurm drains the node rather than book the GPU
    // memory it holds again.
    return state.EndJob(job);
  });
}

}  // extern "C"
