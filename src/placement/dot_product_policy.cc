// dotprod (Tetris-style alignment, as configured in the FGD paper): prefers the node whose free
// (CPU, total GPU share) vector has the smallest dot product with the request's, both scaled by
// the reference node. Score = floor(100 * (1 - dot / 2)). GPUs: best fit.
#include "placement/baseline_scale.h"
#include "placement/fit.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class DotProductPolicy : public Policy {
 public:
  std::string_view name() const override { return "dotprod"; }

  double Score(const Node& n, const Request& r) override {
    double dot = (static_cast<double>(n.cpu_free) / kReferenceCpuMilli) *
                     (static_cast<double>(r.cpu_milli) / kReferenceCpuMilli) +
                 (static_cast<double>(n.FreeGpuMilli()) / kReferenceGpuMilli) *
                     (static_cast<double>(r.TotalGpuMilli()) / kReferenceGpuMilli);
    return static_cast<double>(static_cast<int64_t>(kMaxScore * (1 - dot / 2)));
  }

  GpuSet ChooseGpus(const Node& n, const Request& r) override { return TightestGpus(n, r); }
};

}  // namespace

std::unique_ptr<Policy> NewDotProductPolicy() { return std::make_unique<DotProductPolicy>(); }

}  // namespace gpufrac::placement
