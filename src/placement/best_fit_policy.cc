// bestfit: the node left with the least free CPU and GPU share after placement, each weighted
// one half and scaled by the reference node: score = floor(100 * (1 - leftover)). (The paper's
// simulator then rescales scores to 0..100 between the lowest and highest; that keeps the same
// nodes on top, so it is not repeated here.) GPUs: best fit.
#include "placement/baseline_scale.h"
#include "placement/fit.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class BestFitPolicy : public Policy {
 public:
  std::string_view name() const override { return "bestfit"; }

  double Score(const Node& n, const Request& r) override {
    double cpu_left = static_cast<double>(n.cpu_free - r.cpu_milli) / kReferenceCpuMilli;
    double gpu_left =
        static_cast<double>(n.FreeGpuMilli() - r.TotalGpuMilli()) / kReferenceGpuMilli;
    double leftover = 0.5 * cpu_left + 0.5 * gpu_left;
    return static_cast<double>(static_cast<int64_t>((1 - leftover) * kMaxScore));
  }

  GpuSet ChooseGpus(const Node& n, const Request& r) override { return TightestGpus(n, r); }
};

}  // namespace

std::unique_ptr<Policy> NewBestFitPolicy() { return std::make_unique<BestFitPolicy>(); }

}  // namespace gpufrac::placement
