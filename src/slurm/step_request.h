// What a Slurm job step asked gpufrac for (its SPANK options, as text) and what that means on the
// GPUs Slurm gave it: the per-GPU limits of the step's limit file. Pure: no Slurm, no NVML, so
// the SPANK plugin and the tests share it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "gpu/devices.h"
#include "launch/limit_file.h"

namespace gpufrac::slurm {

// The plugin's options as srun, sbatch and salloc received them; "" when not given.
struct StepOptions {
  std::string gpu_memory = {};
  std::string gpu_fraction = {};
  std::string gpu_compute = {};
  std::string gpu_compute_limit = {};

  bool empty() const;
};

// The options the plugin adds, by name (as in --gpu-memory), each with its placeholder and
// help: read from the request grammar's field table, so that they cannot drift from it.
struct StepOptionSpec {
  std::string_view name;
  std::string_view placeholder;
  std::string_view help;
  std::string StepOptions::*text;
};
const std::vector<StepOptionSpec>& StepOptionSpecs();

// Checks one option's value alone (as the SPANK callback does when the user writes it):
// kInvalidArgument with one line naming the option otherwise.
Status CheckStepOption(std::string_view name, const std::string& value);

// The request the options make: exactly one of --gpu-memory and --gpu-fraction, optionally a
// compute share. Errors are one line naming the option (the grammar's own messages).
StatusOr<GpuRequest> ParseStepOptions(const StepOptions& options);

// The GPU indices Slurm lists in SLURM_STEP_GPUS or CUDA_VISIBLE_DEVICES ("0,3"); in order,
// without repeats. kInvalidArgument for anything else (Slurm writes only this form).
StatusOr<std::vector<unsigned>> ParseGpuIndices(std::string_view text);

// The limit on each of the step's GPUs (`gpus`, NVML's view of the GPUs Slurm gave it): the
// request's memory (or its fraction of the GPU's memory) and, on a share of the GPU, its
// compute share (by default the memory's share) and limit (by default all the idle time).
// kInvalidArgument, naming the GPU, when the request does not fit a GPU, cannot hold the CUDA
// context there, or asks a compute share above its memory's share (what Slurm booked).
StatusOr<std::vector<launch::LimitedGpu>> StepLimits(const GpuRequest& request,
                                                     const std::vector<gpu::DeviceInfo>& gpus);

// The percentage of the GPU's SMs for CUDA_MPS_ACTIVE_THREAD_PERCENTAGE under Slurm's `mps`
// GRES: the step's compute limit when it asked for one, else its compute share, rounded up to a
// whole percent (1..100); nullopt when the request has no compute share.
std::optional<unsigned> MpsThreadPercentage(const GpuRequest& request);

}  // namespace gpufrac::slurm
