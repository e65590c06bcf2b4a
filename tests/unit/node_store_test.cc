// The job store: every field of a job comes back as written, through reopen and through a writer
// killed with SIGKILL at any moment; files that are not our store are refused with one clear line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "node/store.h"

namespace gpufrac::node {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpufrac-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    path_ = dir_ + "/jobs.db";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::unique_ptr<Store> OpenOrDie() {
    StatusOr<std::unique_ptr<Store>> store = Store::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // The message of a failed Open, checked to be one line that names the file.
  Status OpenError(const std::string& path) {
    StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    EXPECT_FALSE(store.ok());
    if (store.ok()) return OkStatus();
    EXPECT_EQ(store.status().message().find('\n'), std::string::npos) << store.status();
    EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status();
    return store.status();
  }

  // Runs SQL on the file behind the store's back, as a damaged disk or another program would.
  void RawSql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }

  std::string RawQuery(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    std::string result;
    sqlite3_exec(
        db, sql.c_str(),
        [](void* out, int, char** values, char**) {
          auto* s = static_cast<std::string*>(out);
          if (!s->empty()) *s += "|";
          *s += values[0] ? values[0] : "NULL";
          return 0;
        },
        &result, nullptr);
    sqlite3_close(db);
    return result;
  }

  std::string dir_, path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

JobSpec BasicSpec(uid_t uid = 1000) {
  JobSpec spec;
  spec.name = "train";
  spec.queue = "default";
  spec.request = GpuRequest::Memory(uint64_t{4} << 30);
  spec.command = {"python3", "train.py"};
  spec.cwd = "/home/alice";
  spec.env = {"HOME=/home/alice"};
  spec.uid = uid;
  spec.gid = uid;
  spec.user = "user" + std::to_string(uid);
  return spec;
}

// Every field set to something other than its default.
Job FullJob(Job job) {
  job.state = JobState::kFailed;
  job.started_ms = 1'700'000'123'456;
  job.ended_ms = 1'700'000'999'999;
  job.gpus = {{0, "GPU-0b6e6d0e-1111-2222-3333-444455556666", 250, uint64_t{20} << 30},
              {7, "GPU-ffffffff-0000", 1000, std::numeric_limits<uint64_t>::max()}};
  job.gpus[0].compute = ComputePair{.request_milli = 250, .limit_milli = 600};
  job.shim = {4'194'303, std::numeric_limits<uint64_t>::max() - 5};
  job.cancel_requested = true;
  job.exit_code = 3;
  job.signal = 9;
  job.reason = "exit code 3; killed by signal 9 — «détail»";
  return job;
}

JobFilter Filter(std::optional<uid_t> uid, bool include_final = true, size_t limit = 1000) {
  JobFilter filter;
  filter.uid = uid;
  filter.include_final = include_final;
  filter.limit = limit;
  return filter;
}

std::vector<GpuRequest> EveryRequestKind() {
  std::vector<GpuRequest> requests;
  for (const char* model : {"", "A100-80GB"}) {
    for (uint64_t bytes : {uint64_t{1}, uint64_t{4} << 30, (uint64_t{3} << 29) + 1,
                           std::numeric_limits<uint64_t>::max()}) {
      requests.push_back(GpuRequest::Memory(bytes).OnModel(model));
    }
    for (uint32_t milli : {1u, 250u, 333u, 999u}) {
      requests.push_back(GpuRequest::Fraction(milli).OnModel(model));
    }
    for (uint32_t gpus : {1u, kMaxWholeGpus}) {
      requests.push_back(GpuRequest::Whole(gpus).OnModel(model));
    }
    for (const char* profile : {"1g.10gb", "7g.80gb", "1g.10gb+me"}) {
      requests.push_back(GpuRequest::Mig(profile).OnModel(model));
    }
  }
  return requests;
}

TEST_F(StoreTest, InsertRecordsAPendingJob) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  StatusOr<Job> job = store->Insert(BasicSpec(), 1'700'000'000'000);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, 1);
  EXPECT_EQ(job->spec, BasicSpec());
  EXPECT_EQ(job->state, JobState::kPending);
  EXPECT_EQ(job->submitted_ms, 1'700'000'000'000);
  Job expected;
  expected.id = 1;
  expected.spec = BasicSpec();
  expected.submitted_ms = 1'700'000'000'000;
  EXPECT_EQ(*job, expected);  // Everything else at its default.

  StatusOr<std::optional<Job>> got = store->Get(1);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, expected);
  StatusOr<std::optional<Job>> missing = store->Get(2);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value());
}

