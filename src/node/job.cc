// Job state names, as the API, the store and the command line print them.
#include "node/job.h"

#include <array>

namespace gpufrac::node {
namespace {

constexpr std::array<std::pair<JobState, std::string_view>, 7> kNames = {{
    {JobState::kPending, "pending"},
    {JobState::kStarting, "starting"},
    {JobState::kRunning, "running"},
    {JobState::kSucceeded, "succeeded"},
    {JobState::kFailed, "failed"},
    {JobState::kCancelled, "cancelled"},
    {JobState::kLost, "lost"},
}};

}  // namespace

std::string_view JobStateName(JobState state) {
  for (const auto& [s, name] : kNames) {
    if (s == state) return name;
  }
  return "unknown";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (const auto& [s, n] : kNames) {
    if (n == name) return s;
  }
  return std::nullopt;
}

bool IsFinal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled || state == JobState::kLost;
}

uint64_t JobTextBytes(const std::vector<std::string>& command, const std::vector<std::string>& env,
                      const std::string& cwd, const std::string& name) {
  uint64_t bytes = cwd.size() + name.size();
  for (const auto* list : {&command, &env}) {
    for (const std::string& s : *list) bytes += s.size() + 1;
  }
  return bytes;
}

}  // namespace gpufrac::node
