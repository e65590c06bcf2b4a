// The request grammar (common/units.h, common/gpu_request.h): the input's lines are the request
// fields in the table's order (gpu-memory, gpu-fraction, gpus, mig-profile, gpu-model; an empty
// line is a field not given), and its first line is also read as a size and as a share.
// Invariants: a size prints (FormatSize) as text that reads back within its rounding and as
// digits that read back exactly; a share prints (FormatMilli) as text that reads back to the same
// thousandths; a request prints as flags that read back to it.
#include <vector>

#include "common/units.h"
#include "fuzz_support.h"

namespace gpufrac {
namespace {

void CheckSize(std::string_view text) {
  StatusOr<uint64_t> size = ParseSize(text);
  if (!size.ok()) return;
  const uint64_t bytes = *size;
  FUZZ_CHECK(bytes > 0, std::string(text));
  StatusOr<uint64_t> exact = ParseSize(std::to_string(bytes));
  FUZZ_CHECK(exact.ok() && *exact == bytes, std::to_string(bytes));
  // Two decimals of the largest unit reached: off by at most half a hundredth of that unit,
  // which is at most bytes / 200, and parsing floors to a whole byte.
  const std::string pretty = FormatSize(bytes);
  StatusOr<uint64_t> back = ParseSize(pretty);
  FUZZ_CHECK(back.ok(), pretty + ": " + back.status().message());
  const uint64_t diff = *back > bytes ? *back - bytes : bytes - *back;
  FUZZ_CHECK(diff <= bytes / 200 + 1, std::to_string(bytes) + " prints as " + pretty +
                                          " which reads as " + std::to_string(*back));
}

void CheckShare(std::string_view text, bool allow_one) {
  StatusOr<double> share = ParseFraction(text, allow_one);
  if (!share.ok()) return;
  const uint32_t milli = FractionToMilli(*share);
  FUZZ_CHECK(milli >= 1 && milli <= (allow_one ? kMilliPerGpu : kMilliPerGpu - 1),
             std::string(text) + " -> " + std::to_string(milli));
  const std::string printed = FormatMilli(milli);
  StatusOr<double> back = ParseFraction(printed, /*allow_one=*/true);
  FUZZ_CHECK(back.ok() && FractionToMilli(*back) == milli,
             std::to_string(milli) + " -> " + printed);
}

}  // namespace
}  // namespace gpufrac

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufrac;
  std::string_view text = fuzz::AsText(data, size);
  std::vector<std::string> lines;
  while (lines.size() < GpuRequestFields().size()) {
    const size_t nl = text.find('\n');
    lines.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }

  CheckSize(lines[0]);
  CheckShare(lines[0], /*allow_one=*/false);
  CheckShare(lines[0], /*allow_one=*/true);

  GpuRequestText fields;
  for (size_t i = 0; i < lines.size(); ++i) {
    const GpuRequestField& field = GpuRequestFields()[i];
    fields.*field.text = lines[i];
    // Each field's parser by itself, whatever the others say.
    GpuRequest alone;
    if (field.parse(lines[i], &alone).ok() && field.amount) fuzz::CheckRequestRoundTrip(alone);
  }
  StatusOr<GpuRequest> request = ParseGpuRequest(fields);
  if (request.ok()) fuzz::CheckRequestRoundTrip(*request);
  return 0;
}