TEST_F(StoreTest, AListingStopsOnceItHasReadEnoughBytes) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  JobSpec spec = BasicSpec();
  spec.env = {"PAD=" + std::string(1000, 'x')};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->Insert(spec, i).ok());
  const uint64_t each = JobTextBytes(spec.command, spec.env, spec.cwd, spec.name);
  JobFilter filter;
  filter.max_bytes = 2 * each + each / 2;
  bool truncated = false;
  StatusOr<std::vector<Job>> jobs = store->List(filter, &truncated);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 3u);  // The third passes the bound; no fourth is read.
  EXPECT_TRUE(truncated);
  EXPECT_EQ(jobs->front().id, 5);  // Newest first.
  filter.max_bytes = UINT64_MAX;
  jobs = store->List(filter, &truncated);
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), 5u);
  EXPECT_FALSE(truncated);
}

TEST_F(StoreTest, EveryFieldRoundTripsThroughUpdateAndReopen) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  StatusOr<Job> inserted = store->Insert(BasicSpec(), 5);
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  Job job = FullJob(*inserted);
  ASSERT_TRUE(store->Update(job).ok());
  EXPECT_EQ(*store->Get(job.id).value(), job);

  // Each state, including back to pending (a job the service had not let go when it died).
  for (JobState state : {JobState::kStarting, JobState::kRunning, JobState::kSucceeded,
                         JobState::kCancelled, JobState::kLost, JobState::kPending}) {
    job.state = state;
    ASSERT_TRUE(store->Update(job).ok());
    EXPECT_EQ(store->Get(job.id).value()->state, state);
  }
  store.reset();
  store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->Get(job.id).value(), job);
}

TEST_F(StoreTest, EveryRequestKindRoundTrips) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  std::map<int64_t, GpuRequest> by_id;
  for (const GpuRequest& request : EveryRequestKind()) {
    JobSpec spec = BasicSpec();
    spec.request = request;
    StatusOr<Job> job = store->Insert(spec, 1);
    ASSERT_TRUE(job.ok()) << FormatGpuRequest(request) << ": " << job.status();
    by_id[job->id] = request;
  }
  store.reset();
  store = OpenOrDie();
  ASSERT_TRUE(store);
  for (const auto& [id, request] : by_id) {
    StatusOr<std::optional<Job>> job = store->Get(id);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->value().spec.request, request) << FormatGpuRequest(request);
  }
}

// A Unix command line and environment are bytes: whatever the user's shell passed must come back,
// including things JSON cannot hold as text.
TEST_F(StoreTest, StringsKeepEveryByte) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  JobSpec spec = BasicSpec();
  spec.name = "résumé 日本語 🚀";
  spec.command = {"sh", "-c", "echo \"$A\" 'b\\c'\nexit 0", "", "tab\there"};
  spec.cwd = "/home/alice/dir with spaces/ünï";
  spec.env = {
      "A=b=c==",                               // '=' in the value.
      "MULTI=line1\nline2\r\n",                // Newlines.
      "EMPTY=",                                // Empty value.
      "UTF8=žluťoučký kůň 🐎",                  // Non-ASCII UTF-8.
      "LATIN1=caf\xe9",                        // Not UTF-8 (a Latin-1 é).
      "BROKEN=\xc3",                           // A truncated UTF-8 sequence.
      "OVERLONG=\xc0\xaf",                     // An overlong encoding of '/'.
      "SURROGATE=\xed\xa0\x80",                // A UTF-16 surrogate written as UTF-8.
      std::string("NUL=a\0b", 7),              // An embedded NUL.
      "QUOTES=\"{\\\"hex\\\": \\\"00\\\"}\"",  // Looks like our own escape for bytes.
      "CTRL=\x01\x1f\x7f",
  };
  spec.user = "ålice";
  StatusOr<Job> job = store->Insert(spec, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  Job updated = FullJob(*job);
  updated.gpus[0].uuid = "GPU-\xff\xfe";
  updated.reason = "line1\nline2 \xe9";
  ASSERT_TRUE(store->Update(updated).ok());
  store.reset();
  store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->Get(job->id).value(), updated);
}

