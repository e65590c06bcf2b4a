// The request grammar every entry point shares (gpufrac exec, the node service's API and command
// line, Kubernetes annotations): what one workload asks of the GPUs. Exactly one of a memory
// amount, a share of one GPU's memory, a number of whole GPUs or a MIG profile, optionally
// restricted to one GPU model. Parsed and printed here only, so "4G" means the same everywhere.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpufrac {

struct GpuRequest {
  enum class Kind { kMemory, kFraction, kWholeGpus, kMigProfile };
  Kind kind = Kind::kMemory;
  uint64_t memory_bytes = 0;    // kMemory: > 0.
  uint32_t fraction_milli = 0;  // kFraction: share of one GPU's memory, 1..999 thousandths.
  uint32_t gpus = 0;            // kWholeGpus: 1..kMaxWholeGpus.
  std::string mig_profile;      // kMigProfile: canonical lower case, e.g. "2g.20gb", "1g.10gb+me".
  std::string gpu_model;        // Optional (empty = any), e.g. "A100-80GB"; checked by its user.

  friend bool operator==(const GpuRequest&, const GpuRequest&) = default;
};

inline constexpr uint32_t kMaxWholeGpus = 64;

// The flags as the user wrote them; an empty string means "not given".
struct GpuRequestText {
  std::string gpu_memory = {};    // --gpu-memory SIZE (units as ParseSize)
  std::string gpu_fraction = {};  // --gpu-fraction F, 0 < F < 1 (or a percentage)
  std::string gpus = {};          // --gpus N
  std::string mig_profile = {};   // --mig-profile NAME
  std::string gpu_model = {};     // --gpu-model NAME
};

// Checks that exactly one kind is given and parses it. Errors are kInvalidArgument with one line
// naming the flag and what to write instead (e.g. "--gpu-fraction 1 is a whole GPU; write
// --gpus 1").
StatusOr<GpuRequest> ParseGpuRequest(const GpuRequestText& text);

// The request as flags that ParseGpuRequest reads back to the same request, e.g.
// "--gpu-memory 4GiB --gpu-model A100-80GB", "--gpu-fraction 0.25", "--gpus 2".
std::string FormatGpuRequest(const GpuRequest& request);

}  // namespace gpufrac
