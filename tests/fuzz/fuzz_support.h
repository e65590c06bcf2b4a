// What the fuzz targets share: a check that stops the run (libFuzzer then saves the input as a
// crash), and the request grammar's promise that a request prints as flags that read back to it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/gpu_request.h"

// Aborts with the condition and `what` (a std::string) when `cond` is false.
#define FUZZ_CHECK(cond, what)                                                             \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: invariant failed: %s: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                             \
      std::abort();                                                                        \
    }                                                                                      \
  } while (false)

namespace gpufrac::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// FormatGpuRequest's output ("--gpu-memory 4GiB --gpu-model A100-80GB") read back the way the
// command line reads its flags: each "--name value" into that field (values have no spaces).
inline GpuRequestText FlagsToText(std::string_view flags) {
  GpuRequestText text;
  while (!flags.empty()) {
    const size_t name_end = flags.find(' ');
    FUZZ_CHECK(flags.substr(0, 2) == "--" && name_end != std::string_view::npos,
               std::string(flags));
    const GpuRequestField* field = FindGpuRequestField(flags.substr(2, name_end - 2));
    FUZZ_CHECK(field != nullptr, std::string(flags));
    flags.remove_prefix(name_end + 1);
    const size_t value_end = std::min(flags.find(' '), flags.size());
    text.*field->text = std::string(flags.substr(0, value_end));
    flags.remove_prefix(std::min(value_end + 1, flags.size()));
  }
  return text;
}

// A request some parser accepted prints as flags that parse back to the same request.
inline void CheckRequestRoundTrip(const GpuRequest& request) {
  const std::string flags = FormatGpuRequest(request);
  StatusOr<GpuRequest> back = ParseGpuRequest(FlagsToText(flags));
  FUZZ_CHECK(back.ok(), flags + ": " + back.status().message());
  FUZZ_CHECK(*back == request, flags + " reads back as " + FormatGpuRequest(*back));
}

}  // namespace gpufrac::fuzz
