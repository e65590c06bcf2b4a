// A step's limits against what Slurm booked for it (booked_share.h).
#include "slurm/booked_share.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include "common/text.h"
#include "common/units.h"

namespace gpufrac::slurm {
namespace {

std::optional<uint32_t> Count(const std::string& text) {
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string Plural(uint32_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// The memory `count` shards of `shard_bytes` stand for.
uint64_t BytesOfShards(uint32_t count, uint64_t shard_bytes) {
  return shard_bytes != 0 && count > UINT64_MAX / shard_bytes ? UINT64_MAX : count * shard_bytes;
}

}  // namespace

StatusOr<SharingGres> ParseSharingGres(const std::string& text) {
  if (text == "shard") return SharingGres::kShard;
  if (text == "mps") return SharingGres::kMps;
  return InvalidArgumentError("plugstack.conf argument gres=" + Printable(text) +
                              ": name the GRES this node's GPUs are shared by, shard or mps");
}

StatusOr<Booking> BookingFromEnvironment(const std::optional<std::string>& shards_on_node,
                                         const std::optional<std::string>& mps_percentage,
                                         SharingGres gres, uint64_t shard_bytes,
                                         const std::vector<gpu::DeviceInfo>& gpus) {
  std::optional<Booking> shards, mps;
  if (shards_on_node && gres != SharingGres::kMps) {
    std::optional<uint32_t> count = Count(*shards_on_node);
    if (!count) {
      return InvalidArgumentError("SLURM_SHARDS_ON_NODE is not a shard count: \"" +
                                  Printable(*shards_on_node) + "\"");
    }
    shards = Booking{.kind = Booking::Kind::kShards, .count = *count};
  }
  if (mps_percentage && gres != SharingGres::kShard) {
    std::optional<uint32_t> percent = Count(*mps_percentage);
    if (!percent) {
      return InvalidArgumentError("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is not a percentage: \"" +
                                  Printable(*mps_percentage) + "\"");
    }
    // Slurm 22.05 writes more than 100 when a node declares shards too (docs/slurm.md): the
    // whole GPU at most.
    mps = Booking{.kind = Booking::Kind::kMpsPercent, .count = std::min<uint32_t>(*percent, 100)};
  }
  if (shards && mps && shard_bytes != 0) {
    // The smaller on the step's smallest GPU.
    uint64_t memory = UINT64_MAX;
    for (const gpu::DeviceInfo& gpu : gpus) memory = std::min(memory, gpu.memory_total);
    if (gpus.empty()) memory = 0;
    const uint64_t shard_memory = std::min(BytesOfShards(shards->count, shard_bytes), memory);
    if (BytesOfShare(memory, mps->count * 10) < shard_memory) return *mps;
  }
  if (shards) return *shards;
  if (mps) return *mps;
  return Booking{};
}

StatusOr<std::optional<GpuRequest>> BookedRequest(const Booking& booking, uint64_t shard_bytes,
                                                  const std::vector<gpu::DeviceInfo>& gpus) {
  switch (booking.kind) {
    case Booking::Kind::kWholeGpus:
      return std::optional<GpuRequest>();
    case Booking::Kind::kMpsPercent:
      return std::optional<GpuRequest>(GpuRequest::Fraction(booking.count * 10));
    case Booking::Kind::kShards:
      break;
  }
  if (shard_bytes == 0) {
    return FailedPreconditionError(
        "the step holds shards, but plugstack.conf gives libgpufrac_spank.so no shard_memory= "
        "(the memory one shard stands for), so gpufrac cannot hold it to what it booked: the "
        "administrator must add it (docs/slurm.md)");
  }
  uint64_t bytes = BytesOfShards(booking.count, shard_bytes);
  for (const gpu::DeviceInfo& gpu : gpus) bytes = std::min(bytes, gpu.memory_total);
  return std::optional<GpuRequest>(GpuRequest::Memory(bytes));
}

Status CheckWithinBooking(const Booking& booking, uint64_t shard_bytes,
                          const std::vector<launch::LimitedGpu>& limits,
                          const std::vector<gpu::DeviceInfo>& gpus) {
  if (booking.kind == Booking::Kind::kWholeGpus) return OkStatus();
  if (booking.kind == Booking::Kind::kShards && shard_bytes == 0) {
    return FailedPreconditionError(
        "the step holds shards, but plugstack.conf gives libgpufrac_spank.so no shard_memory= "
        "to check its memory against: the administrator must add it (docs/slurm.md)");
  }
  for (size_t i = 0; i < limits.size() && i < gpus.size(); ++i) {
    const gpu::DeviceInfo& gpu = gpus[i];
    uint64_t booked = 0;
    std::string what, more;
    if (booking.kind == Booking::Kind::kShards) {
      booked = BytesOfShards(booking.count, shard_bytes);
      what = Plural(booking.count, "shard", "shards") + " of " + FormatSize(shard_bytes);
      more = "--gres=shard:N";
    } else {
      booked = BytesOfShare(gpu.memory_total, booking.count * 10);
      what = std::to_string(booking.count) + "% of the GPU's MPS units";
      more = "--gres=mps:N";
    }
    if (limits[i].limit_bytes <= booked) continue;
    return FailedPreconditionError(
        "the step's memory limit on GPU " + std::to_string(gpu.index) + ", " +
        FormatSize(limits[i].limit_bytes) + ", is more than its " + what + " hold (" +
        FormatSize(booked) + "): ask for at most " + FormatSize(booked) +
        ", or book more for the job (--gpu-memory or --gpu-fraction on sbatch/salloc, or " + more +
        ")");
  }
  return OkStatus();
}

}  // namespace gpufrac::slurm
