// The queue file (node/queue_config.h): any text either parses or is one error naming the file;
// nothing yaml-cpp throws escapes. A file that parses has valid, distinct queue names, quotas in
// (0, 1] and requests that print as flags reading back to them, and written out again as YAML
// (the request as its fields, the quota to the last bit) it parses to the same queues.
#include <cstdio>

#include "fuzz_support.h"
#include "node/queue_config.h"

namespace gpufrac::node {
namespace {

constexpr char kSource[] = "queues.yaml";

// The queues as a queue file: each default request as the map of its fields.
std::string ToYaml(const QueueConfig& config) {
  std::string out = "version: 1\nqueues:\n";
  for (const QueueSpec& q : config.queues) {
    out += "  - name: \"" + q.name + "\"\n    default: {";
    const GpuRequestText text = fuzz::FlagsToText(FormatGpuRequest(q.default_request));
    bool first = true;
    for (const GpuRequestField& field : GpuRequestFields()) {
      const std::string& value = text.*field.text;
      if (value.empty()) continue;
      out += (first ? "" : ", ") + std::string(field.name) + ": \"" + value + "\"";
      first = false;
    }
    char quota[64];
    std::snprintf(quota, sizeof(quota), "%.17g", q.quota);
    out += "}\n    quota: " + std::string(quota) + "\n";
  }
  return out;
}

}  // namespace
}  // namespace gpufrac::node

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufrac::node;
  using gpufrac::StatusOr;
  const std::string text(gpufrac::fuzz::AsText(data, size));
  StatusOr<QueueConfig> config = ParseQueueConfig(text, kSource);
  if (!config.ok()) {
    FUZZ_CHECK(config.status().message().rfind(kSource, 0) == 0, config.status().message());
    return 0;
  }
  FUZZ_CHECK(!config->queues.empty(), text);
  for (const QueueSpec& q : config->queues) {
    FUZZ_CHECK(q.quota > 0 && q.quota <= 1, text);
    gpufrac::fuzz::CheckRequestRoundTrip(q.default_request);
  }
  const std::string yaml = ToYaml(*config);
  StatusOr<QueueConfig> back = ParseQueueConfig(yaml, kSource);
  FUZZ_CHECK(back.ok(), yaml + back.status().message());
  FUZZ_CHECK(back->queues.size() == config->queues.size(), yaml);
  for (size_t i = 0; i < back->queues.size(); ++i) {
    const QueueSpec& a = config->queues[i];
    const QueueSpec& b = back->queues[i];
    FUZZ_CHECK(a.name == b.name && a.default_request == b.default_request && a.quota == b.quota,
               yaml);
  }
  return 0;
}
