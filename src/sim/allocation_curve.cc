// Bucketing of allocation events by rounded arrived percent.
#include "sim/allocation_curve.h"

#include <cmath>

namespace gpufrac::sim {

AllocationCurve::AllocationCurve(int max_percent)
    : sum_(max_percent + 1, 0.0), count_(max_percent + 1, 0) {}

void AllocationCurve::Record(uint64_t arrived_milli, uint64_t allocated_milli,
                             uint64_t capacity_milli) {
  double arrived = 100.0 * static_cast<double>(arrived_milli) / static_cast<double>(capacity_milli);
  double allocated =
      100.0 * static_cast<double>(allocated_milli) / static_cast<double>(capacity_milli);
  double bucket = std::nearbyint(arrived);  // The default rounding mode rounds half to even.
  if (bucket < 0 || bucket >= static_cast<double>(sum_.size())) return;
  size_t k = static_cast<size_t>(bucket);
  sum_[k] += std::round(allocated * 100) / 100;
  ++count_[k];
}

std::optional<double> AllocationCurve::AllocatedAt(int percent) const {
  if (percent < 0 || percent > max_percent()) return std::nullopt;
  double sum = sum_[percent];
  uint64_t count = count_[percent];
  if (count == 0) {
    for (int k : {percent - 1, percent + 1}) {
      if (k < 0 || k > max_percent()) continue;
      sum += sum_[k];
      count += count_[k];
    }
  }
  if (count == 0) return std::nullopt;
  return sum / static_cast<double>(count);
}

}  // namespace gpufrac::sim
