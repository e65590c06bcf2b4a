// Whether a request fits a node, and on which of its GPUs: the one definition every policy, the
// scheduler and the cluster's own checks share.
#pragma once

#include "placement/cluster.h"
#include "placement/request.h"

namespace gpufrac::placement {

// Host CPU and memory are free, and for a GPU request the node's model is allowed.
bool HostFits(const Node& n, const Request& r);

// The GPUs of n that could each take one of r's GPUs: at least r.gpu_milli free (so a whole-GPU
// request needs a completely free GPU) and, when both sides track it, r.gpu_memory_bytes free.
GpuSet GpusThatFit(const Node& n, const Request& r);

// HostFits and at least r.gpu_count GPUs in GpusThatFit.
bool Fits(const Node& n, const Request& r);

// r fits n on exactly the GPUs in `gpus`.
bool PlacementFits(const Node& n, const Request& r, GpuSet gpus);

// Best-fit GPU choice: the r.gpu_count fitting GPUs with the least free share, lowest index
// among equals (for whole GPUs: the lowest-numbered free ones); nothing for CPU-only requests.
GpuSet TightestGpus(const Node& n, const Request& r);

// Leaves nothing free on the GPUs of n in `gpus` (those a caller withholds from a decision:
// reserved ones, MPS GPUs serving another user), so that nothing above fits or is placed there.
void Withhold(Node& n, GpuSet gpus);

// Takes r from n on exactly the GPUs in `gpus`: its host CPU and memory, its share and memory of
// each of those GPUs, and one workload of its kind: the node as Cluster::Apply leaves it, for a
// caller that decides on a copy of a node (the containers of one pod, which must fit together:
// each is taken on the copy before the next is placed). `gpus` must fit r (PlacementFits): one
// that does not is a programming error and aborts, never a silent over-commit.
void Take(Node& n, GpuSet gpus, const Request& r);

// The first `count` GPUs of `set`, lowest index first.
GpuSet LowestGpus(GpuSet set, int count);

}  // namespace gpufrac::placement
