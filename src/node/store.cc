// The node service's job store: one row per job in a SQLite table (the contract is in store.h).
// Statements are prepared once per Store, so that accepting a job costs one INSERT and no
// parsing of SQL.
#include "node/store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "common/log.h"
#include "common/posix.h"
#include "common/text.h"
#include "common/units.h"

namespace gpufrac::node {
namespace {

using nlohmann::json;

// "GPFJ": marks the file as a gpufrac job store, so that a database of another program that
// happens to sit at the configured path is refused instead of having our table added to it.
constexpr int32_t kApplicationId = 0x4750464A;
// 1: the jobs table below. A later schema bumps this and migrates older files in Open.
constexpr int kSchemaVersion = 1;
// Long enough to ride out a backup or an sqlite3 shell reading the file; short enough that a
// stuck lock shows up as an error rather than a hung service.
constexpr int kBusyTimeoutMs = 5000;

// The job table's columns, once, in the order every SELECT returns them: the Column enum, the
// CREATE TABLE statement and the INSERT/UPDATE/SELECT lists are all generated from it. Fields are
// bound as ?<column> in INSERT and UPDATE, so this one list fixes every order.
// X(enumerator, column name, SQL type and constraints)
// STRICT (below) so that a value of the wrong type can never be written by a bug in here. The
// text columns marked JSON hold arrays (see EncodeStrings and EncodeGpus); `request` holds the
// flags FormatGpuRequest prints, readable in the sqlite3 shell.
#define GPUFRAC_JOB_COLUMNS(X)                              \
  X(kId, id, "INTEGER PRIMARY KEY AUTOINCREMENT")           \
  X(kName, name, "TEXT NOT NULL")                           \
  X(kQueue, queue, "TEXT NOT NULL")                         \
  X(kRequest, request, "TEXT NOT NULL")                     \
  X(kCommand, command, "TEXT NOT NULL") /* JSON */          \
  X(kCwd, cwd, "TEXT NOT NULL")                             \
  X(kEnv, env, "TEXT NOT NULL") /* JSON */                  \
  X(kUid, uid, "INTEGER NOT NULL")                          \
  X(kGid, gid, "INTEGER NOT NULL")                          \
  X(kUserName, user_name, "TEXT NOT NULL")                  \
  X(kState, state, "TEXT NOT NULL")                         \
  X(kSubmittedMs, submitted_ms, "INTEGER NOT NULL")         \
  X(kStartedMs, started_ms, "INTEGER NOT NULL")             \
  X(kEndedMs, ended_ms, "INTEGER NOT NULL")                 \
  X(kGpus, gpus, "TEXT NOT NULL") /* JSON */                \
  X(kShimPid, shim_pid, "INTEGER NOT NULL")                 \
  X(kShimStartTicks, shim_start_ticks, "INTEGER NOT NULL")  \
  X(kCancelRequested, cancel_requested, "INTEGER NOT NULL") \
  X(kExitCode, exit_code, "INTEGER NOT NULL")               \
  X(kSignal, signal, "INTEGER NOT NULL")                    \
  X(kReason, reason, "TEXT NOT NULL")

enum Column : int {
#define GPUFRAC_COLUMN_ENUM(id, name, type) id,
  GPUFRAC_JOB_COLUMNS(GPUFRAC_COLUMN_ENUM)
#undef GPUFRAC_COLUMN_ENUM
      kColumnCount,
};

struct ColumnInfo {
  std::string_view name;
  std::string_view type;
};

constexpr std::array<ColumnInfo, kColumnCount> kColumns = {{
#define GPUFRAC_COLUMN_INFO(id, name, type) {#name, type},
    GPUFRAC_JOB_COLUMNS(GPUFRAC_COLUMN_INFO)
#undef GPUFRAC_COLUMN_INFO
}};

std::string CreateTableSql() {
  std::string out = "CREATE TABLE jobs (\n";
  for (int c = 0; c < kColumnCount; ++c) {
    out += "  " + std::string(kColumns[c].name) + " " + std::string(kColumns[c].type);
    out += c + 1 < kColumnCount ? ",\n" : "\n";
  }
  return out + ") STRICT;\n";
}

// "state IN ('pending', 'starting', 'running')", built from IsFinal. The partial index and the
// queries that should use it must spell this term identically, or SQLite's planner will not
// match them.
std::string UnfinishedTerm() {
  std::string term = "state IN (";
  bool first = true;
  for (JobState s :
       {JobState::kPending, JobState::kStarting, JobState::kRunning, JobState::kSucceeded,
        JobState::kFailed, JobState::kCancelled, JobState::kLost}) {
    if (IsFinal(s)) continue;
    if (!first) term += ", ";
    term += "'" + std::string(JobStateName(s)) + "'";
    first = false;
  }
  return term + ")";
}

// Finished jobs pile up for ever while unfinished ones are few: the partial index holds only the
// latter, so a restart (LoadUnfinished) and listings of active jobs (one user's too: filtering the
// few active jobs by uid is cheap) cost nothing per finished job, and jobs_by_uid lets one user's
// listing skip everyone else's history. Every index costs a page write per Insert, so no more.
std::string CreateIndexes() {
  return "CREATE INDEX jobs_unfinished ON jobs (id) WHERE " + UnfinishedTerm() +
         ";\n"
         "CREATE INDEX jobs_by_uid ON jobs (uid, id);\n";
}

std::string SelectColumns() {
  std::string out = "SELECT ";
  for (int c = 0; c < kColumnCount; ++c) {
    if (c > 0) out += ", ";
    out += kColumns[c].name;
  }
  return out + " FROM jobs";
}

std::string InsertSql() {
  std::string names, values;
  for (int c = kName; c < kColumnCount; ++c) {
    if (c > kName) names += ", ", values += ", ";
    names += kColumns[c].name;
    values += "?" + std::to_string(c);
  }
  return "INSERT INTO jobs (" + names + ") VALUES (" + values + ")";
}

std::string UpdateSql() {
  std::string out = "UPDATE jobs SET ";
  for (int c = kName; c < kColumnCount; ++c) {
    if (c > kName) out += ", ";
    out += std::string(kColumns[c].name) + " = ?" + std::to_string(c);
  }
  return out + " WHERE id = ?" + std::to_string(kColumnCount);
}

std::string DbFile(sqlite3* db) {
  const char* name = sqlite3_db_filename(db, "main");
  return name != nullptr ? name : "(job store)";
}

// One line naming the file, what was being done and SQLite's reason, with a code the caller can
// act on (a lock held elsewhere is worth retrying; a full disk is not a bug).
Status SqlError(sqlite3* db, int rc, std::string_view doing) {
  std::string message = DbFile(db) + ": " + std::string(doing) + ": " +
                        (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return UnavailableError(message + " (another process holds the database; stop it)");
    case SQLITE_FULL:
      // The service's own trouble, not the caller's: a server error, not "too many requests".
      return UnavailableError(message + " (the state directory's file system is full)");
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return PermissionDeniedError(message);
    case SQLITE_CANTOPEN:
      return UnavailableError(message);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return InternalError(message + " (the database is damaged)");
    default:
      return InternalError(message);
  }
}

struct CloseDb {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using DbHandle = std::unique_ptr<sqlite3, CloseDb>;

struct Finalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Statement = std::unique_ptr<sqlite3_stmt, Finalize>;

// Resets a kept statement when a call is done with it, whatever path it leaves by: a statement
// left mid-step would hold a read transaction open (blocking WAL checkpoints), and bindings of
// SQLITE_STATIC text must not outlive the strings they point into.
class StatementUse {
 public:
  explicit StatementUse(sqlite3_stmt* s) : s_(s) {}
  ~StatementUse() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;
  sqlite3_stmt* get() const { return s_; }

