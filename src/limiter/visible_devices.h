// Which GPUs a workload's CUDA can see: CUDA_VISIBLE_DEVICES restricted to the GPUs of its limit
// file, before the driver reads it (in cuInit). A workload sees a machine with only its own GPUs,
// numbered 0, 1, ... in the order of its limit file (the order its launcher gave them), as a
// container given those GPUs would: an index or a (prefix of a) UUID naming one of them selects
// it; the list ends, as the driver's does at an invalid entry, at the first entry that names
// anything else, so no CUdevice can reach another GPU. Heap-free: it runs inside the limiter.
#pragma once

#include <cstddef>

#include "limiter/limit_config.h"

namespace gpufrac::limiter {

// What CUDA_VISIBLE_DEVICES becomes: the workload's GPUs as the full UUIDs of its limit file,
// comma-separated, or kNoVisibleDevice when none is selected.
constexpr const char* kNoVisibleDevice = "-1";  // an invalid index: the driver shows nothing

struct VisibleDevices {
  char value[kMaxLimitedGpus * (kMaxUuidLen + 1) + 1];
  int count;  // the GPUs it names
  // The first entry the process asked for that names a GPU or index outside the workload, where
  // the list was cut ("" if none): for the message.
  char refused[kMaxUuidLen + 1];
};

// `requested` is the process's CUDA_VISIBLE_DEVICES, nullptr when unset (every GPU of the
// workload, in limit-file order).
void RestrictVisibleDevices(const char* requested, const LimitConfig& config, VisibleDevices* out);

}  // namespace gpufrac::limiter
