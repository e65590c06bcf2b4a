// What Slurm booked for a step on its GPU, read from what Slurm itself set in the step's
// environment, and whether the step's gpufrac limits fit in it. A step may ask any limit with its
// own --gpu-memory; only the booking keeps its neighbours on the GPU whole, so a limit past it
// is refused.
//
// Slurm writes these variables for every step that holds shards or MPS units, over whatever the
// user exported (the user may still export the other one): SLURM_SHARDS_ON_NODE, the step's shards
// on the node (the plugin refuses shards on several GPUs, so all on its one GPU), and under the
// `mps` GRES CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, the step's units as a percentage of its GPU's. A
// user's own value reaches only a step without them (one on whole GPUs: on Slurm 22.05 a whole-GPU
// job keeps an exported SLURM_SHARDS_ON_NODE), where it can lower what the step may take, never
// raise it. With neither, the step holds whole GPUs and may use them whole.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "gpu/devices.h"
#include "launch/limit_file.h"

namespace gpufrac::slurm {

struct Booking {
  enum class Kind { kWholeGpus, kShards, kMpsPercent };
  Kind kind = Kind::kWholeGpus;
  uint32_t count = 0;  // kShards: shards on the step's GPU; kMpsPercent: percent of it (1..100).
};

// The GRES this node's GPUs are shared by, as plugstack.conf's gres= names it: only its variable
// is read. kEither (not given) reads both.
enum class SharingGres { kEither, kShard, kMps };
// "shard" or "mps"; kInvalidArgument, one line, otherwise.
StatusOr<SharingGres> ParseSharingGres(const std::string& text);

// The booking from the step's SLURM_SHARDS_ON_NODE and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (nullopt:
// not set), the one `gres` does not name ignored. When both are read, the smaller booking on the
// step's `gpus` wins: a user may export either variable, but cannot remove the one Slurm wrote
// (shards when shard_bytes is 0: the step is then refused, nothing to check shards against).
// kInvalidArgument for a value Slurm would not write.
StatusOr<Booking> BookingFromEnvironment(const std::optional<std::string>& shards_on_node,
                                         const std::optional<std::string>& mps_percentage,
                                         SharingGres gres = SharingGres::kEither,
                                         uint64_t shard_bytes = 0,
                                         const std::vector<gpu::DeviceInfo>& gpus = {});

// Whether each of `limits` (the step's, on `gpus`, in the same order) is within `booking`: for
// shards, at most count × `shard_bytes` (the memory one shard stands for, plugstack.conf's
// shard_memory=; 0 when not given, which refuses any shard step: nothing to check it against);
// for MPS units, at most their percentage of the GPU's memory. kFailedPrecondition, one line
// saying what to ask for instead, otherwise.
Status CheckWithinBooking(const Booking& booking, uint64_t shard_bytes,
                          const std::vector<launch::LimitedGpu>& limits,
                          const std::vector<gpu::DeviceInfo>& gpus);

// What a step that gave none of gpufrac's options is held to on `gpus` (NVML's view of its GPUs):
// all that Slurm booked for it, its shards times `shard_bytes` (at most the GPU's memory), or
// under the `mps` GRES its percentage of the GPU's memory; nullopt for whole GPUs, which are the
// step's own. A step holding shards is never left without a limit: without `shard_bytes` it is
// refused (kFailedPrecondition, saying what the administrator must add).
StatusOr<std::optional<GpuRequest>> BookedRequest(const Booking& booking, uint64_t shard_bytes,
                                                  const std::vector<gpu::DeviceInfo>& gpus);

}  // namespace gpufrac::slurm
