// How a workload gpufrac did not start is named (see backend.h).
#include "mig/backend.h"

namespace gpufrac::mig {

std::string ForeignUseText(const std::vector<unsigned>& pids) {
  if (pids.empty()) return "in use by a process gpufrac did not start";
  std::string text = pids.size() == 1 ? "in use by pid " : "in use by pids ";
  for (size_t i = 0; i < pids.size(); ++i) text += (i ? ", " : "") + std::to_string(pids[i]);
  return text + " (not gpufrac)";
}

}  // namespace gpufrac::mig
