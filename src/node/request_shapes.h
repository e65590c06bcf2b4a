// The queue scheduler's cache of request shapes: the distinct requests of pending jobs (jobs with
// equal requests share one), each translated once onto every GPU group when first seen, so that
// a scheduling pass over 10,000 queued jobs does no translation at all.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/gpu_request.h"
#include "placement/host_gpus.h"
#include "placement/request.h"

namespace gpufrac::node {

// How a request runs on the GPUs of one group; ok is false when it cannot run there at all.
struct Translation {
  bool ok = false;
  placement::Request request;  // Per GPU: share, memory limit; the count.
  uint64_t total_milli = 0;    // What it counts against its queue's quota.
};

// `request` on group `group` (placement::RequestOnGroup, with its quota cost).
Translation TranslateOnGroup(const GpuRequest& request, const placement::GpuGroup& group);

struct RequestShape {
  GpuRequest request;
  std::vector<Translation> on;  // By group.
  uint64_t valid = 0;           // Groups it can run on (bit g).
  // Groups where it did not fit in pass failed_pass. Capacity only shrinks during a pass, so a
  // later job with the same request need not look again.
  uint64_t failed_pass = 0;
  uint64_t failed_groups = 0;

  // What it counts as in the policy's workload mix: its request on the first (smallest) group
  // that can hold it; nullopt when none can.
  std::optional<placement::Request> MixKey() const;

 private:
  friend class RequestShapes;
  size_t refs_ = 0;
};

class RequestShapes {
 public:
  // `groups` (at most 64) must outlive this and not change.
  explicit RequestShapes(const std::vector<placement::GpuGroup>* groups) : groups_(groups) {}

  // The shape of `request`, translated on first use; each Acquire needs one Release. The pointer
  // stays valid until its last Release.
  RequestShape* Acquire(const GpuRequest& request);
  void Release(RequestShape* shape);
  size_t size() const { return shapes_.size(); }

 private:
  struct Hash {
    size_t operator()(const GpuRequest& r) const;
  };
  const std::vector<placement::GpuGroup>* groups_;
  std::unordered_map<GpuRequest, RequestShape, Hash> shapes_;
};

}  // namespace gpufrac::node