// The store keeps what it is given: checking a command line is the API's job, but an empty one
// (or empty arguments and strings) must not break the store.
TEST_F(StoreTest, EmptyCommandAndStringsAreStored) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  JobSpec spec = BasicSpec();
  spec.name = spec.queue = spec.cwd = spec.user = "";
  spec.command = {};
  spec.env = {};
  StatusOr<Job> empty = store->Insert(spec, 0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  spec.command = {""};
  spec.env = {""};
  StatusOr<Job> one_empty_argument = store->Insert(spec, 0);
  ASSERT_TRUE(one_empty_argument.ok()) << one_empty_argument.status();
  EXPECT_EQ(*store->Get(empty->id).value(), *empty);
  EXPECT_EQ(*store->Get(one_empty_argument->id).value(), *one_empty_argument);
}

// A request that would not read back the same is refused at Insert, while the submitter can still
// be told, instead of becoming a job the service cannot load after a restart.
TEST_F(StoreTest, RequestThatCannotBeReadBackIsRefused) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  JobSpec zero = BasicSpec();
  zero.request.memory_bytes = 0;
  JobSpec upper = BasicSpec();
  upper.request.kind = GpuRequest::Kind::kMigProfile;
  upper.request.memory_bytes = 0;
  upper.request.mig_profile = "2G.20GB";
  JobSpec model = BasicSpec();
  model.request.gpu_model = "A100 80GB";
  JobSpec stray = BasicSpec();
  stray.request.gpus = 3;  // Set, but the kind is kMemory.
  for (const JobSpec& spec : {zero, upper, model, stray}) {
    StatusOr<Job> job = store->Insert(spec, 1);
    ASSERT_FALSE(job.ok()) << FormatGpuRequest(spec.request);
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << job.status();
    EXPECT_NE(job.status().message().find(FormatGpuRequest(spec.request)), std::string::npos)
        << job.status();
  }
  EXPECT_TRUE(store->List({}).value().empty());

  StatusOr<Job> good = store->Insert(BasicSpec(), 1);
  ASSERT_TRUE(good.ok());
  Job bad = *good;
  bad.spec = zero;
  bad.state = JobState::kRunning;
  EXPECT_EQ(store->Update(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store->Get(good->id).value(), *good);
}

TEST_F(StoreTest, IdsIncreaseAndAreNeverReused) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  for (int64_t expected = 1; expected <= 3; ++expected) {
    EXPECT_EQ(store->Insert(BasicSpec(), 0).value().id, expected);
  }
  store.reset();
  // Even the newest job removed by hand does not give its id back: an id names one job for ever
  // (logs, users' scripts).
  RawSql("DELETE FROM jobs WHERE id = 3");
  store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->Insert(BasicSpec(), 0).value().id, 4);
  EXPECT_EQ(store->Insert(BasicSpec(), 0).value().id, 5);
}

