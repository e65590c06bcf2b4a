// The node's shareable GPUs (those not in MIG mode) as the queue scheduler places them: grouped
// by model into one placement node each, smallest GPU memory first (bit order is the preference
// order), and the words that name them in messages: why a request can never run here.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"
#include "machine/node_gpu.h"
#include "placement/cluster.h"
#include "placement/host_gpus.h"

namespace gpufrac::node {

class ModelGroups {
 public:
  // At most placement::kMaxModels groups.
  static constexpr int kMaxGroups = placement::kMaxModels;

  // Sorts `gpus` by index and groups them. Fails on a duplicate index, more than kMaxGroups
  // models, or more than placement::kMaxGpusPerNode GPUs of one model.
  static StatusOr<ModelGroups> Create(std::vector<machine::NodeGpu> gpus);

  // By index order; a GPU's position in this list is how the scheduler refers to it.
  const std::vector<machine::NodeGpu>& gpus() const { return gpus_; }
  const std::vector<placement::GpuGroup>& groups() const { return groups_; }
  int group_of(int pos) const { return group_of_[pos]; }
  int slot_of(int pos) const { return slot_of_[pos]; }
  // The position of the GPU with NVML index `index`, or -1.
  int PositionOf(int index) const;
  // One placement node per group (node g is group g), with host CPU and memory that never limit.
  StatusOr<placement::Cluster> MakeCluster() const;

  // "H100-80GB", or "a GPU of unknown model".
  std::string ModelName(int group) const;
  // "2 H100-80GB and 1 A30-24GB": the GPUs of the groups in `mask`, in index order.
  std::string ModelSummary(uint64_t mask) const;
  // "0, 3": the indexes of the GPUs `set` of group `group`.
  std::string GpuList(int group, placement::GpuSet set) const;

  // The groups that may take `request`: of its model, and able to share a GPU unless it asks for
  // whole GPUs. kInvalidArgument naming the models here when there are none.
  StatusOr<uint64_t> AllowedGroups(const GpuRequest& request) const;
  // Why no group of `allowed` holds `request` (always an error): more GPUs than a model has,
  // more memory than the largest GPU, too little to hold the CUDA context.
  Status WhyNoGroupHolds(const GpuRequest& request, uint64_t allowed) const;

 private:
  std::vector<machine::NodeGpu> gpus_;
  std::vector<placement::GpuGroup> groups_;
  std::vector<int> group_of_, slot_of_;  // By position.
  std::unordered_map<int, int> position_of_index_;
  placement::ModelNames names_;  // Each group's model_id is its model's id here.
};

}  // namespace gpufrac::node
