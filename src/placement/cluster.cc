// Cluster state changes: applying and releasing placements, with the change log.
#include "placement/cluster.h"

#include <bit>
#include <cstdio>
#include <cstdlib>

#include "placement/fit.h"

namespace gpufrac::placement {

StatusOr<int> ModelNames::Intern(std::string_view name) {
  if (auto id = Find(name)) return *id;
  if (name.empty()) return InvalidArgumentError("a GPU model name is empty");
  if (size() >= kMaxModels) {
    return InvalidArgumentError("more than " + std::to_string(kMaxModels) +
                                " GPU models; merge model names");
  }
  names_.emplace_back(name);
  return size() - 1;
}

std::optional<int> ModelNames::Find(std::string_view name) const {
  for (int i = 0; i < size(); ++i) {
    if (names_[i] == name) return i;
  }
  return std::nullopt;
}

int Node::WholeFreeGpus() const {
  int n = 0;
  for (int g = 0; g < spec.gpu_count; ++g) n += gpu_free_milli[g] == kMilli;
  return n;
}

uint64_t Node::FreeGpuMilli() const {
  uint64_t sum = 0;
  for (int g = 0; g < spec.gpu_count; ++g) sum += gpu_free_milli[g];
  return sum;
}

StatusOr<Cluster> Cluster::Create(ModelNames models, std::vector<NodeSpec> specs) {
  Cluster c;
  c.models_ = std::move(models);
  c.nodes_.reserve(specs.size());
  for (NodeSpec& s : specs) {
    if (s.gpu_count < 0 || s.gpu_count > kMaxGpusPerNode) {
      return InvalidArgumentError("node " + s.name + " has " + std::to_string(s.gpu_count) +
                                  " GPUs; at most " + std::to_string(kMaxGpusPerNode) +
                                  " are supported");
    }
    if (s.gpu_count > 0 && (s.model < 0 || s.model >= c.models_.size())) {
      return InvalidArgumentError("node " + s.name + " has GPUs of no known model");
    }
    Node n;
    n.cpu_free = s.cpu_milli;
    n.memory_free = s.memory_bytes;
    for (int g = 0; g < s.gpu_count; ++g) {
      n.gpu_free_milli[g] = kMilli;
      n.gpu_free_memory[g] = s.gpu_memory_bytes;
    }
    c.gpu_milli_capacity_ += uint64_t{kMilli} * s.gpu_count;
    n.spec = std::move(s);
    c.nodes_.push_back(std::move(n));
  }
  return c;
}

void Cluster::Apply(const Placement& p, const Request& r) {
  Take(nodes_.at(p.node), p.gpus, r);
  gpu_milli_allocated_ += r.TotalGpuMilli();
  change_log_.push_back(p.node);
}

void Cluster::Release(const Placement& p, const Request& r) {
  Node& n = nodes_.at(p.node);
  bool ok = std::popcount(p.gpus) == static_cast<int>(r.gpu_count) &&
            n.cpu_free + r.cpu_milli <= n.spec.cpu_milli &&
            n.memory_free + r.memory_bytes <= n.spec.memory_bytes &&
            (r.gpu_count == 0 || n.gpu_workloads[GpuWorkloadKind(r)] > 0);
  for (int g = 0; ok && g < n.spec.gpu_count; ++g) {
    if (!(p.gpus >> g & 1)) continue;
    ok = n.gpu_free_milli[g] + r.gpu_milli <= kMilli &&
         (n.spec.gpu_memory_bytes == 0 ||
          n.gpu_free_memory[g] + r.gpu_memory_bytes <= n.spec.gpu_memory_bytes);
  }
  if (!ok) {
    std::fprintf(stderr, "gpufrac: internal error: release on node %s frees more than it has\n",
                 n.spec.name.c_str());
    std::abort();
  }
  n.cpu_free += r.cpu_milli;
  n.memory_free += r.memory_bytes;
  for (int g = 0; g < n.spec.gpu_count; ++g) {
    if (!(p.gpus >> g & 1)) continue;
    n.gpu_free_milli[g] += r.gpu_milli;
    if (n.spec.gpu_memory_bytes > 0) n.gpu_free_memory[g] += r.gpu_memory_bytes;
  }
  if (r.gpu_count > 0) --n.gpu_workloads[GpuWorkloadKind(r)];
  gpu_milli_allocated_ -= r.TotalGpuMilli();
  change_log_.push_back(p.node);
}

}  // namespace gpufrac::placement
