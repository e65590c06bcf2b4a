// gpu-packing: fills partly used GPUs first, then free GPUs on partly used nodes, then idle
// nodes (smaller ones first). Tiers, higher is better:
//   only partly used GPUs taken: max(100 - r / 10, 50), r = sum of floor(free / 10) over them;
//   k > 0 completely free GPUs taken on a node in use: max(50 - k, 33);
//   an idle node with F GPUs: max(33 - F, F).
// GPUs are taken tightest first (least free share that fits). CPU-only requests score 0.
#include <algorithm>

#include "placement/baseline_scale.h"
#include "placement/fit.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class GpuPackingPolicy : public Policy {
 public:
  std::string_view name() const override { return "gpu-packing"; }

  double Score(const Node& n, const Request& r) override {
    if (r.gpu_count == 0) return 0;
    int64_t whole_free = n.WholeFreeGpus();
    if (whole_free == n.spec.gpu_count) {
      return static_cast<double>(std::max(kMaxScore / 3 - whole_free, whole_free));
    }
    int64_t taken_whole = 0, r_sum = 0;
    GpuSet taken = TightestGpus(n, r);
    for (int g = 0; g < n.spec.gpu_count; ++g) {
      if (!(taken >> g & 1)) continue;
      taken_whole += n.gpu_free_milli[g] == kMilli;
      r_sum += n.gpu_free_milli[g] * kMaxScore / kMilli;
    }
    if (taken_whole > 0)
      return static_cast<double>(std::max(kMaxScore / 2 - taken_whole, kMaxScore / 3));
    return static_cast<double>(std::max(kMaxScore - r_sum / 10, kMaxScore / 2));
  }

  GpuSet ChooseGpus(const Node& n, const Request& r) override { return TightestGpus(n, r); }
};

}  // namespace

std::unique_ptr<Policy> NewGpuPackingPolicy() { return std::make_unique<GpuPackingPolicy>(); }

}  // namespace gpufrac::placement