 private:
  sqlite3_stmt* s_;
};

StatusOr<Statement> Prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.c_str(), static_cast<int>(sql.size() + 1),
                              SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) return SqlError(db, rc, "preparing \"" + sql.substr(0, 40) + "...\"");
  return Statement(s);
}

Status Exec(sqlite3* db, const std::string& sql, std::string_view doing) {
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? OkStatus() : SqlError(db, rc, doing);
}

StatusOr<int64_t> QueryInt(sqlite3* db, const std::string& sql, std::string_view doing) {
  GPUFRAC_ASSIGN_OR_RETURN(Statement s, Prepare(db, sql));
  int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) return SqlError(db, rc, doing);
  return sqlite3_column_int64(s.get(), 0);
}

StatusOr<std::string> QueryText(sqlite3* db, const std::string& sql, std::string_view doing) {
  GPUFRAC_ASSIGN_OR_RETURN(Statement s, Prepare(db, sql));
  int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) return SqlError(db, rc, doing);
  const unsigned char* text = sqlite3_column_text(s.get(), 0);
  return std::string(text != nullptr ? reinterpret_cast<const char*>(text) : "");
}

// --- Encoding of the fields that are not plain columns. ---

// A Unix argument or environment entry is bytes, not necessarily UTF-8 (a Latin-1 value in a
// user's environment is legal), but JSON text must be UTF-8. Such strings are stored as
// {"hex": "..."} so that every byte comes back. IsUtf8's rule is the one nlohmann::json applies
// when dumping, so strings that pass are stored as JSON strings as they are.
json StringToJson(const std::string& s) {
  if (IsUtf8(s)) return s;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * s.size());
  for (unsigned char c : s) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 0xF];
  }
  return json{{"hex", std::move(hex)}};
}

