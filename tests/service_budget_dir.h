// A service's budget directory outlives the service by design (launch/budget_dir.h: the next
// start takes it back from the record in its state directory); a test that removes the state
// directory removes the budget directory its record names too, so that nothing is left in
// /dev/shm.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace gpufrac::testing {

// Removes the directory `record` (a service's record file) names, if it is one of the launchers'
// directories in /dev/shm.
inline void RemoveRecordedBudgetDir(const std::string& record) {
  std::ifstream in(record);
  std::string dir;
  if (!std::getline(in, dir) || dir.rfind("/dev/shm/gpufrac-", 0) != 0) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace gpufrac::testing
