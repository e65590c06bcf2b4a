// The "typical workload" FGD measures fragmentation against: the most frequent kinds of request,
// each with its popularity. A kind is (CPU, GPU count, GPU share, allowed models); host and GPU
// memory are not part of it.
#pragma once

#include <vector>

#include "placement/request.h"

namespace gpufrac::placement {

struct WorkloadClass {
  Request request;    // A representative request (memory fields zero).
  double popularity;  // Share of the typical workload; all classes sum to 1.
};

class TypicalWorkload {
 public:
  TypicalWorkload() = default;

  // Counts requests by kind, takes kinds from the most frequent down until they cover
  // `coverage` of all requests (the kind that crosses the line is kept), and renormalises their
  // shares to sum to 1. Equal counts are ordered by larger CPU, then GPU share, GPU count and
  // model set first, so the result does not depend on the input order.
  static TypicalWorkload FromRequests(const std::vector<Request>& requests, double coverage = 0.95);

  const std::vector<WorkloadClass>& classes() const { return classes_; }

 private:
  std::vector<WorkloadClass> classes_;
};

}  // namespace gpufrac::placement
