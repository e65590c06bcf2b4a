// random: a uniformly random node among those the request fits, and a uniformly random GPU among
// those that fit on it (whole GPUs: the lowest-numbered free ones).
#include <bit>

#include "common/random.h"
#include "placement/fit.h"
#include "placement/policies.h"

namespace gpufrac::placement {
namespace {

class RandomPolicy : public Policy {
 public:
  explicit RandomPolicy(uint64_t seed) : random_(seed) {}
  std::string_view name() const override { return "random"; }
  bool volatile_scores() const override { return true; }

  // Independent uniform scores make the best node a uniform pick among the fitting ones.
  double Score(const Node&, const Request&) override { return random_.UniformDouble(); }

  GpuSet ChooseGpus(const Node& n, const Request& r) override {
    GpuSet fit = GpusThatFit(n, r);
    if (!r.SharesGpu()) return LowestGpus(fit, static_cast<int>(r.gpu_count));
    uint64_t pick = random_.Uniform(std::popcount(fit));
    for (; pick > 0; --pick) fit &= fit - 1;
    return fit & -fit;
  }

 private:
  Random random_;
};

}  // namespace

std::unique_ptr<Policy> NewRandomPolicy(uint64_t seed) {
  return std::make_unique<RandomPolicy>(seed);
}

}  // namespace gpufrac::placement