TEST_F(StoreTest, ListIsNewestFirstWithFilters) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  // id: 1 alice pending, 2 bob running, 3 alice succeeded, 4 alice starting, 5 bob failed,
  // 6 alice lost, 7 bob pending, 8 alice cancelled.
  const std::vector<std::pair<uid_t, JobState>> jobs = {
      {1000, JobState::kPending},  {2000, JobState::kRunning},   {1000, JobState::kSucceeded},
      {1000, JobState::kStarting}, {2000, JobState::kFailed},    {1000, JobState::kLost},
      {2000, JobState::kPending},  {1000, JobState::kCancelled},
  };
  for (const auto& [uid, state] : jobs) {
    Job job = store->Insert(BasicSpec(uid), 0).value();
    job.state = state;
    ASSERT_TRUE(store->Update(job).ok());
  }
  auto ids = [&](const JobFilter& filter) {
    StatusOr<std::vector<Job>> listed = store->List(filter);
    EXPECT_TRUE(listed.ok()) << listed.status();
    std::vector<int64_t> out;
    for (const Job& job : listed.value_or(std::vector<Job>{})) out.push_back(job.id);
    return out;
  };
  using Ids = std::vector<int64_t>;
  EXPECT_EQ(ids({}), (Ids{8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(ids(Filter(1000)), (Ids{8, 6, 4, 3, 1}));
  EXPECT_EQ(ids(Filter(2000)), (Ids{7, 5, 2}));
  EXPECT_EQ(ids(Filter(3000)), Ids{});
  EXPECT_EQ(ids(Filter(std::nullopt, false)), (Ids{7, 4, 2, 1}));
  EXPECT_EQ(ids(Filter(1000, false)), (Ids{4, 1}));
  EXPECT_EQ(ids(Filter(std::nullopt, true, 3)), (Ids{8, 7, 6}));
  EXPECT_EQ(ids(Filter(1000, true, 2)), (Ids{8, 6}));
  EXPECT_EQ(ids(Filter(std::nullopt, false, 1)), (Ids{7}));
  EXPECT_EQ(ids(Filter(2000, false, 1)), (Ids{7}));
  EXPECT_EQ(ids(Filter(std::nullopt, true, 0)), Ids{});
  EXPECT_EQ(ids(Filter(std::nullopt, true, std::numeric_limits<size_t>::max())).size(), 8u);

  // Listed jobs are whole jobs, not just ids.
  StatusOr<std::vector<Job>> listed = store->List(Filter(std::nullopt, true, 1));
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->at(0), *store->Get(8).value());
}

TEST_F(StoreTest, LoadUnfinishedGivesNonFinalJobsOldestFirst) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->LoadUnfinished().value().empty());
  const std::vector<JobState> states = {
      JobState::kRunning,  JobState::kSucceeded, JobState::kPending, JobState::kFailed,
      JobState::kStarting, JobState::kCancelled, JobState::kLost,    JobState::kPending};
  std::vector<Job> jobs;
  for (JobState state : states) {
    Job job = store->Insert(BasicSpec(), 0).value();
    job.state = state;
    ASSERT_TRUE(store->Update(job).ok());
    jobs.push_back(job);
  }
  auto unfinished_ids = [&] {
    std::vector<int64_t> out;
    StatusOr<std::vector<Job>> loaded = store->LoadUnfinished();
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    for (const Job& job : loaded.value_or(std::vector<Job>{})) {
      EXPECT_FALSE(IsFinal(job.state)) << job.id;
      EXPECT_EQ(job, jobs[job.id - 1]);
      out.push_back(job.id);
    }
    return out;
  };
  EXPECT_EQ(unfinished_ids(), (std::vector<int64_t>{1, 3, 5, 8}));

  jobs[0].state = JobState::kSucceeded;  // Running job ends: leaves the set.
  jobs[4].state = JobState::kPending;    // Starting job put back: stays.
  jobs[1].state = JobState::kRunning;    // (Not a real transition; the store does not judge.)
  ASSERT_TRUE(store->UpdateAll({jobs[0], jobs[4], jobs[1]}).ok());
  EXPECT_EQ(unfinished_ids(), (std::vector<int64_t>{2, 3, 5, 8}));
}

TEST_F(StoreTest, UpdateOfAMissingJobIsNotFound) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  Job ghost;
  ghost.id = 42;
  ghost.spec = BasicSpec();
  ghost = FullJob(ghost);
  Status status = store->Update(ghost);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("42"), std::string::npos) << status;
  ghost.id = 0;
  EXPECT_EQ(store->Update(ghost).code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->List({}).value().empty());  // Update never creates a job.
}

TEST_F(StoreTest, UpdateAllIsAllOrNone) {
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  Job a = store->Insert(BasicSpec(), 1).value();
  Job b = store->Insert(BasicSpec(), 2).value();
  const Job a_before = a, b_before = b;

  a.state = b.state = JobState::kRunning;
  a.gpus = b.gpus = {{0, "GPU-a", 500, 1 << 30}};
  Job ghost = a;
  ghost.id = 99;
  Status status = store->UpdateAll({a, ghost, b});
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("99"), std::string::npos) << status;
  EXPECT_EQ(*store->Get(a.id).value(), a_before);
  EXPECT_EQ(*store->Get(b.id).value(), b_before);

  Job invalid = b;
  invalid.spec.request.memory_bytes = 0;
  EXPECT_EQ(store->UpdateAll({a, invalid}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store->Get(a.id).value(), a_before);

  // A failed UpdateAll leaves no transaction open: later calls work and are durable.
  ASSERT_TRUE(store->UpdateAll({}).ok());
  ASSERT_TRUE(store->UpdateAll({a, b}).ok());
  EXPECT_EQ(store->Insert(BasicSpec(), 3).value().id, 3);
  store.reset();
  store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(*store->Get(a.id).value(), a);
  EXPECT_EQ(*store->Get(b.id).value(), b);
  EXPECT_EQ(store->List({}).value().size(), 3u);
}

