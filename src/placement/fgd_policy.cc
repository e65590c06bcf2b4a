// fgd (Fragmentation Gradient Descent, Weng et al., ATC 2023): places a request where it adds the
// least fragmentation, as measured against the typical workload (fragmentation.h). A node's score
// is floor(100 * sigmoid(reduction / 1000)), the reduction being fragmentation before minus after,
// in GPU thousandths. For a shared GPU every fitting GPU is tried and the best (lowest index
// among equal scores) is both the node's score and the GPU chosen; whole GPUs are the
// lowest-numbered free ones.
#include "placement/fit.h"
#include "placement/fragmentation.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class FgdPolicy : public ChoicePolicy {
 public:
  explicit FgdPolicy(const TypicalWorkload* typical) : typical_(typical) {}
  std::string_view name() const override { return "fgd"; }

 private:
  Choice Best(const Node& n, const Request& r) const override {
    FragmentationView view(n, *typical_);
    if (!r.SharesGpu()) {
      GpuSet gpus = LowestGpus(GpusThatFit(n, r), static_cast<int>(r.gpu_count));
      return {FgdScore(view.Current() - view.After(r.cpu_milli, gpus, r.gpu_milli)), gpus};
    }
    Choice best{-1, 0};
    GpuSet fit = GpusThatFit(n, r);
    for (int g = 0; g < n.spec.gpu_count; ++g) {
      if (!(fit >> g & 1)) continue;
      // GPUs with the same free share give the same score; the lowest index already won.
      bool seen = false;
      for (int h = 0; h < g && !seen; ++h) {
        seen = (fit >> h & 1) && n.gpu_free_milli[h] == n.gpu_free_milli[g];
      }
      if (seen) continue;
      GpuSet gpu = GpuSet{1} << g;
      double score = FgdScore(view.Current() - view.After(r.cpu_milli, gpu, r.gpu_milli));
      if (score > best.score) best = {score, gpu};
    }
    return best;
  }

  const TypicalWorkload* typical_;
};

}  // namespace

std::unique_ptr<Policy> NewFgdPolicy(const TypicalWorkload* typical) {
  return std::make_unique<FgdPolicy>(typical);
}

}  // namespace gpufrac::placement
