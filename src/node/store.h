// The node service's durable state: every job, in one SQLite database in WAL mode under the
// service's state directory. Each call is one transaction, so a service killed at any moment
// (kill -9) leaves every job as it was after the last call that returned: an accepted job is
// never lost and a GPU share is never recorded twice. (Commits are not fsynced one by one
// (synchronous=NORMAL): a process crash loses nothing, a power cut may lose the last commits.)
//
// Not thread-safe: the service serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "node/job.h"

struct sqlite3;

namespace gpufrac::node {

struct JobFilter {
  std::optional<uid_t> uid;   // Only this user's jobs.
  bool include_final = true;  // false: pending, starting and running jobs only.
  size_t limit = 1000;        // Newest first; at most this many.
  // And no more once the jobs read hold this many bytes of text (JobTextBytes): a listing of a
  // long history of large environments stops early instead of reading them all.
  uint64_t max_bytes = UINT64_MAX;
};

class Store {
 public:
  // Opens (creating if needed) the database at `path`, with its schema. A file that is not a
  // gpufrac database, one written by a newer schema, or one SQLite finds damaged is an error
  // naming the file. Later errors: kUnavailable for a full file system (and a database held by
  // another process), kInternal for damage found later.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Records a new pending job and returns it with its id.
  StatusOr<Job> Insert(const JobSpec& spec, int64_t submitted_ms);
  // Writes every field of `job` (matched by id); kNotFound if there is no such job.
  Status Update(const Job& job);
  // Writes several jobs in one transaction: all or none.
  Status UpdateAll(const std::vector<Job>& jobs);
  StatusOr<std::optional<Job>> Get(int64_t id);
  // Newest first. `truncated`, when given, says whether max_bytes cut the list.
  StatusOr<std::vector<Job>> List(const JobFilter& filter, bool* truncated = nullptr);
  // Every job that is not final, oldest first: what a restarting service must take over.
  StatusOr<std::vector<Job>> LoadUnfinished();
  // The largest job id this store has given (0 for a new one).
  StatusOr<int64_t> LastId();

 private:
  struct Statements;  // Prepared once by Open and kept for the Store's lifetime (store.cc).
  Store(sqlite3* db, std::unique_ptr<Statements> statements);
  sqlite3* db_;
  std::unique_ptr<Statements> statements_;
};

// A store that lost jobs (truncated, replaced by an older copy, re-created empty) would give
// their ids, GPU shares and directories out again while their processes may still run: the job
// directories under `state_dir`/jobs, which every job gets before it starts, say whether it did.
// kFailedPrecondition, with what to do, when some are newer than the store's last job.
Status CheckStoreAgainstJobDirs(Store& store, const std::string& state_dir);

// The log's lines for failures of the store: a full disk fails every pass (10 a second), so the
// same failure is logged once a minute, with how many were not. Not thread-safe.
class StoreFailureLog {
 public:
  // Logs (or counts) that the store failed with `status` for job `job` at `now_ms`.
  void Log(int64_t job, const Status& status, int64_t now_ms);

 private:
  struct Seen {
    int64_t logged_ms = 0;
    int suppressed = 0;
  };
  std::map<std::string, Seen> seen_;  // By message; at most 64.
};

}  // namespace gpufrac::node