TEST_F(StoreTest, ReopenKeepsEverythingInWalMode) {
  std::vector<Job> before;
  {
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    std::vector<GpuRequest> requests = EveryRequestKind();
    for (size_t i = 0; i < 40; ++i) {
      JobSpec spec = BasicSpec(1000 + i % 3);
      spec.request = requests[i % requests.size()];
      spec.name = "job " + std::to_string(i);
      Job job = store->Insert(spec, static_cast<int64_t>(i)).value();
      if (i % 2 == 0) {
        job = FullJob(job);
        job.state = static_cast<JobState>(i % 7);
        ASSERT_TRUE(store->Update(job).ok());
      }
    }
    before = store->List({}).value();
  }
  EXPECT_EQ(RawQuery("PRAGMA journal_mode"), "wal");
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->List({}).value(), before);
  // Opening again is idempotent: no schema is created twice, nothing changes.
  store.reset();
  store = OpenOrDie();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->List({}).value(), before);
}

TEST_F(StoreTest, MissingDirectoryIsAnErrorNamingIt) {
  const std::string missing = dir_ + "/state";
  Status status = OpenError(missing + "/jobs.db");
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find("create"), std::string::npos) << status;
  EXPECT_FALSE(std::filesystem::exists(missing));  // Creating it is the caller's decision.
}

TEST_F(StoreTest, FileThatIsNotADatabaseIsRefusedUntouched) {
  for (const std::string& content :
       {std::string("queues:\n  - name: default\n"), std::string(8192, 'x')}) {
    { std::ofstream(path_, std::ios::binary) << content; }
    Status status = OpenError(path_);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("not a SQLite database"), std::string::npos) << status;
    EXPECT_NE(status.message().find("move it away"), std::string::npos) << status;
    EXPECT_EQ(ReadFile(path_), content);
    EXPECT_FALSE(std::filesystem::exists(path_ + "-wal"));
  }
}

TEST_F(StoreTest, DatabaseOfAnotherProgramIsRefusedUntouched) {
  RawSql("CREATE TABLE accounts (name TEXT); INSERT INTO accounts VALUES ('x');");
  Status status = OpenError(path_);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("another program"), std::string::npos) << status;
  EXPECT_EQ(RawQuery("SELECT name FROM sqlite_master"), "accounts");
  EXPECT_EQ(RawQuery("PRAGMA journal_mode"), "delete");  // Not even switched to WAL.

  // Marked as another program's, even with no tables yet.
  std::filesystem::remove(path_);
  RawSql("PRAGMA application_id = 1234");
  status = OpenError(path_);
  EXPECT_NE(status.message().find("another program"), std::string::npos) << status;
  EXPECT_NE(status.message().find("0x000004d2"), std::string::npos) << status;
}

TEST_F(StoreTest, StoreFromANewerSchemaIsRefused) {
  {
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Insert(BasicSpec(), 1).ok());
  }
  const std::string version = RawQuery("PRAGMA user_version");
  RawSql("PRAGMA user_version = " + std::to_string(std::stoi(version) + 1));
  Status status = OpenError(path_);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("newer gpufrac"), std::string::npos) << status;
  EXPECT_NE(status.message().find("upgrade"), std::string::npos) << status;
  EXPECT_EQ(RawQuery("SELECT count(*) FROM jobs"), "1");
}

