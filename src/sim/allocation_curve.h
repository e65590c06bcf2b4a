// The allocation curve of a run: allocated GPU share (% of capacity) against the GPU demand that
// has arrived so far (% of capacity), recorded after every pod, and read off at whole percents
// the way the FGD paper's analysis does: the value at k% is the mean of the allocation (rounded
// to 0.01) over all pods whose arrived demand rounds to k (half to even); when no pod does, the
// pods rounding to k-1..k+1 are used.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace gpufrac::sim {

class AllocationCurve {
 public:
  // Percents 0..max_percent are kept.
  explicit AllocationCurve(int max_percent = 130);

  // One event: arrived and allocated GPU thousandths against a capacity of `capacity_milli`.
  void Record(uint64_t arrived_milli, uint64_t allocated_milli, uint64_t capacity_milli);

  // Allocated % at arrived k%; nullopt when no pod arrived within k-1..k+1 (or k out of range).
  std::optional<double> AllocatedAt(int percent) const;

  int max_percent() const { return static_cast<int>(sum_.size()) - 1; }

 private:
  std::vector<double> sum_;
  std::vector<uint64_t> count_;
};

}  // namespace gpufrac::sim
