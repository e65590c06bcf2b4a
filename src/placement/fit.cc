// The fit rules.
#include "placement/fit.h"

#include <bit>
#include <cstdio>
#include <cstdlib>

namespace gpufrac::placement {

bool HostFits(const Node& n, const Request& r) {
  if (n.cpu_free < r.cpu_milli || n.memory_free < r.memory_bytes) return false;
  if (r.gpu_count == 0) return true;
  if (n.spec.gpu_count == 0) return false;
  return r.models == 0 || (r.models >> n.spec.model & 1);
}

GpuSet GpusThatFit(const Node& n, const Request& r) {
  GpuSet set = 0;
  bool memory_counts = n.spec.gpu_memory_bytes > 0 && r.gpu_memory_bytes > 0;
  for (int g = 0; g < n.spec.gpu_count; ++g) {
    if (n.gpu_free_milli[g] < r.gpu_milli) continue;
    if (memory_counts && n.gpu_free_memory[g] < r.gpu_memory_bytes) continue;
    set |= GpuSet{1} << g;
  }
  return set;
}

bool Fits(const Node& n, const Request& r) {
  if (!HostFits(n, r)) return false;
  return r.gpu_count == 0 || std::popcount(GpusThatFit(n, r)) >= static_cast<int>(r.gpu_count);
}

bool PlacementFits(const Node& n, const Request& r, GpuSet gpus) {
  if (!HostFits(n, r)) return false;
  if (std::popcount(gpus) != static_cast<int>(r.gpu_count)) return false;
  return (gpus & ~GpusThatFit(n, r)) == 0;
}

GpuSet TightestGpus(const Node& n, const Request& r) {
  GpuSet fit = GpusThatFit(n, r);
  GpuSet chosen = 0;
  for (uint32_t k = 0; k < r.gpu_count; ++k) {
    int best = -1;
    for (int g = 0; g < n.spec.gpu_count; ++g) {
      if (!(fit >> g & 1) || (chosen >> g & 1)) continue;
      if (best < 0 || n.gpu_free_milli[g] < n.gpu_free_milli[best]) best = g;
    }
    if (best < 0) return 0;
    chosen |= GpuSet{1} << best;
  }
  return chosen;
}

GpuSet LowestGpus(GpuSet set, int count) {
  GpuSet out = 0;
  for (; count > 0 && set != 0; --count) {
    GpuSet low = set & -set;
    out |= low;
    set &= set - 1;
  }
  return out;
}

void Withhold(Node& n, GpuSet gpus) {
  for (int s = 0; s < n.spec.gpu_count; ++s) {
    if (!(gpus >> s & 1)) continue;
    n.gpu_free_milli[s] = 0;
    n.gpu_free_memory[s] = 0;
  }
}

void Take(Node& n, GpuSet gpus, const Request& r) {
  if (!PlacementFits(n, r, gpus)) {
    std::fprintf(stderr, "gpufrac: internal error: placement on node %s does not fit\n",
                 n.spec.name.c_str());
    std::abort();
  }
  n.cpu_free -= r.cpu_milli;
  n.memory_free -= r.memory_bytes;
  for (int g = 0; g < n.spec.gpu_count; ++g) {
    if (!(gpus >> g & 1)) continue;
    n.gpu_free_milli[g] -= r.gpu_milli;
    if (n.spec.gpu_memory_bytes > 0) n.gpu_free_memory[g] -= r.gpu_memory_bytes;
  }
  if (r.gpu_count > 0) ++n.gpu_workloads[GpuWorkloadKind(r)];
}

}  // namespace gpufrac::placement
