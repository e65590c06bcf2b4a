// Builds a limited workload's environment (see environment.h).
#include "launch/environment.h"

#include <unistd.h>

#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

constexpr const char kPreload[] = "LD_PRELOAD=";

// Sets NAME=value, replacing every earlier NAME.
void SetEnv(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  const std::string prefix = name + "=";
  bool placed = false;
  for (auto it = env.begin(); it != env.end();) {
    if (it->compare(0, prefix.size(), prefix) != 0) {
      ++it;
    } else if (!placed) {
      *it = prefix + value;
      placed = true;
      ++it;
    } else {
      it = env.erase(it);
    }
  }
  if (!placed) env.push_back(prefix + value);
}

}  // namespace

std::vector<std::string> WithWorkloadEnvironment(std::vector<std::string> env,
                                                 const WorkloadEnvironment& workload) {
  std::string preload = workload.limiter_path;
  for (const std::string& entry : env) {
    if (entry.rfind(kPreload, 0) == 0) {
      // The dynamic linker reads the first definition; the user's libraries come after ours.
      std::string existing = entry.substr(sizeof(kPreload) - 1);
      if (!existing.empty()) preload += ":" + existing;
      break;
    }
  }
  SetEnv(env, "LD_PRELOAD", preload);
  SetEnv(env, limiter::kLimitFileEnv, workload.limit_file);
  std::string visible;
  for (const std::string& uuid : workload.visible_uuids) {
    visible += (visible.empty() ? "" : ",") + uuid;
  }
  SetEnv(env, "CUDA_VISIBLE_DEVICES", visible);
  for (const std::string& entry : workload.extra) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    SetEnv(env, entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  return env;
}

}  // namespace gpufrac::launch
