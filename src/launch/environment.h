// The environment a limited workload runs with: the limiter preloaded ahead of the user's own
// preloads, the limit file's path and only its GPUs visible. One function for every launcher, so
// that the variables cannot differ between them.
#pragma once

#include <string>
#include <vector>

namespace gpufrac::launch {

struct WorkloadEnvironment {
  std::string limiter_path;                // Absolute path of libgpufrac.so.
  std::string limit_file;                  // Absolute path of the workload's limit file.
  std::vector<std::string> visible_uuids;  // CUDA_VISIBLE_DEVICES, in this order.
  std::vector<std::string> extra;          // "NAME=value", set last (override the above).
};

// `base` ("NAME=value" entries) with the workload's variables set: LD_PRELOAD becomes the limiter
// followed by `base`'s own LD_PRELOAD, GPUFRAC_LIMIT_FILE and CUDA_VISIBLE_DEVICES are replaced.
// Every earlier definition of a variable it sets is removed, so no duplicate can shadow it.
std::vector<std::string> WithWorkloadEnvironment(std::vector<std::string> base,
                                                 const WorkloadEnvironment& workload);

// This process's environment as "NAME=value" entries.
std::vector<std::string> CurrentEnvironment();

}  // namespace gpufrac::launch
