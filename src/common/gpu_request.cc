// The request grammar's field table, and parsing and printing of requests, on top of the size and
// share parsers in units.h.
#include "common/gpu_request.h"

#include <array>
#include <cctype>
#include <charconv>
#include <utility>
#include <vector>

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

Status ParseMemoryField(const std::string& text, GpuRequest* r) {
  StatusOr<uint64_t> size = ParseSize(text);
  if (!size.ok()) return InvalidArgumentError("--gpu-memory: " + size.status().message());
  *r = GpuRequest::Memory(*size);
  return OkStatus();
}

Status ParseFractionField(const std::string& text, GpuRequest* r) {
  StatusOr<double> share = ParseFraction(text, /*allow_one=*/true);
  if (!share.ok()) return InvalidArgumentError("--gpu-fraction: " + share.status().message());
  uint32_t milli = FractionToMilli(*share);
  if (milli >= kMilliPerGpu) {
    return InvalidArgumentError("--gpu-fraction " + text + " is a whole GPU; write --gpus 1");
  }
  *r = GpuRequest::Fraction(milli);
  return OkStatus();
}

Status ParseGpusField(const std::string& text, GpuRequest* r) {
  uint32_t n = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || ptr != end || n < 1 || n > kMaxWholeGpus) {
    return InvalidArgumentError("--gpus is \"" + text + "\"; expected a whole number from 1 to " +
                                std::to_string(kMaxWholeGpus) +
                                " (for part of a GPU, use --gpu-fraction or --gpu-memory)");
  }
  *r = GpuRequest::Whole(n);
  return OkStatus();
}

Status ParseMigProfileField(const std::string& text, GpuRequest* r) {
  std::string profile = AsciiLower(text);
  if (!ValidMigProfile(profile)) {
    return InvalidArgumentError("--mig-profile is \"" + text +
                                "\"; expected a MIG profile such as 1g.10gb, 2g.20gb or "
                                "1g.10gb+me");
  }
  *r = GpuRequest::Mig(profile);
  return OkStatus();
}

Status ParseModelField(const std::string& text, GpuRequest* r) {
  if (!ValidModelName(text)) {
    return InvalidArgumentError("--gpu-model is \"" + text +
                                "\"; expected a model name such as A100-80GB or H100-80GB");
  }
  r->gpu_model = text;
  return OkStatus();
}

// A share of a GPU's time: 0 < F <= 1, at least one thousandth.
StatusOr<uint32_t> ParseComputeShare(const std::string& flag, const std::string& text) {
  StatusOr<double> share = ParseFraction(text, /*allow_one=*/true);
  if (!share.ok()) return InvalidArgumentError("--" + flag + ": " + share.status().message());
  return FractionToMilli(*share);
}

Status ParseComputeField(const std::string& text, GpuRequest* r) {
  GPUFRAC_ASSIGN_OR_RETURN(r->compute_milli, ParseComputeShare("gpu-compute", text));
  if (*r->compute_milli >= kMilliPerGpu) {
    return InvalidArgumentError("--gpu-compute " + text +
                                " guarantees all of the GPU's time: that is a whole GPU; write "
                                "--gpus 1");
  }
  return OkStatus();
}

Status ParseComputeLimitField(const std::string& text, GpuRequest* r) {
  GPUFRAC_ASSIGN_OR_RETURN(r->compute_limit_milli, ParseComputeShare("gpu-compute-limit", text));
  return OkStatus();
}

// What the fields say together: a compute share qualifies a shared GPU only, and its limit is
// not below its request.
Status CheckCompute(const GpuRequest& r) {
  if (!r.compute_milli && !r.compute_limit_milli) return OkStatus();
  const char* flag = r.compute_milli ? "--gpu-compute" : "--gpu-compute-limit";
  if (r.kind == GpuRequest::Kind::kWholeGpus) {
    return InvalidArgumentError(std::string(flag) +
                                " is for a share of a GPU (--gpu-memory or --gpu-fraction); "
                                "whole GPUs have all of their compute");
  }
  if (r.kind == GpuRequest::Kind::kMigProfile) {
    return InvalidArgumentError(std::string(flag) +
                                " is for a share of a GPU (--gpu-memory or --gpu-fraction); a "
                                "MIG instance has its own compute slices");
  }
  if (r.compute_milli && r.compute_limit_milli && *r.compute_limit_milli < *r.compute_milli) {
    return InvalidArgumentError("--gpu-compute-limit " + FormatMilli(*r.compute_limit_milli) +
                                " is below --gpu-compute " + FormatMilli(*r.compute_milli) +
                                "; the limit is the most it may take, at least what it is "
                                "guaranteed");
  }
  return OkStatus();
}

