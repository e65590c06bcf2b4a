// gpu-clustering: keeps GPU workloads of one kind (shared GPU, 1 GPU, 2 GPUs, ...) together.
// A node already running only this kind scores 75 more, this kind among others 50, no GPU
// workloads 25, only other kinds 0; plus up to 25 for how little GPU share is free (relative to
// the reference node). CPU-only requests score 0 everywhere. GPUs: best fit.
#include "placement/baseline_scale.h"
#include "placement/fit.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class GpuClusteringPolicy : public Policy {
 public:
  std::string_view name() const override { return "gpu-clustering"; }

  double Score(const Node& n, const Request& r) override {
    if (r.gpu_count == 0) return 0;
    constexpr int64_t kReference = static_cast<int64_t>(kReferenceGpuMilli);
    int64_t free = static_cast<int64_t>(n.FreeGpuMilli());
    int64_t score = kMaxScore / 4 * (kReference - free) / kReference;
    int kinds = 0;
    for (uint32_t count : n.gpu_workloads) kinds += count > 0;
    if (n.gpu_workloads[GpuWorkloadKind(r)] > 0) {
      score += kinds == 1 ? 75 : 50;
    } else if (kinds == 0) {
      score += 25;
    }
    return static_cast<double>(score);
  }

  GpuSet ChooseGpus(const Node& n, const Request& r) override { return TightestGpus(n, r); }
};

}  // namespace

std::unique_ptr<Policy> NewGpuClusteringPolicy() { return std::make_unique<GpuClusteringPolicy>(); }

}  // namespace gpufrac::placement