bool JsonToString(const json& j, std::string* out) {
  if (j.is_string()) {
    *out = j.get_ref<const std::string&>();
    return true;
  }
  if (!j.is_object() || j.size() != 1) return false;
  auto it = j.find("hex");
  if (it == j.end() || !it->is_string()) return false;
  const std::string& hex = it->get_ref<const std::string&>();
  if (hex.size() % 2 != 0) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    *out += static_cast<char>(hi << 4 | lo);
  }
  return true;
}

// Never throws: every string went through StringToJson, and `replace` only matters if that
// invariant were broken.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string EncodeStrings(const std::vector<std::string>& strings) {
  json array = json::array();
  for (const std::string& s : strings) array.push_back(StringToJson(s));
  return Dump(array);
}

bool DecodeStrings(std::string_view text, std::vector<std::string>* out) {
  json array = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) return false;
  out->clear();
  out->reserve(array.size());
  for (const json& element : array) {
    if (!JsonToString(element, &out->emplace_back())) return false;
  }
  return true;
}

std::string EncodeGpus(const std::vector<GpuGrant>& gpus) {
  json array = json::array();
  for (const GpuGrant& g : gpus) {
    // The compute request is the share booked ("milli"); "compute_limit_milli" is there only
    // for a share whose time is arbitrated.
    json gpu = {{"index", g.index},
                {"uuid", StringToJson(g.uuid)},
                {"milli", g.milli},
                {"memory_bytes", g.memory_bytes}};
    if (g.compute) gpu["compute_limit_milli"] = g.compute->limit_milli;
    array.push_back(std::move(gpu));
  }
  return Dump(array);
}

template <typename T>
bool JsonToInt(const json& object, const char* key, T* out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    *out = static_cast<T>(v);
    return true;
  }
  const int64_t v = it->get<int64_t>();
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

bool DecodeGpus(std::string_view text, std::vector<GpuGrant>* out) {
  json array = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) return false;
  out->clear();
  for (const json& element : array) {
    if (!element.is_object()) return false;
    GpuGrant& g = out->emplace_back();
    auto uuid = element.find("uuid");
    if (!JsonToInt(element, "index", &g.index) || uuid == element.end() ||
        !JsonToString(*uuid, &g.uuid) || !JsonToInt(element, "milli", &g.milli) ||
        !JsonToInt(element, "memory_bytes", &g.memory_bytes)) {
      return false;
    }
    if (!element.contains("compute_limit_milli")) continue;
    uint32_t limit = 0;
    if (!JsonToInt(element, "compute_limit_milli", &limit)) return false;
    // Rows written before arbitration was optional in this form held 0 for "not arbitrated".
    if (limit == 0) continue;
    if (g.milli == 0 || limit < g.milli || limit > kMilliPerGpu) return false;
    g.compute = ComputePair{.request_milli = g.milli, .limit_milli = limit};
  }
  return true;
}

