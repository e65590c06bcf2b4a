// The limit file (limiter/limit_config.h), as the limiter reads it inside a workload's process:
// any bytes either parse or are refused with a reason, and a file that parses formats back
// (FormatLimitConfig, what launchers write) to a file that fits the limiter's read buffer and
// parses to the same configuration.
#include <cstring>

#include "fuzz_support.h"
#include "limiter/limit_config.h"

namespace gpufrac::limiter {
namespace {

void CheckSame(const LimitConfig& a, const LimitConfig& b, const std::string& text) {
  FUZZ_CHECK(std::strcmp(a.workload, b.workload) == 0, text);
  FUZZ_CHECK(a.quiet == b.quiet && a.advisory == b.advisory, text);
  FUZZ_CHECK(std::strcmp(a.budget_dir, b.budget_dir) == 0, text);
  FUZZ_CHECK(a.gpu_count == b.gpu_count, text);
  for (int i = 0; i < a.gpu_count; ++i) {
    const GpuLimit& x = a.gpus[i];
    const GpuLimit& y = b.gpus[i];
    FUZZ_CHECK(std::strcmp(x.uuid, y.uuid) == 0, text);
    FUZZ_CHECK(std::memcmp(x.uuid_bytes, y.uuid_bytes, sizeof(x.uuid_bytes)) == 0, text);
    FUZZ_CHECK(x.limit_bytes == y.limit_bytes && x.context_bytes == y.context_bytes, text);
  }
}

}  // namespace
}  // namespace gpufrac::limiter

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufrac::limiter;
  static LimitConfig config, again;  // Large; the limiter keeps its own statically too.
  char err[256];
  if (!ParseLimitConfig(reinterpret_cast<const char*>(data), size, &config, err, sizeof(err))) {
    FUZZ_CHECK(err[0] != '\0' && std::strlen(err) < sizeof(err), "no reason given");
    return 0;
  }
  FUZZ_CHECK(
      config.workload[0] != '\0' && config.gpu_count > 0 && config.gpu_count <= kMaxLimitedGpus,
      "accepted without a workload or a gpu");
  char text[kMaxLimitFileBytes];
  const size_t n = FormatLimitConfig(config, text, sizeof(text));
  // LoadLimitFile refuses a file of kMaxLimitFileBytes or more.
  FUZZ_CHECK(n > 0 && n < kMaxLimitFileBytes, "does not format within the read buffer");
  const std::string formatted(text, n);
  FUZZ_CHECK(ParseLimitConfig(text, n, &again, err, sizeof(err)), formatted + ": " + err);
  CheckSame(config, again, formatted);
  return 0;
}
