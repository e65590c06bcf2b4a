// Readers for Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023, "openb"): the node list and
// a pod list, validated line by line. Every error is one line naming the file and line number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "placement/cluster.h"
#include "placement/request.h"

namespace gpufrac::sim {

// One pod of a pod list.
struct TracePod {
  std::string name;
  placement::Request request;
  // Seconds since the trace's start; both 0 in files without the time columns
  // (has_times false). deletion_time >= creation_time.
  int64_t creation_time = 0;
  int64_t deletion_time = 0;
};

struct NodeList {
  placement::ModelNames models;
  std::vector<placement::NodeSpec> nodes;
};

struct PodList {
  std::vector<TracePod> pods;
  bool has_times = false;  // creation_time and deletion_time columns were present.
};

// Reads `sn,cpu_milli,memory_mib,gpu,model` (columns found by header name; others ignored).
StatusOr<NodeList> ReadOpenbNodes(const std::string& path);

// Reads `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...,creation_time,deletion_time]`.
// gpu_spec models must be models of `nodes`.
StatusOr<PodList> ReadOpenbPods(const std::string& path, const placement::ModelNames& models);

}  // namespace gpufrac::sim
