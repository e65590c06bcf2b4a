// The node service's queues, as configured in a YAML file, parsed and validated in one place
// before anything uses them (like mig-parted's versioned spec). Example:
//
//   version: 1
//   queues:                       # highest priority first
//     - name: interactive
//       default: {gpu-fraction: 0.25}   # the request of a job that gives none
//       quota: 0.5                # at most half of the node's GPU capacity in use at once
//     - name: batch
//       default: {gpus: 1}
//       compute: strict           # its jobs never take more GPU time than they ask for
//
// A queue's quota is a share of the node's GPU capacity (1 = no limit, the default). Its compute
// policy (common/compute_share.h) is the node's unless it says otherwise.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "common/compute_share.h"

namespace gpufrac::node {

struct QueueSpec {
  std::string name;            // 1..63 of [a-z0-9_-], unique.
  GpuRequest default_request;  // For jobs submitted without a request.
  double quota = 1;            // In (0, 1].
  std::optional<ComputePolicy> compute;  // Unset: the node's (--gpu-compute-policy).
};

struct QueueConfig {
  std::vector<QueueSpec> queues;  // Highest priority first; at least one.
};

// Parses YAML text; `source` names it in errors ("FILE:LINE: message", one line).
StatusOr<QueueConfig> ParseQueueConfig(const std::string& yaml, const std::string& source);

// Reads and parses a file.
StatusOr<QueueConfig> LoadQueueConfig(const std::string& path);

// One queue, "default", taking one whole GPU by default, with no quota: what a service started
// without a queue file uses.
QueueConfig DefaultQueueConfig();

}  // namespace gpufrac::node