// The text form is FormatGpuRequest's flags; values never contain spaces (ParseGpuRequest
// refuses them), so splitting on spaces reads it back.
StatusOr<GpuRequest> ParseStoredRequest(std::string_view text) {
  GpuRequestText flags;
  while (!text.empty()) {
    size_t space = text.find(' ');
    std::string_view flag = text.substr(0, space);
    if (space == std::string_view::npos) return InvalidArgumentError("flag without a value");
    text.remove_prefix(space + 1);
    space = text.find(' ');
    std::string value(text.substr(0, space));
    text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
    const GpuRequestField* field =
        flag.substr(0, 2) == "--" ? FindGpuRequestField(flag.substr(2)) : nullptr;
    if (field == nullptr) return InvalidArgumentError("unknown flag " + std::string(flag));
    flags.*(field->text) = value;
  }
  return ParseGpuRequest(flags);
}

// Only a request that reads back identical is stored: one that does not would become a job the
// service cannot load after a restart, so it is refused while the caller can still be told.
StatusOr<std::string> FormatStoredRequest(const GpuRequest& request) {
  std::string text = FormatGpuRequest(request);
  StatusOr<GpuRequest> back = ParseStoredRequest(text);
  if (!back.ok()) {
    return InvalidArgumentError("request \"" + text +
                                "\" is not valid: " + back.status().message());
  }
  if (!(*back == request)) {
    return InvalidArgumentError("request \"" + text +
                                "\" is not in the form ParseGpuRequest gives (a field its kind "
                                "does not use is set, or the MIG profile is not lower case)");
  }
  return text;
}

// The encoded columns of one job, kept alive while its statement runs (they are bound without
// copying).
struct EncodedJob {
  std::string request, command, env, gpus;
};

StatusOr<EncodedJob> Encode(const Job& job) {
  if (JobStateName(job.state) == "unknown") {
    return InvalidArgumentError("job " + std::to_string(job.id) + " has no valid state (" +
                                std::to_string(static_cast<int>(job.state)) + ")");
  }
  EncodedJob e;
  GPUFRAC_ASSIGN_OR_RETURN(e.request, FormatStoredRequest(job.spec.request));
  e.command = EncodeStrings(job.spec.command);
  e.env = EncodeStrings(job.spec.env);
  e.gpus = EncodeGpus(job.gpus);
  return e;
}

void BindText(sqlite3_stmt* s, int column, std::string_view text) {
  sqlite3_bind_text64(s, column, text.data(), text.size(), SQLITE_STATIC, SQLITE_UTF8);
}

// A failed bind (only possible for text over SQLite's 1 GB limit) leaves the parameter NULL,
// which the NOT NULL columns turn into an error at step.
void BindFields(sqlite3_stmt* s, const Job& job, const EncodedJob& e) {
  const JobSpec& spec = job.spec;
  BindText(s, kName, spec.name);
  BindText(s, kQueue, spec.queue);
  BindText(s, kRequest, e.request);
  BindText(s, kCommand, e.command);
  BindText(s, kCwd, spec.cwd);
  BindText(s, kEnv, e.env);
  sqlite3_bind_int64(s, kUid, spec.uid);
  sqlite3_bind_int64(s, kGid, spec.gid);
  BindText(s, kUserName, spec.user);
  BindText(s, kState, JobStateName(job.state));
  sqlite3_bind_int64(s, kSubmittedMs, job.submitted_ms);
  sqlite3_bind_int64(s, kStartedMs, job.started_ms);
  sqlite3_bind_int64(s, kEndedMs, job.ended_ms);
  BindText(s, kGpus, e.gpus);
  sqlite3_bind_int64(s, kShimPid, job.shim.pid);
  // SQLite integers are signed; the bits round-trip.
  sqlite3_bind_int64(s, kShimStartTicks, static_cast<int64_t>(job.shim.start_ticks));
  sqlite3_bind_int(s, kCancelRequested, job.cancel_requested ? 1 : 0);
  sqlite3_bind_int(s, kExitCode, job.exit_code);
  sqlite3_bind_int(s, kSignal, job.signal);
  BindText(s, kReason, job.reason);
}