// A damaged row is an error naming the job, for every call that reads it, and does not hide the
// healthy rows from Get.
TEST_F(StoreTest, DamagedRowIsAnInternalErrorNamingTheJob) {
  {
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(store->Insert(BasicSpec(), i).ok());
  }
  RawSql(
      "UPDATE jobs SET state = 'paused' || char(10) || 'x' WHERE id = 1;"
      "UPDATE jobs SET env = '[\"A=1\", 7]' WHERE id = 2;"
      "UPDATE jobs SET command = 'python3 x.py' WHERE id = 3;"
      "UPDATE jobs SET gpus = '[{\"index\": \"zero\"}]' WHERE id = 4;"
      "UPDATE jobs SET request = '--gpus lots' WHERE id = 5;"
      // A compute limit below the share it booked.
      "UPDATE jobs SET gpus = '[{\"index\": 0, \"uuid\": \"GPU-a\", \"milli\": 500, "
      "\"memory_bytes\": 1, \"compute_limit_milli\": 100}]' WHERE id = 6;");
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  for (int64_t id = 1; id <= 6; ++id) {
    StatusOr<std::optional<Job>> job = store->Get(id);
    ASSERT_FALSE(job.ok()) << id;
    EXPECT_EQ(job.status().code(), StatusCode::kInternal) << job.status();
    EXPECT_NE(job.status().message().find("job " + std::to_string(id) + " "), std::string::npos)
        << job.status();
    EXPECT_EQ(job.status().message().find('\n'), std::string::npos) << job.status();
  }
  EXPECT_TRUE(store->Get(7).ok());
  EXPECT_EQ(store->List({}).status().code(), StatusCode::kInternal);
  EXPECT_EQ(store->LoadUnfinished().status().code(), StatusCode::kInternal);
  // After the failed reads the store still writes (no statement was left holding the database).
  EXPECT_TRUE(store->Insert(BasicSpec(), 7).ok());
}

TEST_F(StoreTest, ARowWrittenBeforeOptionalComputeReadsAsNotArbitrated) {
  {
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->Insert(BasicSpec(), 1).ok());
    ASSERT_TRUE(store->Insert(BasicSpec(), 2).ok());
  }
  // Earlier writers gave every GPU a "compute_limit_milli", 0 where not arbitrated; the oldest
  // gave none.
  RawSql(
      "UPDATE jobs SET gpus = '[{\"index\": 1, \"uuid\": \"GPU-a\", \"milli\": 250, "
      "\"memory_bytes\": 5, \"compute_limit_milli\": 0}]' WHERE id = 1;"
      "UPDATE jobs SET gpus = '[{\"index\": 1, \"uuid\": \"GPU-a\", \"milli\": 250, "
      "\"memory_bytes\": 5}]' WHERE id = 2;");
  auto store = OpenOrDie();
  ASSERT_TRUE(store);
  for (int64_t id : {1, 2}) {
    StatusOr<std::optional<Job>> job = store->Get(id);
    ASSERT_TRUE(job.ok() && *job) << id;
    ASSERT_EQ((**job).gpus.size(), 1u);
    EXPECT_EQ((**job).gpus[0].milli, 250u);
    EXPECT_FALSE((**job).gpus[0].compute) << id;
  }
}

// --- A writer killed at a random moment ---

// What the child reports after each call returns: two jobs inserted, then both updated to
// running in one UpdateAll.
struct Report {
  int64_t kind;  // 0: inserted, 1: updated.
  int64_t first_id, second_id;
  int64_t n;  // Which jobs: their specs are SpecFor(n, 0) and SpecFor(n, 1).
};

JobSpec SpecFor(int64_t n, int which) {
  JobSpec spec = BasicSpec(1000 + n % 5);
  spec.name = "job-" + std::to_string(n) + "-" + std::to_string(which);
  spec.request = EveryRequestKind()[n % EveryRequestKind().size()];
  spec.env.push_back("N=" + std::to_string(n));
  return spec;
}

std::vector<GpuGrant> GpusFor(int64_t n) {
  return {{static_cast<int>(n % 8), "GPU-" + std::to_string(n), 500, uint64_t(n) << 20}};
}

[[noreturn]] void WriteUntilKilled(const std::string& path, int report_fd, int64_t first_n) {
  StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  if (!store.ok()) _exit(10);
  for (int64_t n = first_n;; ++n) {
    StatusOr<Job> a = (*store)->Insert(SpecFor(n, 0), n);
    StatusOr<Job> b = (*store)->Insert(SpecFor(n, 1), n);
    if (!a.ok() || !b.ok()) _exit(11);
    Report inserted{0, a->id, b->id, n};
    if (write(report_fd, &inserted, sizeof inserted) != sizeof inserted) _exit(12);
    for (Job* job : {&*a, &*b}) {
      job->state = JobState::kRunning;
      job->started_ms = n + 1;
      job->gpus = GpusFor(n);
      job->shim = {static_cast<pid_t>(n), static_cast<uint64_t>(n) * 3};
    }
    if (!(*store)->UpdateAll({*a, *b}).ok()) _exit(13);
    Report updated{1, a->id, b->id, n};
    if (write(report_fd, &updated, sizeof updated) != sizeof updated) _exit(14);
  }
}

