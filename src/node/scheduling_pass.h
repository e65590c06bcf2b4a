// One scheduling pass of the queue scheduler: each GPU group's placement node less the GPUs
// reserved in this pass (what later jobs may start on), which GPU is reserved for which job, and
// when the pass should stop looking. Reservations are what backfill rests on: a job that does
// not fit now reserves the GPUs it will get, and no job after it in the pass starts on them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "node/model_groups.h"
#include "node/request_shapes.h"
#include "placement/cluster.h"

namespace gpufrac::node {

class SchedulingPass {
 public:
  // `groups` and `cluster` (one node per group) must outlive this.
  SchedulingPass(const ModelGroups* groups, const placement::Cluster* cluster);

  // Starts a new pass: no GPU reserved. Passes are numbered from 1; 0 means none yet.
  void Begin();
  uint64_t number() const { return number_; }

  // Group g as later jobs of this pass see it: reserved GPUs have nothing free.
  const placement::Node& view(int g) const { return views_[g]; }
  // The cluster's group g changed (a job started there).
  void Refresh(int g);

  // Where job `id` of `shape`, which does not fit now, should wait: its previous reservation
  // (`previous_group`, `previous`) while none of those GPUs is reserved in this pass, else the
  // unreserved GPUs of one `eligible` group closest to holding it (most free share, then fewest
  // running jobs per `jobs_on`, by GPU position; smaller GPUs first among equals). Records it
  // and returns the group (-1: no group has enough unreserved GPUs) and GPUs.
  struct Reservation {
    int group = -1;
    placement::GpuSet gpus = 0;
  };
  Reservation Reserve(int64_t id, const RequestShape& shape, uint64_t eligible, int previous_group,
                      placement::GpuSet previous, const std::vector<std::vector<int64_t>>& jobs_on);
  // The job for which the GPU at position `pos` is reserved in the last pass.
  const std::optional<int64_t>& reserved_for(int pos) const { return reserved_for_[pos]; }
  // Job `id` is no longer pending: its GPUs are nobody's.
  void Forget(int64_t id);

  // Whether some unreserved GPU has free share (else nothing more can start in this pass).
  bool can_start() const { return open_ > 0; }
  // Whether the pass should go on to the next job: while some GPU is unreserved, and, once
  // nothing can start, until kFruitlessLimit jobs in a row got no reservation.
  bool KeepGoing() const;
  // A job was looked at; `progress`: it started or got a reservation.
  void Count(bool progress);

  // Once no unreserved GPU has free share, nothing more can start in a pass; it still goes on
  // giving reservations (they show who waits for what, and keep the choice stable) until every
  // GPU is reserved or this many jobs in a row got none, so that a long queue of jobs that cannot
  // reserve what is left (e.g. 2-GPU jobs and 1 unreserved GPU) is not walked for nothing.
  static constexpr int kFruitlessLimit = 64;

 private:
  Reservation Closest(const RequestShape& shape, uint64_t eligible,
                      const std::vector<std::vector<int64_t>>& jobs_on) const;

  const ModelGroups* groups_;
  const placement::Cluster* cluster_;
  uint64_t number_ = 0;
  std::vector<placement::Node> views_;       // Per group.
  std::vector<placement::GpuSet> reserved_;  // Per group: GPUs reserved in this pass.
  std::vector<int> open_in_group_;           // Unreserved GPUs with some free share, per group.
  int open_ = 0;                             // Their sum.
  int unreserved_ = 0;                       // GPUs not reserved in this pass.
  int fruitless_ = 0;                        // Jobs in a row that got nothing since open_ hit 0.
  std::vector<std::optional<int64_t>> reserved_for_;  // By GPU position.
};

}  // namespace gpufrac::node