// Read as a blob so that bytes come back exactly as written (text may hold NULs or non-UTF-8).
std::string ColumnString(sqlite3_stmt* s, int column) {
  const void* data = sqlite3_column_blob(s, column);
  const int size = sqlite3_column_bytes(s, column);
  return data != nullptr ? std::string(static_cast<const char*>(data), size) : std::string();
}

// Stored text quoted in a message, shortened: a damaged row can hold anything.
std::string Quoted(std::string_view text) {
  return "\"" + std::string(text.substr(0, 80)) + (text.size() > 80 ? "...\"" : "\"");
}

// A row that does not decode is reported, not trusted: the service must not act on a job whose
// GPUs or state it cannot know.
StatusOr<Job> ReadJob(sqlite3* db, sqlite3_stmt* s) {
  Job job;
  job.id = sqlite3_column_int64(s, kId);
  auto damaged = [&](std::string_view what) {
    // One line, whatever the row holds.
    return InternalError(OneLine("job " + std::to_string(job.id) + " in " + DbFile(db) +
                                 " is damaged: " + std::string(what)));
  };
  JobSpec& spec = job.spec;
  spec.name = ColumnString(s, kName);
  spec.queue = ColumnString(s, kQueue);
  const std::string request = ColumnString(s, kRequest);
  StatusOr<GpuRequest> parsed = ParseStoredRequest(request);
  if (!parsed.ok()) {
    return damaged("its request " + Quoted(request) + " does not parse (" +
                   parsed.status().message() + ")");
  }
  spec.request = *std::move(parsed);
  if (!DecodeStrings(ColumnString(s, kCommand), &spec.command)) {
    return damaged("its command is not a JSON list of strings");
  }
  spec.cwd = ColumnString(s, kCwd);
  if (!DecodeStrings(ColumnString(s, kEnv), &spec.env)) {
    return damaged("its environment is not a JSON list of strings");
  }
  spec.uid = static_cast<uid_t>(sqlite3_column_int64(s, kUid));
  spec.gid = static_cast<gid_t>(sqlite3_column_int64(s, kGid));
  spec.user = ColumnString(s, kUserName);
  const std::string state = ColumnString(s, kState);
  std::optional<JobState> parsed_state = ParseJobState(state);
  if (!parsed_state) return damaged("its state " + Quoted(state) + " is not a job state");
  job.state = *parsed_state;
  job.submitted_ms = sqlite3_column_int64(s, kSubmittedMs);
  job.started_ms = sqlite3_column_int64(s, kStartedMs);
  job.ended_ms = sqlite3_column_int64(s, kEndedMs);
  if (!DecodeGpus(ColumnString(s, kGpus), &job.gpus)) {
    return damaged("its GPUs are not a JSON list of {index, uuid, milli, memory_bytes}");
  }
  job.shim.pid = static_cast<pid_t>(sqlite3_column_int64(s, kShimPid));
  job.shim.start_ticks = static_cast<uint64_t>(sqlite3_column_int64(s, kShimStartTicks));
  job.cancel_requested = sqlite3_column_int64(s, kCancelRequested) != 0;
  job.exit_code = sqlite3_column_int(s, kExitCode);
  job.signal = sqlite3_column_int(s, kSignal);
  job.reason = ColumnString(s, kReason);
  return job;
}

// The rows `s` yields, until `max_bytes` of job text have been read (then `truncated`, if
// given, is set).
StatusOr<std::vector<Job>> ReadJobs(sqlite3* db, sqlite3_stmt* s, std::string_view doing,
                                    uint64_t max_bytes = UINT64_MAX, bool* truncated = nullptr) {
  std::vector<Job> jobs;
  uint64_t bytes = 0;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (bytes > max_bytes) {
      if (truncated != nullptr) *truncated = true;
      return jobs;
    }
    GPUFRAC_ASSIGN_OR_RETURN(Job job, ReadJob(db, s));
    bytes += JobTextBytes(job.spec.command, job.spec.env, job.spec.cwd, job.spec.name);
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return SqlError(db, rc, doing);
  return jobs;
}

