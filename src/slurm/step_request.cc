// The step's options into a request and per-GPU limits (step_request.h).
#include "slurm/step_request.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "common/compute_share.h"
#include "common/text.h"
#include "common/units.h"
#include "gpu/catalogue.h"
#include "launch/grant_limits.h"
#include "placement/gpu_share.h"

namespace gpufrac::slurm {
namespace {

// The grammar's fields the plugin offers: the two shares of a GPU and the compute pair. Whole
// GPUs and MIG are Slurm's own (--gpus, its MIG GRES).
struct Offered {
  std::string_view name;
  std::string StepOptions::*text;
};
constexpr Offered kOffered[] = {
    {"gpu-memory", &StepOptions::gpu_memory},
    {"gpu-fraction", &StepOptions::gpu_fraction},
    {"gpu-compute", &StepOptions::gpu_compute},
    {"gpu-compute-limit", &StepOptions::gpu_compute_limit},
};

// A user's value is echoed in errors, which must stay one line (and not spoof log lines).
Status CheckPrintable(std::string_view name, const std::string& value) {
  for (unsigned char c : value) {
    // Sizes and fractions are ASCII: anything else (control characters, C1 bytes a terminal
    // takes for escapes) is refused rather than echoed.
    if (c < 0x20 || c >= 0x7f) {
      return InvalidArgumentError("--" + std::string(name) +
                                  ": the value holds a character that is not printable ASCII");
    }
  }
  return OkStatus();
}

}  // namespace

bool StepOptions::empty() const {
  return gpu_memory.empty() && gpu_fraction.empty() && gpu_compute.empty() &&
         gpu_compute_limit.empty();
}

const std::vector<StepOptionSpec>& StepOptionSpecs() {
  static const std::vector<StepOptionSpec> specs = [] {
    std::vector<StepOptionSpec> out;
    for (const Offered& offered : kOffered) {
      const GpuRequestField* field = FindGpuRequestField(offered.name);
      if (field == nullptr) continue;  // The grammar lost a field: nothing to offer.
      out.push_back({field->name, field->placeholder, field->help, offered.text});
    }
    return out;
  }();
  return specs;
}

Status CheckStepOption(std::string_view name, const std::string& value) {
  const GpuRequestField* field = FindGpuRequestField(name);
  if (field == nullptr) return InvalidArgumentError("gpufrac has no option --" + std::string(name));
  GPUFRAC_RETURN_IF_ERROR(CheckPrintable(name, value));
  GpuRequest scratch;
  return field->parse(value, &scratch);
}

StatusOr<GpuRequest> ParseStepOptions(const StepOptions& options) {
  for (const Offered& offered : kOffered) {
    GPUFRAC_RETURN_IF_ERROR(CheckPrintable(offered.name, options.*offered.text));
  }
  GpuRequestText text;
  text.gpu_memory = options.gpu_memory;
  text.gpu_fraction = options.gpu_fraction;
  text.gpu_compute = options.gpu_compute;
  text.gpu_compute_limit = options.gpu_compute_limit;
  // The grammar's own message names every amount the CLI offers (--gpus, --mig-profile); the
  // plugin has these two only.
  if (text.gpu_memory.empty() && text.gpu_fraction.empty()) {
    return InvalidArgumentError(
        "--gpu-compute needs the step's share of GPU memory too: add --gpu-memory SIZE or "
        "--gpu-fraction F");
  }
  if (!text.gpu_memory.empty() && !text.gpu_fraction.empty()) {
    return InvalidArgumentError("give one of --gpu-memory SIZE and --gpu-fraction F, not both");
  }
  return ParseGpuRequest(text);
}

StatusOr<std::vector<unsigned>> ParseGpuIndices(std::string_view text) {
  std::vector<unsigned> out;
  const std::string_view whole = text;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    unsigned value = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value > 1023) {
      return InvalidArgumentError("not a list of GPU indices: \"" + Printable(whole) + "\"");
    }
    if (std::find(out.begin(), out.end(), value) == out.end()) out.push_back(value);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) {
      return InvalidArgumentError("not a list of GPU indices: \"" + Printable(whole) + "\"");
    }
  }
  if (out.empty()) return InvalidArgumentError("no GPU indices");
  return out;
}

StatusOr<std::vector<launch::LimitedGpu>> StepLimits(const GpuRequest& request,
                                                     const std::vector<gpu::DeviceInfo>& gpus) {
  if (request.kind != GpuRequest::Kind::kMemory && request.kind != GpuRequest::Kind::kFraction) {
    return InvalidArgumentError("gpufrac's Slurm options share a GPU by memory or fraction only");
  }
  // The step's grants, one per GPU, and what a CUDA context takes on each.
  std::vector<launch::GpuGrant> grants;
  std::map<int, uint64_t> contexts;
  for (const gpu::DeviceInfo& device : gpus) {
    const uint64_t context = gpu::ContextChargeBytes(device.model);
    contexts[static_cast<int>(device.index)] = context;
    GPUFRAC_ASSIGN_OR_RETURN(placement::OneGpuLimits limits,
                             placement::LimitsOnOneGpu(
                                 request, device.memory_total, context,
                                 "GPU " + std::to_string(device.index) + " (" + device.name + ")"));
    // Slurm booked the memory's share of the GPU (its shards or MPS units), and nothing books
    // time: a step's compute request may be less than that share, never more (more would take
    // its neighbours' time), and is refused rather than cut unseen. Its limit, the idle time it
    // may use, stays as asked.
    if (request.compute_milli && *request.compute_milli > limits.share_milli) {
      return InvalidArgumentError("--gpu-compute " + FormatMilli(*request.compute_milli) +
                                  " is more than the share of GPU " + std::to_string(device.index) +
                                  " (" + device.name + ") its memory books, " +
                                  FormatMilli(limits.share_milli) + ": ask for at most " +
                                  FormatMilli(limits.share_milli) + ", or for more memory");
    }
    grants.push_back({.index = static_cast<int>(device.index),
                      .uuid = device.uuid,
                      .milli = limits.share_milli,
                      .memory_bytes = limits.memory_bytes,
                      .compute = limits.compute});
  }
  // Under Slurm's mps GRES, Slurm sets the MPS client's variables itself (spank_plugin.cc): the
  // limiter's share of the work is the same on every GPU.
  GPUFRAC_ASSIGN_OR_RETURN(launch::GrantLimits limits,
                           launch::LimitsOfGrants(
                               grants, [&contexts](int index) { return contexts.at(index); },
                               [](int) { return false; }, "the step"));
  return std::move(limits.gpus);
}

std::optional<unsigned> MpsThreadPercentage(const GpuRequest& request) {
  const std::optional<uint32_t> milli =
      request.compute_limit_milli ? request.compute_limit_milli : request.compute_milli;
  if (!milli) return std::nullopt;
  return gpufrac::MpsThreadPercentage(*milli);
}

}  // namespace gpufrac::slurm
