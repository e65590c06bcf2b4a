// Parsing and printing of GPU requests, on top of the size and share parsers in units.h.
#include "common/gpu_request.h"

#include <cctype>
#include <charconv>

#include "common/text.h"
#include "common/units.h"

namespace gpufrac {
namespace {

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// "<slices>g.<memory>gb" with 1..8 compute slices, optionally "+me" (a media-extension slice).
bool ValidMigProfile(std::string_view p) {
  if (p.size() > 4 && p.substr(p.size() - 3) == "+me") p.remove_suffix(3);
  size_t g = p.find("g.");
  if (g == std::string_view::npos || p.size() < g + 5 || p.substr(p.size() - 2) != "gb") {
    return false;
  }
  std::string_view slices = p.substr(0, g), memory = p.substr(g + 2, p.size() - g - 4);
  return AllDigits(slices) && slices.size() == 1 && slices[0] >= '1' && slices[0] <= '8' &&
         AllDigits(memory) && memory.size() <= 4 && memory[0] != '0';
}

bool ValidModelName(std::string_view m) {
  if (m.empty() || m.size() > 64) return false;
  for (char c : m) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

StatusOr<GpuRequest> ParseGpuRequest(const GpuRequestText& t) {
  int given =
      !t.gpu_memory.empty() + !t.gpu_fraction.empty() + !t.gpus.empty() + !t.mig_profile.empty();
  if (given != 1) {
    return InvalidArgumentError(
        "give exactly one of --gpu-memory SIZE, --gpu-fraction F, --gpus N or --mig-profile NAME");
  }
  GpuRequest r;
  if (!t.gpu_memory.empty()) {
    StatusOr<uint64_t> size = ParseSize(t.gpu_memory);
    if (!size.ok()) return InvalidArgumentError("--gpu-memory: " + size.status().message());
    r.kind = GpuRequest::Kind::kMemory;
    r.memory_bytes = *size;
  } else if (!t.gpu_fraction.empty()) {
    StatusOr<double> share = ParseFraction(t.gpu_fraction, /*allow_one=*/true);
    if (!share.ok()) return InvalidArgumentError("--gpu-fraction: " + share.status().message());
    r.kind = GpuRequest::Kind::kFraction;
    r.fraction_milli = FractionToMilli(*share);
    if (r.fraction_milli >= kMilliPerGpu) {
      return InvalidArgumentError("--gpu-fraction " + t.gpu_fraction +
                                  " is a whole GPU; write --gpus 1");
    }
  } else if (!t.gpus.empty()) {
    uint32_t n = 0;
    const char* end = t.gpus.data() + t.gpus.size();
    auto [ptr, ec] = std::from_chars(t.gpus.data(), end, n);
    if (ec != std::errc() || ptr != end || n < 1 || n > kMaxWholeGpus) {
      return InvalidArgumentError("--gpus is \"" + t.gpus +
                                  "\"; expected a whole number from 1 to " +
                                  std::to_string(kMaxWholeGpus) +
                                  " (for part of a GPU, use --gpu-fraction or --gpu-memory)");
    }
    r.kind = GpuRequest::Kind::kWholeGpus;
    r.gpus = n;
  } else {
    std::string profile = AsciiLower(t.mig_profile);
    if (!ValidMigProfile(profile)) {
      return InvalidArgumentError("--mig-profile is \"" + t.mig_profile +
                                  "\"; expected a MIG profile such as 1g.10gb, 2g.20gb or "
                                  "1g.10gb+me");
    }
    r.kind = GpuRequest::Kind::kMigProfile;
    r.mig_profile = profile;
  }
  if (!t.gpu_model.empty()) {
    if (!ValidModelName(t.gpu_model)) {
      return InvalidArgumentError("--gpu-model is \"" + t.gpu_model +
                                  "\"; expected a model name such as A100-80GB or H100-80GB");
    }
    r.gpu_model = t.gpu_model;
  }
  return r;
}

std::string FormatGpuRequest(const GpuRequest& r) {
  std::string out;
  switch (r.kind) {
    case GpuRequest::Kind::kMemory: {
      // FormatSize rounds to two decimals; bytes are exact and still readable for round sizes.
      std::string pretty = FormatSize(r.memory_bytes);
      StatusOr<uint64_t> back = ParseSize(pretty);
      out = "--gpu-memory " + (back.ok() && *back == r.memory_bytes
                                   ? pretty.erase(pretty.find(' '), 1)
                                   : std::to_string(r.memory_bytes));
      break;
    }
    case GpuRequest::Kind::kFraction:
      out = "--gpu-fraction " + FormatMilli(r.fraction_milli);
      break;
    case GpuRequest::Kind::kWholeGpus:
      out = "--gpus " + std::to_string(r.gpus);
      break;
    case GpuRequest::Kind::kMigProfile:
      out = "--mig-profile " + r.mig_profile;
      break;
  }
  if (!r.gpu_model.empty()) out += " --gpu-model " + r.gpu_model;
  return out;
}

}  // namespace gpufrac