// SQLite creates the file but not its directory, and its own message ("unable to open database
// file") does not say which part is missing.
Status CheckDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return NotFoundError("job store " + path + ": directory " + dir +
                           " does not exist (create the service's state directory first)");
    }
    return ErrnoStatus("job store " + path + ": cannot use directory " + dir, err);
  }
  if (!S_ISDIR(st.st_mode)) {
    return NotFoundError("job store " + path + ": " + dir + " is not a directory");
  }
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return FailedPreconditionError("job store " + path +
                                   " is a directory; give the path of the database file in it");
  }
  return OkStatus();
}

// Decides, under a write lock so that two services starting together agree, whether the file is
// a fresh database (then creates the schema), our schema, or something to refuse.
Status CheckOrCreateSchema(sqlite3* db, const std::string& path) {
  const std::string move_away = "; move it away or give the service another state directory";
  // SQLite reads the file's header lazily, so a file that is not a database fails at the first
  // statement that touches it, whichever that is.
  auto rollback = [&](Status status) {
    if ((sqlite3_errcode(db) & 0xff) == SQLITE_NOTADB) {
      status = FailedPreconditionError(
          path + " is not a SQLite database, so not a gpufrac job store" + move_away);
    }
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return status;
  };
  int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return rollback(SqlError(db, rc, "opening the job store"));
  StatusOr<int64_t> app = QueryInt(db, "PRAGMA application_id", "reading its application id");
  if (!app.ok()) return rollback(app.status());
  StatusOr<int64_t> version = QueryInt(db, "PRAGMA user_version", "reading its schema version");
  if (!version.ok()) return rollback(version.status());
  StatusOr<int64_t> tables =
      QueryInt(db, "SELECT count(*) FROM sqlite_master", "listing its tables");
  if (!tables.ok()) return rollback(tables.status());

  if (*app == 0 && *tables == 0) {
    Status created = Exec(db,
                          CreateTableSql() + CreateIndexes() +
                              "PRAGMA application_id = " + std::to_string(kApplicationId) +
                              ";\nPRAGMA user_version = " + std::to_string(kSchemaVersion) + ";",
                          "creating the job table");
    if (!created.ok()) return rollback(created);
  } else if (*app != kApplicationId) {
    char id[16];
    std::snprintf(id, sizeof id, "0x%08x", static_cast<uint32_t>(*app));
    return rollback(FailedPreconditionError(
        path + " is a SQLite database of another program (application_id " + id + ", " +
        std::to_string(*tables) + (*tables == 1 ? " table" : " tables") +
        "), not a gpufrac job store" + move_away));
  } else if (*version > kSchemaVersion) {
    return rollback(FailedPreconditionError(
        path + " was written by a newer gpufrac (job store schema " + std::to_string(*version) +
        "; this gpufrac reads schema " + std::to_string(kSchemaVersion) +
        " and older); upgrade gpufrac, or give the service another state directory"));
  } else if (*version != kSchemaVersion) {
    return rollback(FailedPreconditionError(path + " is a gpufrac job store with schema version " +
                                            std::to_string(*version) + ", which never existed" +
                                            move_away));
  }
  rc = sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return rollback(SqlError(db, rc, "creating the job table"));
  return OkStatus();
}

// Damage anywhere in the file (pages, indexes, rows) is found at start, not when a request
// happens to read it.
Status CheckIntegrity(sqlite3* db, const std::string& path) {
  StatusOr<std::string> verdict = QueryText(db, "PRAGMA quick_check(1)", "checking its integrity");
  if (verdict.ok() && *verdict == "ok") return OkStatus();
  std::string why = verdict.ok() ? *verdict : verdict.status().message();
  return FailedPreconditionError(OneLine("job store " + path + " is damaged (" + why +
                                         "); restore it from a backup, or move it away to start "
                                         "with an empty one"));
}

}  // namespace

struct Store::Statements {
  Statement insert, update, get, list_all, list_unfinished, list_uid, list_uid_unfinished,
      load_unfinished, begin, commit, rollback;

  // List's four shapes, each its own statement so that each gets its own index plan.
  sqlite3_stmt* ForList(const JobFilter& filter) const {
    if (filter.uid) return (filter.include_final ? list_uid : list_uid_unfinished).get();
    return (filter.include_final ? list_all : list_unfinished).get();
  }
};

Store::Store(sqlite3* db, std::unique_ptr<Statements> statements)
    : db_(db), statements_(std::move(statements)) {}

