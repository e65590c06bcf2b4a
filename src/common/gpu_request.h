// The request grammar every entry point shares (gpufrac exec, the node service's API and command
// line, its queue file, Kubernetes): what one workload asks of the GPUs. How many GPUs and, on
// each, exactly one of a memory amount, a share of the GPU's memory, the whole GPU or a MIG
// profile, optionally restricted to one GPU model. Parsed and printed here only, so "4G" means
// the same everywhere, and its fields are one table (GpuRequestFields) from which the command
// line's flags, the API's JSON keys and the queue file's YAML keys are all read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpufrac {

inline constexpr uint32_t kMaxWholeGpus = 64;

struct GpuRequest {
  enum class Kind { kMemory, kFraction, kWholeGpus, kMigProfile };
  Kind kind = Kind::kMemory;
  uint32_t gpus = 1;            // How many GPUs, 1..kMaxWholeGpus; the amount below is per GPU.
  uint64_t memory_bytes = 0;    // kMemory: > 0.
  uint32_t fraction_milli = 0;  // kFraction: share of one GPU's memory, 1..999 thousandths.
  std::string mig_profile;      // kMigProfile: canonical lower case, e.g. "2g.20gb", "1g.10gb+me".
  std::string gpu_model;        // Optional (empty = any), e.g. "A100-80GB"; checked by its user.
  // A share of a GPU's time, in thousandths (1..1000), for a request that shares a GPU (kMemory
  // or kFraction); whole GPUs and MIG instances have their own compute. compute_milli is what it
  // is guaranteed when others compete (not given: the same share as its memory);
  // compute_limit_milli the most it may take when others are idle (not given: the node's or
  // queue's default, 1000 unless strict). When both are given, request <= limit.
  std::optional<uint32_t> compute_milli;
  std::optional<uint32_t> compute_limit_milli;

  // Named constructors; `gpus` is the number of GPUs, each with that amount.
  static GpuRequest Memory(uint64_t bytes, uint32_t gpus = 1);
  static GpuRequest Fraction(uint32_t milli, uint32_t gpus = 1);
  static GpuRequest Whole(uint32_t gpus);
  static GpuRequest Mig(std::string profile);
  // The same request, only on GPUs of `model`.
  GpuRequest OnModel(std::string model) const;

  friend bool operator==(const GpuRequest&, const GpuRequest&) = default;
};

// The fields as the user wrote them; an empty string means "not given".
struct GpuRequestText {
  std::string gpu_memory = {};    // --gpu-memory SIZE (units as ParseSize)
  std::string gpu_fraction = {};  // --gpu-fraction F, 0 < F < 1 (or a percentage)
  std::string gpus = {};          // --gpus N
  std::string mig_profile = {};   // --mig-profile NAME
  std::string gpu_model = {};     // --gpu-model NAME
  std::string gpu_compute = {};        // --gpu-compute F, 0 < F < 1 (or a percentage)
  std::string gpu_compute_limit = {};  // --gpu-compute-limit F, likewise

  bool empty() const;
};

// One field of the grammar. Its name is the command line's flag (--name), the key in the node
// API's "request" object and in a queue's "default" map.
struct GpuRequestField {
  std::string_view name;         // "gpu-memory"
  std::string_view placeholder;  // "SIZE", as in "--gpu-memory SIZE"
  std::string_view help;         // One line for --help.
  std::string GpuRequestText::*text;
  // One of the amounts, of which a request gives exactly one (the others, such as gpu-model,
  // qualify it).
  bool amount;
  // Reads the field's text into `request`; kInvalidArgument with one line naming the flag.
  Status (*parse)(const std::string& text, GpuRequest* request);
};

// Every field, in the order help and errors list them.
std::span<const GpuRequestField> GpuRequestFields();
// The field called `name`; nullptr if there is none.
const GpuRequestField* FindGpuRequestField(std::string_view name);
// "gpu-memory, gpu-fraction, gpus, mig-profile, gpu-model": for "allowed: ..." errors.
std::string GpuRequestFieldNames();

// Checks that exactly one amount is given and parses every field. Errors are kInvalidArgument
// with one line naming the flag and what to write instead (e.g. "--gpu-fraction 1 is a whole GPU;
// write --gpus 1").
StatusOr<GpuRequest> ParseGpuRequest(const GpuRequestText& text);

// The request as flags that ParseGpuRequest reads back to the same request, e.g.
// "--gpu-memory 4GiB --gpu-model A100-80GB", "--gpu-fraction 0.25", "--gpus 2".
std::string FormatGpuRequest(const GpuRequest& request);

}  // namespace gpufrac