// Reads reports from the child until `deadline`, so that it never blocks on a full pipe.
void ReadReportsUntil(int fd, std::chrono::steady_clock::time_point deadline, std::string* bytes) {
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return;
    bytes->append(buffer, n);
  }
}

TEST_F(StoreTest, WriterKilledAtAnyMomentLosesNothingItReported) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_ms(0, 60);
  int64_t max_id_before = 0;
  std::vector<Report> reports;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
    const int delay = delay_ms(random);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(fds[0]);
      WriteUntilKilled(path_, fds[1], int64_t{round} * 1'000'000);
    }
    close(fds[1]);
    std::string bytes;
    ReadReportsUntil(fds[0], std::chrono::steady_clock::now() + std::chrono::milliseconds(delay),
                     &bytes);
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(waitpid(child, &wstatus, 0), child);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited early with " << WEXITSTATUS(wstatus);
    ReadReportsUntil(fds[0], std::chrono::steady_clock::time_point::max(), &bytes);
    close(fds[0]);
    ASSERT_EQ(bytes.size() % sizeof(Report), 0u);  // Writes this small are atomic.
    const size_t round_start = reports.size();
    reports.resize(round_start + bytes.size() / sizeof(Report));
    std::memcpy(reinterpret_cast<char*>(&reports[round_start]), bytes.data(), bytes.size());

    EXPECT_EQ(RawQuery("PRAGMA integrity_check"), "ok");
    auto store = OpenOrDie();
    ASSERT_TRUE(store);
    // Every job reported in any round so far is there, whole, and each pair moved together.
    std::map<int64_t, int64_t> updated;  // first id -> n
    for (const Report& r : reports) {
      if (r.kind == 1) updated[r.first_id] = r.n;
    }
    for (size_t i = 0; i < reports.size(); ++i) {
      const Report& r = reports[i];
      if (r.kind != 0) continue;
      if (i >= round_start) {
        EXPECT_GT(r.first_id, max_id_before) << "an id was reused";
      }
      StatusOr<std::optional<Job>> a = store->Get(r.first_id);
      StatusOr<std::optional<Job>> b = store->Get(r.second_id);
      ASSERT_TRUE(a.ok() && a->has_value()) << "lost job " << r.first_id;
      ASSERT_TRUE(b.ok() && b->has_value()) << "lost job " << r.second_id;
      EXPECT_EQ((*a)->spec, SpecFor(r.n, 0));
      EXPECT_EQ((*b)->spec, SpecFor(r.n, 1));
      EXPECT_EQ((*a)->state, (*b)->state) << "UpdateAll was applied in part";
      if (updated.count(r.first_id)) {
        EXPECT_EQ((*a)->state, JobState::kRunning);
        EXPECT_EQ((*a)->gpus, GpusFor(r.n));
        EXPECT_EQ((*b)->shim.start_ticks, static_cast<uint64_t>(r.n) * 3);
      }
    }
    // Every row reads back (the list decodes them all), including jobs committed just before
    // the kill but not yet reported: at most the pair being inserted.
    StatusOr<std::vector<Job>> all =
        store->List(Filter(std::nullopt, true, std::numeric_limits<size_t>::max()));
    ASSERT_TRUE(all.ok()) << all.status();
    size_t new_rows = 0, new_reported = 0;
    std::map<std::string, JobState> pair_state;  // "job-N" -> state of the first seen.
    for (const Job& job : *all) {
      new_rows += job.id > max_id_before;
      const std::string pair = job.spec.name.substr(0, job.spec.name.rfind('-'));
      auto [it, first] = pair_state.emplace(pair, job.state);
      EXPECT_TRUE(first || it->second == job.state) << "UpdateAll was applied in part: " << pair;
    }
    for (size_t i = round_start; i < reports.size(); ++i) new_reported += reports[i].kind == 0;
    EXPECT_GE(new_rows, 2 * new_reported);
    EXPECT_LE(new_rows, 2 * new_reported + 2);
    if (!all->empty()) max_id_before = all->front().id;
  }
  RecordProperty("jobs_reported", static_cast<int>(reports.size()));
  EXPECT_GT(reports.size(), 20u) << "the writer hardly ran; the test proved little";
}

}  // namespace
}  // namespace gpufrac::node
