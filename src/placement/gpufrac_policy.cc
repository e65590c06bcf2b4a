// gpufrac: gpufrac's own policy (the default). Like fgd it places a request where it adds the
// least fragmentation against the typical workload, but it compares the exact change instead of
// a rounded sigmoid of it, so that near-equal nodes are not left to chance.
#include <cmath>

#include "placement/fit.h"
#include "placement/fragmentation.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class GpufracPolicy : public Policy {
 public:
  explicit GpufracPolicy(const TypicalWorkload* typical) : typical_(typical) {}
  std::string_view name() const override { return "gpufrac"; }

  double Score(const Node& n, const Request& r) override { return Best(n, r).score; }
  GpuSet ChooseGpus(const Node& n, const Request& r) override { return Best(n, r).gpus; }

 private:
  struct Choice {
    double score;
    GpuSet gpus;
  };

  Choice Best(const Node& n, const Request& r) const {
    FragmentationView view(n, *typical_);
    if (!r.SharesGpu()) {
      GpuSet gpus = LowestGpus(GpusThatFit(n, r), static_cast<int>(r.gpu_count));
      return {view.Current() - view.After(r.cpu_milli, gpus, r.gpu_milli), gpus};
    }
    Choice best{-INFINITY, 0};
    GpuSet fit = GpusThatFit(n, r);
    for (int g = 0; g < n.spec.gpu_count; ++g) {
      if (!(fit >> g & 1)) continue;
      GpuSet gpu = GpuSet{1} << g;
      double score = view.Current() - view.After(r.cpu_milli, gpu, r.gpu_milli);
      if (score > best.score) best = {score, gpu};
    }
    return best;
  }

  const TypicalWorkload* typical_;
};

}  // namespace

std::unique_ptr<Policy> NewGpufracPolicy(const TypicalWorkload* typical) {
  return std::make_unique<GpufracPolicy>(typical);
}

}  // namespace gpufrac::placement
