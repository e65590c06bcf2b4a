#include "node/queue_usage.h"

#include <algorithm>
#include <cmath>

#include "common/units.h"

namespace gpufrac::node {
namespace {

std::string GpuCountText(uint64_t milli) {
  return FormatMilli(static_cast<uint32_t>(milli)) + (milli == kMilliPerGpu ? " GPU" : " GPUs");
}

}  // namespace

QueueUsage::QueueUsage(double share, size_t gpu_count) {
  uint64_t capacity = uint64_t{kMilliPerGpu} * gpu_count;
  quota_ = static_cast<uint64_t>(
      std::llround(std::clamp(share, 0.0, 1.0) * static_cast<double>(capacity)));
  limited_ = quota_ < capacity;
}

void QueueUsage::Start(uint64_t milli) {
  in_use_ += milli;
  ++running_;
}

void QueueUsage::End(uint64_t milli) {
  in_use_ -= milli;
  --running_;
}

bool QueueUsage::Allows(uint64_t pass, uint64_t milli) const {
  return !limited_ || in_use_ + Kept(pass) + milli <= quota_;
}

void QueueUsage::Keep(uint64_t pass, uint64_t milli) {
  if (kept_pass_ != pass) {
    kept_pass_ = pass;
    kept_ = 0;
  }
  kept_ += milli;
}

void QueueUsage::Block(uint64_t pass, int64_t id) {
  blocked_pass_ = pass;
  blocked_by_ = id;
}

std::string QueueUsage::StateText(uint64_t pass) const {
  std::string out = "at its quota (" + FormatMilli(static_cast<uint32_t>(in_use_)) + " of " +
                    GpuCountText(quota_) + " in use";
  if (Kept(pass) > 0) {
    out += ", " + FormatMilli(static_cast<uint32_t>(Kept(pass))) +
           " kept for its jobs waiting for GPUs";
  }
  return out + ")";
}

Status QueueUsage::CheckHolds(const QueueSpec& spec, size_t gpu_count, uint64_t least,
                              const std::string& need) {
  if (least <= QueueUsage(spec.quota, gpu_count).quota_) return OkStatus();
  return InvalidArgumentError(
      "queue " + spec.name + "'s quota (" + FormatMilli(FractionToMilli(spec.quota)) + " of " +
      GpuCountText(uint64_t{kMilliPerGpu} * gpu_count) + ") is less than " + need);
}

}  // namespace gpufrac::node
