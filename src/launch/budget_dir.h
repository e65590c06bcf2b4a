// The directory a launcher keeps its workloads' budgets in (limiter/budget.h). It is the
// launcher's own: made by it with a name nobody can guess before, not writable by anyone else, and
// held open, so that every later step acts through the directory it made (openat on its fd) and
// no user can create, replace or pre-empt a name in it. The limit file names it (`budgets`), and
// the workload's limiter attaches there, never creating anything itself.
//
// Why: /dev/shm is writable by every user and budget names are predictable, so a budget made
// there by name could be another user's object (with another limit), a directory, or a FIFO.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>

#include "common/posix.h"
#include "common/status.h"

namespace gpufrac::launch {

class BudgetDir {
 public:
  // A new directory /dev/shm/gpufrac-XXXXXX (random), owned by the caller, mode `mode` (0711 for a
  // service whose workloads run as other users, 0700 for one user's own).
  static StatusOr<BudgetDir> Make(mode_t mode);
  // The directory at `path`, only if it is a directory (not a link) owned by the caller that no
  // one else can write (common/posix.h's OpenOurDirectoryAt): kFailedPrecondition saying which
  // check failed otherwise, kNotFound when there is none.
  static StatusOr<BudgetDir> Open(const std::string& path);
  // The service's directory, kept across restarts: the one named in `record` (a file in the
  // service's own state directory) if it still passes Open's checks, else a new one (Make with
  // `mode`) whose path replaces the record's.
  static StatusOr<BudgetDir> ForService(const std::string& record, mode_t mode = 0711);

  // Move-only; destroying one closes the directory, and what is in it stays.
  BudgetDir(BudgetDir&& other) noexcept = default;
  BudgetDir& operator=(BudgetDir&& other) noexcept = default;

  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }
  // Removes the directory with everything in it (one user's private directory, at the end).
  void RemoveAll();

 private:
  BudgetDir(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

}  // namespace gpufrac::launch