// The grammar. A new field is one row here (and its member in GpuRequestText).
constexpr std::array<GpuRequestField, 7> kFields = {{
    {"gpu-memory", "SIZE", "GPU memory, binary units: 4G, 4GiB, 1536Mi (the hard limit)",
     &GpuRequestText::gpu_memory, true, ParseMemoryField},
    {"gpu-fraction", "F", "A share of one GPU's memory, 0 < F < 1 (e.g. 0.25, or 25%)",
     &GpuRequestText::gpu_fraction, true, ParseFractionField},
    {"gpus", "N", "Whole GPUs, e.g. 2", &GpuRequestText::gpus, true, ParseGpusField},
    {"mig-profile", "NAME", "A MIG profile, e.g. 2g.20gb", &GpuRequestText::mig_profile, true,
     ParseMigProfileField},
    {"gpu-model", "NAME", "Only this GPU model, e.g. A100-80GB", &GpuRequestText::gpu_model, false,
     ParseModelField},
    {"gpu-compute", "F",
     "Share of the GPU's time guaranteed when others compete, 0 < F < 1 (default: the memory "
     "share)",
     &GpuRequestText::gpu_compute, false, ParseComputeField},
    {"gpu-compute-limit", "F",
     "Most of the GPU's time it may take when others are idle, 0 < F <= 1 (default 1, or its "
     "request where the queue is strict)",
     &GpuRequestText::gpu_compute_limit, false, ParseComputeLimitField},
}};

}  // namespace

GpuRequest GpuRequest::Memory(uint64_t bytes, uint32_t gpus) {
  GpuRequest r;
  r.kind = Kind::kMemory;
  r.gpus = gpus;
  r.memory_bytes = bytes;
  return r;
}

GpuRequest GpuRequest::Fraction(uint32_t milli, uint32_t gpus) {
  GpuRequest r;
  r.kind = Kind::kFraction;
  r.gpus = gpus;
  r.fraction_milli = milli;
  return r;
}

GpuRequest GpuRequest::Whole(uint32_t gpus) {
  GpuRequest r;
  r.kind = Kind::kWholeGpus;
  r.gpus = gpus;
  return r;
}

GpuRequest GpuRequest::Mig(std::string profile) {
  GpuRequest r;
  r.kind = Kind::kMigProfile;
  r.mig_profile = std::move(profile);
  return r;
}

GpuRequest GpuRequest::OnModel(std::string model) const {
  GpuRequest r = *this;
  r.gpu_model = std::move(model);
  return r;
}

bool GpuRequestText::empty() const {
  for (const GpuRequestField& f : kFields) {
    if (!(this->*f.text).empty()) return false;
  }
  return true;
}

std::span<const GpuRequestField> GpuRequestFields() { return kFields; }

const GpuRequestField* FindGpuRequestField(std::string_view name) {
  for (const GpuRequestField& f : kFields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string GpuRequestFieldNames() {
  std::string out;
  for (const GpuRequestField& f : kFields) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

StatusOr<GpuRequest> ParseGpuRequest(const GpuRequestText& t) {
  int given = 0;
  std::string amounts;  // "--gpu-memory SIZE, --gpu-fraction F, --gpus N or --mig-profile NAME"
  std::vector<const GpuRequestField*> listed;
  for (const GpuRequestField& f : kFields) {
    if (!f.amount) continue;
    given += !(t.*f.text).empty();
    listed.push_back(&f);
  }
  if (given != 1) {
    for (size_t i = 0; i < listed.size(); ++i) {
      if (i > 0) amounts += i + 1 == listed.size() ? " or " : ", ";
      amounts += "--" + std::string(listed[i]->name) + " " + std::string(listed[i]->placeholder);
    }
    return InvalidArgumentError("give exactly one of " + amounts);
  }
  GpuRequest r;
  // The amount first (it sets the kind), then what qualifies it.
  for (bool amount : {true, false}) {
    for (const GpuRequestField& f : kFields) {
      if (f.amount == amount && !(t.*f.text).empty())
        GPUFRAC_RETURN_IF_ERROR(f.parse(t.*f.text, &r));
    }
  }
  GPUFRAC_RETURN_IF_ERROR(CheckCompute(r));
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
  if (r.compute_milli) out += " --gpu-compute " + FormatMilli(*r.compute_milli);
  if (r.compute_limit_milli) out += " --gpu-compute-limit " + FormatMilli(*r.compute_limit_milli);
  return out;
}

}  // namespace gpufrac