Store::~Store() {
  statements_.reset();  // Statements must be finalized before the connection closes.
  sqlite3_close(db_);
}

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  GPUFRAC_RETURN_IF_ERROR(CheckDirectory(path));
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbHandle db(raw);
  if (rc != SQLITE_OK) {
    return UnavailableError("cannot open job store " + path + ": " +
                            (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  GPUFRAC_RETURN_IF_ERROR(CheckOrCreateSchema(db.get(), path));
  GPUFRAC_RETURN_IF_ERROR(CheckIntegrity(db.get(), path));

  // After the checks: switching a foreign database to WAL would already be a change to it.
  GPUFRAC_ASSIGN_OR_RETURN(
      std::string mode, QueryText(db.get(), "PRAGMA journal_mode = WAL", "switching to WAL mode"));
  if (mode != "wal") {
    return FailedPreconditionError("job store " + path +
                                   " cannot use SQLite's WAL mode (journal mode stays \"" + mode +
                                   "\"); put the state directory on a local file system");
  }
  // Safe in WAL mode against a killed process; only a power cut can lose the last commits
  // (store.h), and it saves an fsync per job.
  GPUFRAC_RETURN_IF_ERROR(
      Exec(db.get(), "PRAGMA synchronous = NORMAL", "setting synchronous = NORMAL"));

  auto s = std::make_unique<Statements>();
  const std::string select = SelectColumns();
  const std::string unfinished = UnfinishedTerm();
  const std::string newest = " ORDER BY id DESC LIMIT ?1";
  struct {
    Statement* statement;
    std::string sql;
  } prepares[] = {
      {&s->insert, InsertSql()},
      {&s->update, UpdateSql()},
      {&s->get, select + " WHERE id = ?1"},
      {&s->list_all, select + newest},
      {&s->list_unfinished, select + " WHERE " + unfinished + newest},
      {&s->list_uid, select + " WHERE uid = ?2" + newest},
      // Named, because without statistics SQLite prefers jobs_by_uid here and would walk all
      // of the user's finished jobs.
      {&s->list_uid_unfinished,
       select + " INDEXED BY jobs_unfinished WHERE uid = ?2 AND " + unfinished + newest},
      {&s->load_unfinished, select + " WHERE " + unfinished + " ORDER BY id"},
      {&s->begin, "BEGIN IMMEDIATE"},
      {&s->commit, "COMMIT"},
      {&s->rollback, "ROLLBACK"},
  };
  for (auto& [statement, sql] : prepares) {
    GPUFRAC_ASSIGN_OR_RETURN(*statement, Prepare(db.get(), sql));
  }
  return std::unique_ptr<Store>(new Store(db.release(), std::move(s)));
}

StatusOr<Job> Store::Insert(const JobSpec& spec, int64_t submitted_ms) {
  Job job;
  job.spec = spec;
  job.submitted_ms = submitted_ms;
  GPUFRAC_ASSIGN_OR_RETURN(EncodedJob encoded, Encode(job));
  StatementUse use(statements_->insert.get());
  BindFields(use.get(), job, encoded);
  int rc = sqlite3_step(use.get());
  if (rc != SQLITE_DONE) return SqlError(db_, rc, "recording a new job");
  job.id = sqlite3_last_insert_rowid(db_);
  return job;
}

namespace {

// One UPDATE; the caller owns the transaction.
Status UpdateRow(sqlite3* db, sqlite3_stmt* update, const Job& job) {
  GPUFRAC_ASSIGN_OR_RETURN(EncodedJob encoded, Encode(job));
  StatementUse use(update);
  BindFields(update, job, encoded);
  sqlite3_bind_int64(update, kColumnCount, job.id);
  int rc = sqlite3_step(update);
  if (rc != SQLITE_DONE) return SqlError(db, rc, "updating job " + std::to_string(job.id));
  if (sqlite3_changes(db) == 0) {
    return NotFoundError("no job " + std::to_string(job.id) + " in " + DbFile(db));
  }
  return OkStatus();
}

Status StepOnce(sqlite3* db, sqlite3_stmt* s, std::string_view doing) {
  StatementUse use(s);
  int rc = sqlite3_step(s);
  return rc == SQLITE_DONE ? OkStatus() : SqlError(db, rc, doing);
}

}  // namespace

Status Store::Update(const Job& job) { return UpdateRow(db_, statements_->update.get(), job); }

Status Store::UpdateAll(const std::vector<Job>& jobs) {
  if (jobs.empty()) return OkStatus();
  GPUFRAC_RETURN_IF_ERROR(StepOnce(db_, statements_->begin.get(), "starting a transaction"));
  Status status;
  for (const Job& job : jobs) {
    status = UpdateRow(db_, statements_->update.get(), job);
    if (!status.ok()) break;
  }
  if (status.ok()) status = StepOnce(db_, statements_->commit.get(), "committing job updates");
  // SQLite has already rolled back after some errors (a full disk); only roll back what is open.
  if (!status.ok() && !sqlite3_get_autocommit(db_)) {
    (void)StepOnce(db_, statements_->rollback.get(), "rolling back job updates");
  }
  return status;
}

StatusOr<std::optional<Job>> Store::Get(int64_t id) {
  StatementUse use(statements_->get.get());
  sqlite3_bind_int64(use.get(), 1, id);
  int rc = sqlite3_step(use.get());
  if (rc == SQLITE_DONE) return std::optional<Job>();
  if (rc != SQLITE_ROW) return SqlError(db_, rc, "reading job " + std::to_string(id));
  GPUFRAC_ASSIGN_OR_RETURN(Job job, ReadJob(db_, use.get()));
  return std::optional<Job>(std::move(job));
}

StatusOr<std::vector<Job>> Store::List(const JobFilter& filter, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  StatementUse use(statements_->ForList(filter));
  const uint64_t limit = std::min<uint64_t>(filter.limit, std::numeric_limits<int64_t>::max());
  sqlite3_bind_int64(use.get(), 1, static_cast<int64_t>(limit));
  if (filter.uid) sqlite3_bind_int64(use.get(), 2, *filter.uid);
  return ReadJobs(db_, use.get(), "listing jobs", filter.max_bytes, truncated);
}

StatusOr<int64_t> Store::LastId() {
  // AUTOINCREMENT keeps the largest id ever given in sqlite_sequence, deleted rows included.
  return QueryInt(db_,
                  "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0), "
                  "coalesce((SELECT max(id) FROM jobs), 0))",
                  "reading the last job id");
}

StatusOr<std::vector<Job>> Store::LoadUnfinished() {
  StatementUse use(statements_->load_unfinished.get());
  return ReadJobs(db_, use.get(), "loading unfinished jobs");
}

Status CheckStoreAgainstJobDirs(Store& store, const std::string& state_dir) {
  GPUFRAC_ASSIGN_OR_RETURN(int64_t last, store.LastId());
  int64_t newest = 0;
  size_t beyond = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/jobs", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 18 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    int64_t id = std::stoll(name);
    newest = std::max(newest, id);
    if (id > last) ++beyond;
  }
  if (beyond == 0) return OkStatus();
  return FailedPreconditionError(
      "the job store " + state_dir + "/gpufracd.db knows jobs up to " + std::to_string(last) +
      ", but " + state_dir + "/jobs holds " + std::to_string(beyond) + " job director" +
      (beyond == 1 ? "y" : "ies") + " after that (up to " + std::to_string(newest) +
      "): the database was truncated or replaced, and those jobs may still run; restore it "
      "from a backup, or end those jobs and move " +
      state_dir + "/jobs away to start afresh");
}

void StoreFailureLog::Log(int64_t job, const Status& status, int64_t now_ms) {
  auto [it, first] = seen_.try_emplace(status.message(), Seen{now_ms, 0});
  if (!first && now_ms - it->second.logged_ms < 60'000) {
    ++it->second.suppressed;
    return;
  }
  std::string line = "job " + std::to_string(job) + ": " + status.message();
  if (it->second.suppressed > 0) {
    line += " (" + std::to_string(it->second.suppressed) + " more like it in the last minute)";
  }
  LogError("%s", line.c_str());
  it->second = {now_ms, 0};
  if (seen_.size() > 64) seen_.clear();  // Bounded, whatever the messages.
}

}  // namespace gpufrac::node
