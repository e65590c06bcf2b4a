// End-to-end tests of gpufracd and the commands that talk to it: the real service binary on
// simulated GPUs in a temporary directory, driven through its API and the `gpufrac` command.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dashboard_metrics.h"
#include "harness.h"
#include "launch/cgroup.h"
#include "node/paths.h"
#include "service_budget_dir.h"
#include "simgpu/core/shared_machine.h"

namespace gpufrac::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr uid_t kNobody = 65534;

std::string Bin(const std::string& name) { return BuildPath("bin/" + name); }

struct Reply {
  int status = 0;
  json body;
};

// One gpufracd on simulated GPUs, in its own directory.
class Daemon {
 public:
  Daemon(std::string sim, std::vector<std::string> extra = {}, std::string queues = "")
      : sim_(std::move(sim)), extra_(std::move(extra)) {
    char tmpl[] = "/tmp/gpufracd-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    chmod(dir_.c_str(), 0755);
    socket_ = dir_ + "/api.sock";
    if (!queues.empty()) {
      std::ofstream(dir_ + "/queues.yaml") << queues;
      extra_.push_back("--queues");
      extra_.push_back(dir_ + "/queues.yaml");
    }
    Start();
  }
  ~Daemon() {
    if (::testing::Test::HasFailure()) {
      std::fprintf(stderr, "gpufracd's log:\n%s\n", Log().c_str());
      RunCommand({"sh", "-c",
                  "ps -ef | grep -v grep | grep " + dir_ + " >&2; for f in " + dir_ +
                      "/state/jobs/*/*; do echo $f: $(head -c 200 $f); done >&2"},
                 {});
    }
    Stop(SIGTERM);
    // Jobs of a killed test may still run: end them before removing their files; and MPS
    // daemons still serving them.
    // Again until none is left: a process forked while pkill ran carries its parent's command
    // line and escapes the round that killed the parent.
    for (int round = 0; round < 50 && RunCommand({"pkill", "-KILL", "-f", dir_}, {}).status == 0;
         ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const std::string instance = node::ServiceInstanceName(dir_ + "/state");
    std::error_code ec;
    for (const auto& gpu : std::filesystem::directory_iterator(dir_ + "/state/mps", ec)) {
      std::ifstream pid_file(gpu.path() / "pipe" / "nvidia-cuda-mps-control.pid");
      pid_t pid = 0;
      if (pid_file >> pid && pid > 0) kill(pid, SIGKILL);
    }
    // The cgroups of jobs the service did not get to clean up (it was stopped first, and a
    // service's jobs outlive it): their processes ended, then the cgroups removed.
    for (const char* root : {"/sys/fs/cgroup/devices/gpufrac", "/sys/fs/cgroup/unified/gpufrac",
                             "/sys/fs/cgroup/gpufrac"}) {
      std::vector<std::string> dirs;
      for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
        if (entry.path().filename().string().rfind(instance + "-", 0) == 0) {
          dirs.push_back(entry.path().string());
        }
      }
      for (const std::string& dir : dirs) {
        const launch::WorkloadCgroup cgroup = launch::WorkloadCgroup::At(dir);
        EXPECT_TRUE(cgroup.KillAll(std::chrono::seconds(5))) << dir << " kept processes";
        EXPECT_TRUE(cgroup.Remove()) << dir;
      }
    }
    // The simulated machine, and the budgets of jobs that ended after the service stopped (its
    // next start, from the state being removed here, would have cleaned those up).
    simgpu::RemoveSharedMachine(instance);
    for (const std::string& name : testing::BudgetsStartingWith(instance + "-")) {
      std::filesystem::remove("/dev/shm/" + name, ec);
    }
    testing::RemoveRecordedBudgetDir(dir_ + "/state/budget-dir");
    std::filesystem::remove_all(dir_, ec);
  }

  void Start() {
    std::vector<std::string> args = {Bin("gpufracd"), "--sim",         sim_,
                                     "--state-dir",   dir_ + "/state", "--socket",
                                     socket_,         "--kill-grace",  "1"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::string log = dir_ + "/gpufracd.log";
      freopen(log.c_str(), "a", stderr);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 400; ++i) {
      if (Get("/v1/health").status == 200) return;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "gpufracd did not start: " << Log();
  }
  void Stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  std::string Log() const {
    std::ifstream in(dir_ + "/gpufracd.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  Reply Call(const std::string& method, const std::string& path, const std::string& body = "") {
    httplib::Client c(socket_);
    c.set_address_family(AF_UNIX);
    c.set_read_timeout(40);
    auto res = method == "GET"      ? c.Get(path.c_str())
               : method == "DELETE" ? c.Delete(path.c_str())
                                    : c.Post(path.c_str(), body, "application/json");
    Reply r;
    if (!res) return r;
    r.status = res->status;
    r.body = json::parse(res->body, nullptr, false);
    return r;
  }
  Reply Get(const std::string& path) { return Call("GET", path); }
  Reply Post(const std::string& path, const json& body) { return Call("POST", path, body.dump()); }

  // Submits `command` with `request` as the calling user.
  Reply Submit(std::vector<std::string> command, json request, const std::string& queue = "") {
    json body = {{"command", command}, {"cwd", "/tmp"}, {"env", {"PATH=/usr/bin:/bin"}}};
    if (!request.is_null()) body["request"] = request;
    if (!queue.empty()) body["queue"] = queue;
    return Post("/v1/jobs", body);
  }
  json Job(int64_t id) { return Get("/v1/jobs/" + std::to_string(id)).body; }
  // Waits until job `id` is in `state` (or any final state when state is "final").
  json WaitFor(int64_t id, const std::string& state, std::chrono::milliseconds limit = 20s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    json job;
    while (std::chrono::steady_clock::now() < deadline) {
      job = Job(id);
      std::string s = job.value("state", "");
      bool final = s == "succeeded" || s == "failed" || s == "cancelled" || s == "lost";
      if (s == state || (state == "final" && final)) return job;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "job " << id << " never reached " << state << ": " << job.dump();
    return job;
  }

  // `gpufrac ARGS` against this service.
  RunResult Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {Bin("gpufrac")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {{"GPUFRAC_SOCKET", socket_}});
  }

  const std::string& dir() const { return dir_; }
  const std::string& socket() const { return socket_; }

 private:
  std::string sim_;
  std::vector<std::string> extra_;
  std::string dir_, socket_;
  pid_t pid_ = 0;
};

// Runs `fn` in a child process as uid/gid 65534 and returns its exit status.
template <typename Fn>
int AsNobody(Fn fn) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(99);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(NodeService, RunStreamsOutputAndPassesTheExitStatus) {
  Daemon d("1xH100-80GB");
  RunResult r =
      d.Cli({"run", "--gpus", "1", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.out, "to-out\n");
  EXPECT_NE(r.err.find("to-err"), std::string::npos) << r.err;
}

TEST(NodeService, VerboseLogsEveryJobStartAndEnd) {
  Daemon d("1xH100-80GB", {"--verbose"});
  RunResult r = d.Cli({"run", "--gpu-memory", "4G", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.status, 3) << r.err;
  const std::string log = d.Log();
  const passwd* pw = getpwuid(getuid());
  const std::string user = pw != nullptr ? pw->pw_name : std::to_string(getuid());
  EXPECT_NE(log.find("job 1 of " + user + " started on GPU 0 (4 GiB): sh"), std::string::npos)
      << log;
  EXPECT_NE(log.find("job 1 failed: exit code 3"), std::string::npos) << log;

  // A command's control characters cannot forge lines of the log.
  d.Cli({"run", "--gpu-memory", "4G", "--", "no\nsuch"});
  EXPECT_NE(d.Log().find("job 2 of " + user + " started on GPU 0 (4 GiB): no?such\n"),
            std::string::npos)
      << d.Log();
}

TEST(NodeService, AJobSeesItsLimitAndGetsACleanOutOfMemoryPastIt) {
  Daemon d("1xH100-80GB");
  RunResult info = d.Cli({"run", "--gpu-memory", "4G", "--", ProbePath(), "info"});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(info.GetInt("total"), 4LL << 30) << info.out;
  RunResult over = d.Cli(
      {"run", "--gpu-memory", "4G", "--", ProbePath(), "work", std::to_string(5LL << 30), "0"});
  EXPECT_EQ(over.status, 2) << over.out << over.err;
  EXPECT_NE(over.err.find("out of GPU memory"), std::string::npos) << over.err;
  EXPECT_EQ(over.GetInt("work"), 2) << over.out;  // CUDA_ERROR_OUT_OF_MEMORY
}

TEST(NodeService, JobsSeeOnlyTheirGpus) {
  Daemon d("2xH100-80GB");
  json job = d.Submit({"sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}, {{"gpus", 2}}).body;
  json done = d.WaitFor(job["id"], "succeeded");
  ASSERT_EQ(done["gpus"].size(), 2u);
  RunResult logs = d.Cli({"logs", std::to_string(job["id"].get<int64_t>())});
  EXPECT_EQ(logs.out, done["gpus"][0]["uuid"].get<std::string>() + "," +
                          done["gpus"][1]["uuid"].get<std::string>() + "\n");
}

TEST(NodeService, RequestsThatCanNeverFitAreRejectedAtSubmit) {
  Daemon d("2xH100-80GB");
  RunResult many = d.Cli({"submit", "--gpus", "3", "--", "true"});
  EXPECT_EQ(many.status, 2);
  EXPECT_NE(many.err.find("3"), std::string::npos) << many.err;
  EXPECT_EQ(std::count(many.err.begin(), many.err.end(), '\n'), 1) << many.err;
  RunResult big = d.Cli({"submit", "--gpu-memory", "100G", "--", "true"});
  EXPECT_EQ(big.status, 2) << big.err;
  RunResult model = d.Cli({"submit", "--gpu-fraction", "0.5", "--gpu-model", "L4", "--", "true"});
  EXPECT_EQ(model.status, 2) << model.err;
  RunResult queue = d.Cli({"submit", "-q", "nope", "--gpus", "1", "--", "true"});
  EXPECT_EQ(queue.status, 2);
  EXPECT_NE(queue.err.find("no queue called nope"), std::string::npos) << queue.err;
  EXPECT_TRUE(d.Get("/v1/jobs").body["jobs"].empty());
}

TEST(NodeService, MalformedApiInputGetsA4xxAndTheServiceLivesOn) {
  Daemon d("1xH100-80GB");
  auto expect_4xx = [&](const std::string& method, const std::string& path, const std::string& body,
                        int want) {
    Reply r = d.Call(method, path, body);
    EXPECT_EQ(r.status, want) << method << " " << path << " " << body;
    EXPECT_TRUE(r.body.is_object() && r.body["error"].is_string() &&
                !r.body["error"].get<std::string>().empty())
        << r.body.dump();
  };
  expect_4xx("POST", "/v1/jobs", "{not json", 400);
  expect_4xx("POST", "/v1/jobs", "[1,2]", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":["true"],"cwd":"/","bogus":1})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":"true","cwd":"/"})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":[],"cwd":"/"})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":["true"],"cwd":"relative"})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":["true"],"cwd":"/","env":["NOEQUALS"]})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":["true"],"cwd":"/","queue":"nope"})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":["true"],"cwd":"/","request":{"gpu-memory":"4X"}})",
             400);
  expect_4xx("POST", "/v1/jobs",
             R"({"command":["true"],"cwd":"/","request":{"gpus":1,"gpu-fraction":0.5}})", 400);
  expect_4xx("POST", "/v1/jobs", R"({"command":["true"],"cwd":"/","request":{"cores":4}})", 400);
  expect_4xx("POST", "/v1/jobs", std::string(2 << 20, 'x'), 413);
  expect_4xx("GET", "/v1/jobs/abc", "", 400);
  expect_4xx("GET", "/v1/jobs/99999", "", 404);
  expect_4xx("POST", "/v1/jobs/99999/cancel", "", 404);
  expect_4xx("GET", "/v1/nothing", "", 404);
  expect_4xx("GET", "/v1/jobs/1/nothing", "", 404);
  expect_4xx("GET", "/v1/jobs?limit=-1", "", 400);
  // A path that exists, with another method.
  expect_4xx("DELETE", "/v1/jobs", "", 405);
  expect_4xx("POST", "/v1/status", "{}", 405);
  expect_4xx("GET", "/v1/jobs/1/cancel", "", 405);
  EXPECT_NE(d.Call("DELETE", "/v1/jobs").body.value("error", "").find("use POST, GET"),
            std::string::npos);
  EXPECT_EQ(d.Get("/v1/health").status, 200);
  EXPECT_TRUE(d.Get("/v1/jobs").body["jobs"].empty());
}

// Two queues; the high queue's head job waits for the H100 a low job holds. Low jobs may use the
// A30 meanwhile (capacity the head cannot use), but nothing may start on the H100 before it.
TEST(NodeService, ABlockedHeadJobIsNotDelayedByBackfill) {
  Daemon d("1xH100-80GB,1xA30-24GB", {}, "version: 1\nqueues:\n  - name: high\n  - name: low\n");
  std::string marker = d.dir() + "/holder-may-end";
  int64_t holder = d.Submit({"sh", "-c", "while [ ! -e " + marker + " ]; do sleep 0.05; done"},
                            {{"gpus", 1}, {"gpu-model", "H100-80GB"}}, "low")
                       .body["id"];
  d.WaitFor(holder, "running");
  int64_t head = d.Submit({"true"}, {{"gpus", 1}, {"gpu-model", "H100-80GB"}}, "high").body["id"];
  int64_t backfill =
      d.Submit({"sleep", "0.2"}, {{"gpu-fraction", 0.5}, {"gpu-model", "A30-24GB"}}, "low")
          .body["id"];
  int64_t behind =
      d.Submit({"true"}, {{"gpu-memory", "10G"}, {"gpu-model", "H100-80GB"}}, "low").body["id"];
  d.WaitFor(backfill, "succeeded");
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(d.Job(head)["state"], "pending");
  EXPECT_EQ(d.Job(behind)["state"], "pending") << "started on the head job's reserved GPU";
  json status = d.Get("/v1/status").body;
  EXPECT_EQ(status["gpus"][0]["reserved_for"], head) << status.dump();
  std::ofstream(marker) << "";
  json h = d.WaitFor(head, "succeeded");
  json b = d.WaitFor(behind, "succeeded");
  json held = d.Job(holder);
  EXPECT_GE(h["started_ms"].get<int64_t>(), held["ended_ms"].get<int64_t>());
  EXPECT_LE(h["started_ms"].get<int64_t>(), b["started_ms"].get<int64_t>());
  EXPECT_EQ(h["gpus"][0]["index"], 0);
}

TEST(NodeService, UsersSeeAndCancelOnlyTheirOwnJobs) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  Daemon d("1xH100-80GB", {"--socket-group", "nogroup"});
  int64_t mine = d.Submit({"sleep", "30"}, {{"gpu-fraction", 0.25}}).body["id"];
  d.WaitFor(mine, "running");
  std::string socket = d.socket();
  std::string shared = d.dir() + "/shared";
  mkdir(shared.c_str(), 0777);
  chmod(shared.c_str(), 0777);
  std::string out_file = shared + "/nobody-job";
  int rc = AsNobody([&] {
    httplib::Client c(socket);
    c.set_address_family(AF_UNIX);
    auto cancel = c.Post(("/v1/jobs/" + std::to_string(mine) + "/cancel").c_str(), "", "");
    if (!cancel || cancel->status != 403) return 10;
    auto list = c.Get("/v1/jobs");
    if (!list || json::parse(list->body)["jobs"].size() != 0) return 11;
    auto all = c.Get("/v1/jobs?all=1");
    if (!all || all->status != 403) return 12;
    json body = {{"command", {"sh", "-c", "id -u > " + out_file + "; sleep 30"}},
                 {"cwd", "/tmp"},
                 {"request", {{"gpu-fraction", 0.25}}}};
    auto submit = c.Post("/v1/jobs", body.dump(), "application/json");
    if (!submit || submit->status != 201) return 13;
    int64_t own = json::parse(submit->body)["id"];
    for (int i = 0; i < 200; ++i) {
      std::ifstream in(out_file);
      if (in.peek() != EOF) break;
      usleep(20000);
    }
    auto own_cancel = c.Post(("/v1/jobs/" + std::to_string(own) + "/cancel").c_str(), "", "");
    return own_cancel && own_cancel->status == 200 ? 0 : 14;
  });
  EXPECT_EQ(rc, 0);
  std::ifstream in(out_file);
  std::string uid;
  std::getline(in, uid);
  EXPECT_EQ(uid, "65534") << "the job must run as the user who submitted it";
  EXPECT_EQ(d.Job(mine)["state"], "running");
  json all = d.Get("/v1/jobs?all=1").body;
  ASSERT_EQ(all["jobs"].size(), 2u);
  int64_t theirs = all["jobs"][0]["id"];
  EXPECT_EQ(d.WaitFor(theirs, "final")["state"], "cancelled");
  EXPECT_EQ(d.Post("/v1/jobs/" + std::to_string(mine) + "/cancel", json::object()).status, 200);
  EXPECT_EQ(d.WaitFor(mine, "final")["state"], "cancelled");
}

TEST(NodeService, OneUserCannotFillTheQueuesOrTheDisk) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  Daemon d("1xH100-80GB", {"--socket-group", "nogroup", "--max-pending-per-user", "3",
                           "--max-job-bytes", "8K", "--max-pending-bytes-per-user", "20K"});
  // The GPU is taken by root's job, so nobody's jobs wait.
  int64_t blocker = d.Submit({"sleep", "30"}, {{"gpus", 1}}).body["id"];
  d.WaitFor(blocker, "running");
  std::string socket = d.socket();
  std::string shared = d.dir() + "/shared";
  mkdir(shared.c_str(), 0777);
  chmod(shared.c_str(), 0777);
  std::string report = shared + "/report";
  int rc = AsNobody([&] {
    httplib::Client c(socket);
    c.set_address_family(AF_UNIX);
    std::ofstream out(report);
    auto submit = [&](size_t env_bytes) {
      json body = {{"command", {"true"}},
                   {"cwd", "/tmp"},
                   {"env", {"PAD=" + std::string(env_bytes, 'x')}},
                   {"request", {{"gpus", 1}}}};
      auto r = c.Post("/v1/jobs", body.dump(), "application/json");
      std::string body_text = r ? r->body : "";
      std::replace(body_text.begin(), body_text.end(), '\n', ' ');
      out << (r ? r->status : 0) << " " << body_text << "\n";
    };
    submit(9 * 1024);  // One job larger than --max-job-bytes.
    submit(7 * 1024);
    submit(7 * 1024);
    submit(7 * 1024);  // 21K waiting: past --max-pending-bytes-per-user.
    submit(10);
    submit(10);  // The fourth waiting job: past --max-pending-per-user.
    return 0;
  });
  ASSERT_EQ(rc, 0);
  std::ifstream in(report);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0].rfind("400 ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("more than the 8 KiB one job may (gpufracd --max-job-bytes)"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[1].rfind("201 ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("201 ", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("429 ", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find("--max-pending-bytes-per-user"), std::string::npos) << lines[3];
  EXPECT_EQ(lines[4].rfind("201 ", 0), 0u) << lines[4];
  EXPECT_EQ(lines[5].rfind("429 ", 0), 0u) << lines[5];
  EXPECT_NE(lines[5].find("you have 3 jobs waiting, the most one user may"), std::string::npos)
      << lines[5];
  // Root is not limited.
  EXPECT_EQ(d.Submit({"true"}, {{"gpus", 1}}).status, 201);
  EXPECT_EQ(d.Post("/v1/jobs/" + std::to_string(blocker) + "/cancel", json::object()).status, 200);

  // A listing stops at 8 MiB of jobs and says so.
  const std::string big(900 * 1024, 'x');
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d.Submit({"true", big}, {{"gpus", 1}}).status, 201);
  Reply listed = d.Get("/v1/jobs?limit=100");
  ASSERT_EQ(listed.status, 200);
  EXPECT_EQ(listed.body.value("truncated", false), true);
  EXPECT_LT(listed.body["jobs"].size(), 10u);
  EXPECT_GE(listed.body["jobs"].size(), 8u);
}

TEST(NodeService, AJobsLogsKeepAtMostMaxLogBytesOfItsOutput) {
  Daemon d("1xH100-80GB", {"--max-log-bytes", "1M"});
  RunResult r = d.Cli({"run", "--gpus", "1", "--", "sh", "-c", "yes | head -c 20971520"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.size(), size_t{1} << 20);
  EXPECT_NE(r.err.find("[gpufrac: this job's output passed 1 MiB; the rest is dropped (gpufracd "
                       "--max-log-bytes)]\n[gpufrac: dropped 19922944 bytes of stdout]\n"),
            std::string::npos)
      << r.err;
  // `gpufrac logs` shows the same.
  RunResult logs = d.Cli({"logs", "1"});
  EXPECT_EQ(logs.status, 0) << logs.err;
  EXPECT_TRUE(logs.out == r.out);
  EXPECT_NE(logs.err.find("[gpufrac: dropped 19922944 bytes of stdout]"), std::string::npos)
      << logs.err;
}

// Fills the file system holding `dir` with a file there; returns its path ("" on failure).
std::string FillFileSystem(const std::string& dir) {
  std::string path = dir + "/filler";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return "";
  std::string block(64 * 1024, 'x');
  while (write(fd, block.data(), block.size()) > 0) {
  }
  while (write(fd, block.data(), 1) > 0) {
  }
  close(fd);
  return path;
}

TEST(NodeService, AFullDiskLosesNoOutcomeAndAnswersAServerError) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to mount a small file system";
  Daemon d("1xH100-80GB");
  d.Stop(SIGTERM);
  // The same state, on a file system of 4 MiB.
  const std::string state = d.dir() + "/state";
  std::filesystem::rename(state, state + ".old");
  std::filesystem::create_directories(state);
  if (mount("tmpfs", state.c_str(), "tmpfs", 0, "size=4m,mode=0711") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{state};
  ASSERT_EQ(RunCommand({"cp", "-a", state + ".old/.", state}, {}).status, 0);
  d.Start();

  const std::string marker = d.dir() + "/go";
  int64_t id = d.Submit({"sh", "-c", "while [ ! -e " + marker + " ]; do sleep 0.05; done"},
                        {{"gpu-fraction", 0.5}})
                   .body["id"];
  d.WaitFor(id, "running");
  std::string filler = FillFileSystem(state);
  ASSERT_FALSE(filler.empty());

  // A submission is refused with a server error saying why, not "too many requests".
  Reply refused = d.Submit({"true"}, {{"gpu-fraction", 0.25}});
  EXPECT_EQ(refused.status, 503) << refused.body.dump();
  EXPECT_NE(refused.body.value("error", "").find("file system is full"), std::string::npos)
      << refused.body.dump();

  // The job ends well while its outcome cannot be written: it is not recorded as lost ...
  std::ofstream(marker) << "";
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(d.Job(id)["state"], "running");
  // ... and once there is room, it is recorded as it ended.
  std::filesystem::remove(filler);
  EXPECT_EQ(d.WaitFor(id, "final", 60s)["state"], "succeeded");
  // The same failure is not logged ten times a second.
  std::string log = d.Log();
  size_t lines = std::count(log.begin(), log.end(), '\n');
  EXPECT_LT(lines, 20u) << log;
  d.Stop(SIGTERM);
  // Its budget directory is named on the file system about to be unmounted: removed here.
  std::ifstream record(state + "/budget-dir");
  std::string budget_dir;
  if (std::getline(record, budget_dir) && budget_dir.rfind("/dev/shm/gpufrac-", 0) == 0) {
    std::filesystem::remove_all(budget_dir);
  }
}

TEST(NodeService, ALostOrDamagedDatabaseStopsTheStartInsteadOfForgettingJobs) {
  Daemon d("1xH100-80GB");
  for (int i = 0; i < 3; ++i) {
    int64_t id = d.Submit({"true"}, {{"gpu-fraction", 0.25}}).body["id"];
    d.WaitFor(id, "final");
  }
  d.Stop(SIGTERM);
  const std::string state = d.dir() + "/state";
  auto start = [&] {
    // Bounded: a service that wrongly starts is stopped after a while (exit 124).
    return RunCommand({"timeout", "10", Bin("gpufracd"), "--sim", "1xH100-80GB", "--state-dir",
                       state, "--socket", d.dir() + "/other.sock"},
                      {});
  };
  // Truncated to nothing (its WAL gone too): the job directories say jobs 1-3 existed.
  std::filesystem::copy_file(state + "/gpufracd.db", d.dir() + "/saved.db");
  for (const char* suffix : {"-wal", "-shm"})
    std::filesystem::remove(state + "/gpufracd.db" + suffix);
  std::filesystem::resize_file(state + "/gpufracd.db", 0);
  RunResult truncated = start();
  EXPECT_EQ(truncated.status, 1);
  EXPECT_NE(
      truncated.err.find("knows jobs up to 0, but " + state + "/jobs holds 3 job directories"),
      std::string::npos)
      << truncated.err;
  EXPECT_EQ(std::count(truncated.err.begin(), truncated.err.end(), '\n'), 1) << truncated.err;

  // Damaged inside: found at start, not when a request reads the row.
  std::filesystem::remove(state + "/gpufracd.db");
  std::filesystem::copy_file(d.dir() + "/saved.db", state + "/gpufracd.db");
  {
    std::fstream db(state + "/gpufracd.db", std::ios::in | std::ios::out | std::ios::binary);
    db.seekp(4096);  // The second page's header: not a b-tree page any more.
    std::string junk(16, '\xa5');
    db.write(junk.data(), junk.size());
  }
  RunResult damaged = start();
  EXPECT_EQ(damaged.status, 1);
  EXPECT_NE(damaged.err.find("is damaged"), std::string::npos) << damaged.err;
  EXPECT_EQ(std::count(damaged.err.begin(), damaged.err.end(), '\n'), 1) << damaged.err;
}

TEST(NodeService, AJobCannotReachTheOtherGpusDeviceNodes) {
  if (getuid() != 0) GTEST_SKIP() << "needs root for device nodes and cgroups";
  Daemon d("2xH100-80GB");
  // Stand-ins for /dev/nvidia0 and /dev/nvidia1 (simulated GPUs take their index as minor).
  const std::string nodes = d.dir() + "/dev";
  std::filesystem::create_directories(nodes);
  for (int minor : {0, 1, 5}) {
    ASSERT_EQ(mknod((nodes + "/nvidia" + std::to_string(minor)).c_str(), S_IFCHR | 0666,
                    makedev(195, minor)),
              0);
  }
  int64_t id = d.Submit({"sh", "-c",
                         "cat " + nodes + "/nvidia0 2>&1; cat " + nodes + "/nvidia1 2>&1; cat " +
                             nodes + "/nvidia5 2>&1; exit 0"},
                        {{"gpus", 1}})
                   .body["id"];
  json job = d.WaitFor(id, "final");
  ASSERT_EQ(job["state"], "succeeded") << job.dump();
  int given = job["gpus"][0]["index"];
  std::string out = d.Cli({"logs", std::to_string(id)}).out;
  EXPECT_NE(out.find("nvidia" + std::to_string(given) + ": No such device or address"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("nvidia" + std::to_string(1 - given) + ": Operation not permitted"),
            std::string::npos)
      << out;
  // A GPU the service does not list is closed too (an allow-list, not a deny-list).
  EXPECT_NE(out.find("nvidia5: Operation not permitted"), std::string::npos) << out;
}

// Compute is a second dimension of a GPU's capacity: requests of a GPU's time never add up to
// more than the GPU, even where its memory would hold another job.
TEST(NodeService, ComputeRequestsNeverOverbookAGpusTime) {
  Daemon d("1xH100-80GB");
  const std::vector<std::string> wait = {"sh", "-c", "sleep 30"};
  int64_t big = d.Submit(wait, {{"gpu-memory", "40G"}, {"gpu-compute", "0.8"}}).body["id"];
  d.WaitFor(big, "running");
  int64_t fits = d.Submit(wait, {{"gpu-memory", "8G"}, {"gpu-compute", "20%"}}).body["id"];
  json small = d.WaitFor(fits, "running");
  int64_t over = d.Submit(wait, {{"gpu-memory", "8G"}, {"gpu-compute", "0.3"}}).body["id"];
  EXPECT_EQ(small["gpus"][0]["share"], 0.2) << small.dump();
  EXPECT_EQ(small["gpus"][0]["compute_limit"], 1.0) << small.dump();  // fair: idle time is its
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(d.Job(over)["state"], "pending");
  json status = d.Get("/v1/status").body;
  EXPECT_EQ(status["gpus"][0]["allocated_share"], 1.0) << status.dump();
  EXPECT_EQ(status["gpus"][0]["allocated_memory"], 48LL << 30) << status.dump();
  ASSERT_EQ(d.Cli({"cancel", std::to_string(big)}).status, 0);
  EXPECT_EQ(d.WaitFor(over, "running")["gpus"][0]["share"], 0.3);
}

// GPU 0's workloads by job, from a status read 2.5 s after a first one (each then has a measured
// share), taken 1.5 s after the jobs started running; `status` gets the whole answer.
std::map<int64_t, json> MeasuredWorkloads(Daemon& d, json* status) {
  std::this_thread::sleep_for(1500ms);
  d.Get("/v1/status");  // the first sample
  std::this_thread::sleep_for(2500ms);
  *status = d.Get("/v1/status").body;
  std::map<int64_t, json> by_job;
  for (const json& w : (*status)["gpus"][0]["workloads"]) by_job[w["job"].get<int64_t>()] = w;
  return by_job;
}

// The whole path: two jobs on one GPU, a quarter and three quarters, each keeping the GPU busy.
// Their limiters take turns through the GPU's arbiter in the service's budget directory, and
// status shows what each measured (the GPU would split them in halves by itself).
TEST(NodeService, JobsGetTheirComputeSharesAndStatusShowsThem) {
  Daemon d("1xH100-80GB");
  const std::string load = BuildPath("tests/gpu_load");
  int64_t quarter = d.Submit({load, "kernel", "1", "20"}, {{"gpu-fraction", 0.25}}).body["id"];
  int64_t rest = d.Submit({load, "kernel", "1", "20"}, {{"gpu-fraction", 0.75}}).body["id"];
  d.WaitFor(quarter, "running");
  d.WaitFor(rest, "running");
  json status;
  std::map<int64_t, json> by_job = MeasuredWorkloads(d, &status);
  ASSERT_TRUE(by_job[quarter]["measured_share"].is_number()) << status.dump();
  ASSERT_TRUE(by_job[rest]["measured_share"].is_number()) << status.dump();
  std::printf("measured shares: %.3f / %.3f\n", by_job[quarter]["measured_share"].get<double>(),
              by_job[rest]["measured_share"].get<double>());
  EXPECT_NEAR(by_job[quarter]["measured_share"].get<double>(), 0.25, 0.05) << status.dump();
  EXPECT_NEAR(by_job[rest]["measured_share"].get<double>(), 0.75, 0.05) << status.dump();
  EXPECT_EQ(by_job[quarter]["compute_limit"], 1.0);
  EXPECT_GT(by_job[quarter]["gpu_seconds"].get<double>(), 0.5);
  EXPECT_NEAR(status["gpus"][0]["compute_in_use"].get<double>(), 1.0, 0.05);
  httplib::Client c(d.socket());
  c.set_address_family(AF_UNIX);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const std::string& metrics = res->body;
  EXPECT_NE(metrics.find("gpufrac_workload_gpu_seconds_total{gpu=\"0\",job=\"" +
                         std::to_string(quarter) + "\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpufrac_gpu_compute_busy_ratio{"), std::string::npos);
  d.Cli({"cancel", std::to_string(quarter)});
  d.Cli({"cancel", std::to_string(rest)});
}

// Status gives what the GPU did, not what the arbiter charged: a job whose process removed the
// limiter takes half the GPU beside a job that keeps it (the GPU time-slices the two), and the
// driver's measure says so, where the arbiter charged it nothing.
TEST(NodeService, StatusShowsTheGpuTimeTheDriverMeasuredNotWhatWasCharged) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: a job's processes are found by its cgroup";
  Daemon d("1xH100-80GB");
  const std::string load = BuildPath("tests/gpu_load");
  int64_t kept = d.Submit({load, "kernel", "1", "20"}, {{"gpu-fraction", 0.5}}).body["id"];
  int64_t removed =
      d.Submit({"env", "-u", "LD_PRELOAD", load, "kernel", "1", "20"}, {{"gpu-fraction", 0.5}})
          .body["id"];
  d.WaitFor(kept, "running");
  d.WaitFor(removed, "running");
  json status;
  std::map<int64_t, json> by_job = MeasuredWorkloads(d, &status);
  for (int64_t id : {kept, removed}) {
    ASSERT_TRUE(by_job[id]["measured_share"].is_number()) << status.dump();
    ASSERT_TRUE(by_job[id]["gpu_seconds"].is_number()) << status.dump();
    ASSERT_TRUE(by_job[id]["charged_seconds"].is_number()) << status.dump();
  }
  std::printf("measured shares %.3f (limiter kept) / %.3f (removed); GPU seconds measured %.2f / "
              "%.2f, charged %.2f / %.2f\n",
              by_job[kept]["measured_share"].get<double>(),
              by_job[removed]["measured_share"].get<double>(),
              by_job[kept]["gpu_seconds"].get<double>(), by_job[removed]["gpu_seconds"].get<double>(),
              by_job[kept]["charged_seconds"].get<double>(),
              by_job[removed]["charged_seconds"].get<double>());
  EXPECT_NEAR(by_job[kept]["measured_share"].get<double>(), 0.5, 0.05) << status.dump();
  EXPECT_NEAR(by_job[removed]["measured_share"].get<double>(), 0.5, 0.05) << status.dump();
  EXPECT_LT(by_job[removed]["charged_seconds"].get<double>(), 0.05) << "it never took a turn";
  EXPECT_GT(by_job[removed]["gpu_seconds"].get<double>(), 1.0) << status.dump();
  // The table says what each got.
  RunResult table = d.Cli({"status"});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find(" got 0."), std::string::npos) << table.out;
  d.Cli({"cancel", std::to_string(kept), std::to_string(removed)});
}

// Two jobs of two users on one GPU, a quarter and three quarters of its time: the quarter (of
// user 65534) runs `hog`, a command that takes more than its share; the three quarters (root's)
// keeps the limiter. The service must let user 65534 in (--socket-group nogroup). Returns
// {kept, hog}.
std::pair<int64_t, int64_t> AQuarterThatTakesMore(Daemon& d, const std::string& hog) {
  const std::string load = BuildPath("tests/gpu_load");
  int64_t kept = d.Submit({load, "kernel", "1", "30"}, {{"gpu-fraction", 0.75}}).body["id"];
  int ids[2];
  EXPECT_EQ(pipe(ids), 0);
  const std::string socket = d.socket();
  const int rc = AsNobody([&] {
    httplib::Client c(socket);
    c.set_address_family(AF_UNIX);
    json body = {{"command", {"sh", "-c", hog}},
                 {"cwd", "/tmp"},
                 {"env", {"PATH=/usr/bin:/bin"}},
                 {"request", {{"gpu-fraction", 0.25}}}};
    auto submit = c.Post("/v1/jobs", body.dump(), "application/json");
    if (!submit || submit->status != 201) return 10;
    const int64_t id = json::parse(submit->body)["id"];
    return write(ids[1], &id, sizeof(id)) == sizeof(id) ? 0 : 11;
  });
  close(ids[1]);
  int64_t quarter = 0;
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(read(ids[0], &quarter, sizeof(quarter)), static_cast<ssize_t>(sizeof(quarter)));
  close(ids[0]);
  d.WaitFor(kept, "running");
  d.WaitFor(quarter, "running");
  return {kept, quarter};
}

// A quarter that removed the limiter from its process: the GPU time-slices the two in halves.
std::string RemovedTheLimiter() {
  return "exec env -u LD_PRELOAD " + BuildPath("tests/gpu_load") + " kernel 1 30";
}

// A quarter that kept the limiter and rewrites its own weight in the GPU's arbiter to 1000
// (issue 31's first attack: it took 0.74-0.80), every millisecond.
std::string RewroteItsWeight() {
  return "l=\"$GPUFRAC_LIMIT_FILE\"; a=\"$(awk '/^budgets /{print $2}' \"$l\")/compute.$(awk "
         "'/^gpu /{print $2}' \"$l\")\"; " +
         BuildPath("tests/arbiter_forger") + " \"$a\" 250 1000 30 & exec " +
         BuildPath("tests/gpu_load") + " kernel 1 30";
}

// GPU 0's workloads in a status read now, by job.
std::map<int64_t, json> WorkloadsNow(Daemon& d) {
  const json status = d.Get("/v1/status").body;
  std::map<int64_t, json> by_job;
  for (const json& w : status["gpus"][0]["workloads"]) by_job[w["job"].get<int64_t>()] = w;
  return by_job;
}

// The part of the GPU time of `kept` and `hog` that `kept` used over the `seconds` after both
// were first measured (the driver's measure, from status); `last` gets the last status read.
double KeptPartOver(Daemon& d, int64_t kept, int64_t hog, std::chrono::seconds seconds,
                    std::map<int64_t, json>* last) {
  std::map<int64_t, json> first;
  for (int i = 0; i < 100; ++i) {
    first = WorkloadsNow(d);
    if (first[kept]["gpu_seconds"].is_number() && first[hog]["gpu_seconds"].is_number()) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(first[hog]["gpu_seconds"].is_number()) << first[hog].dump();
  if (!first[hog]["gpu_seconds"].is_number()) return 0;
  std::this_thread::sleep_for(seconds);
  *last = WorkloadsNow(d);
  auto used = [&](int64_t job) {
    return (*last)[job]["gpu_seconds"].get<double>() - first[job]["gpu_seconds"].get<double>();
  };
  std::printf("over %lld s: kept %.2f s, the quarter %.2f s of GPU time: the kept job's part "
              "%.3f (request 0.75); the quarter held %.2f of the time\n",
              static_cast<long long>(seconds.count()), used(kept), used(hog),
              used(kept) / (used(kept) + used(hog)), (*last)[hog]["compute_held"].get<double>());
  return used(kept) / (used(kept) + used(hog));
}

// The service judges shares from what the driver measured: a job that took half the GPU for a
// quarter, beside a job that got half for three quarters, is flagged within a few seconds in
// status, the metrics and the service's log; nothing holds it unless the service enforces.
TEST(NodeService, AJobOverItsComputeShareIsFlaggedFromWhatTheDriverMeasured) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: a job's processes are found by its cgroup";
  Daemon d("1xH100-80GB", {"--socket-group", "nogroup"});
  auto [kept, removed] = AQuarterThatTakesMore(d, RemovedTheLimiter());
  const auto start = std::chrono::steady_clock::now();
  std::map<int64_t, json> by_job;
  while (std::chrono::steady_clock::now() - start < 10s) {
    by_job = WorkloadsNow(d);
    if (by_job[removed]["over_share"] == "request") break;
    std::this_thread::sleep_for(100ms);
  }
  const double after_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("flagged %.1f s after both ran; shares %.3f (removed, request 0.25) / %.3f (kept, "
              "request 0.75)\n",
              after_s, by_job[removed]["measured_share"].get<double>(),
              by_job[kept]["measured_share"].get<double>());
  EXPECT_EQ(by_job[removed]["over_share"], "request") << by_job[removed].dump();
  EXPECT_LT(after_s, 5.0);
  EXPECT_TRUE(by_job[kept]["over_share"].is_null()) << by_job[kept].dump();
  EXPECT_EQ(by_job[removed]["compute_held"], 0.0) << "not enforcing";
  httplib::Client c(d.socket());
  c.set_address_family(AF_UNIX);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("gpufrac_workload_over_share{gpu=\"0\",job=\"" +
                           std::to_string(removed) + "\",user=\"nobody\"} 1"),
            std::string::npos)
      << res->body;
  EXPECT_NE(d.Log().find("job " + std::to_string(removed) + " is over its compute request on GPU 0"),
            std::string::npos)
      << d.Log();
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find(" OVER its request"), std::string::npos) << table.out;
  d.Cli({"cancel", std::to_string(kept), std::to_string(removed)});
}

// With --gpu-compute-enforce the service holds that job from outside its processes (it froze
// their cgroup part of the time), so that its neighbour keeps at least 90% of its share over
// 10 s; when the neighbour ends, the job is let go.
TEST(NodeService, EnforcingHoldsAJobOverItsShareFromOutsideItsProcesses) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: a job's processes are found by its cgroup";
  Daemon d("1xH100-80GB", {"--socket-group", "nogroup", "--gpu-compute-enforce"});
  auto [kept, removed] = AQuarterThatTakesMore(d, RemovedTheLimiter());
  std::map<int64_t, json> last;
  EXPECT_GE(KeptPartOver(d, kept, removed, 10s, &last), 0.9 * 0.75);
  EXPECT_GT(last[removed]["compute_held"].get<double>(), 0.2);
  EXPECT_NE(d.Log().find("holding job " + std::to_string(removed) + " frozen"), std::string::npos)
      << d.Log();
  // Its neighbour gone, the GPU's idle time is its again.
  d.Cli({"cancel", std::to_string(kept)});
  d.WaitFor(kept, "final");
  std::map<int64_t, json> alone;
  for (int i = 0; i < 60; ++i) {
    alone = WorkloadsNow(d);
    if (alone[removed]["compute_held"] == 0.0) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(alone[removed]["compute_held"], 0.0) << alone[removed].dump();
  d.Cli({"cancel", std::to_string(removed)});
}

// A strict share is a ceiling even on an idle GPU: a job that removed the limiter from a 0.25
// strict share takes the whole GPU alone, is flagged over its limit, and, enforced, held near it.
TEST(NodeService, AStrictJobThatRemovedTheLimiterIsHeldToItsLimitAlone) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: a job's processes are found by its cgroup";
  Daemon d("1xH100-80GB", {"--gpu-compute-enforce"},
           "version: 1\nqueues:\n  - name: strict\n    default: {gpus: 1}\n    compute: strict\n");
  int64_t id = d.Submit({"sh", "-c", RemovedTheLimiter()}, {{"gpu-fraction", 0.25}}, "strict")
                   .body["id"];
  d.WaitFor(id, "running");
  std::map<int64_t, json> by_job;
  for (int i = 0; i < 100; ++i) {
    by_job = WorkloadsNow(d);
    if (by_job[id]["over_share"] == "limit") break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(by_job[id]["over_share"], "limit") << by_job[id].dump();
  // Held from then on: its part of the GPU's time over the next 5 s.
  std::this_thread::sleep_for(1s);
  const double before = WorkloadsNow(d)[id]["gpu_seconds"].get<double>();
  std::this_thread::sleep_for(5s);
  const json last = WorkloadsNow(d)[id];
  const double part = (last["gpu_seconds"].get<double>() - before) / 5;
  std::printf("a strict 0.25 job without the limiter, held: %.3f of the GPU over 5 s, held %.2f\n",
              part, last["compute_held"].get<double>());
  // Unheld it takes all of the GPU; at the most hold (0.95) its queued batches still run while it
  // is frozen (docs/node-service.md).
  EXPECT_LT(part, 0.4);
  EXPECT_GT(part, 0.1);
  d.Cli({"cancel", std::to_string(id)});
}

// A job that keeps the limiter and rewrites its own weight in the GPU's arbiter (which every
// workload on the GPU may write) takes more than its share; the service, which judges what the
// driver measured, flags it, and holds it when it enforces. (Not to its neighbour's 0.9 of 0.75:
// a job that takes turns and is frozen part of the time keeps the others waiting on a turn it
// cannot use; docs/node-service.md.)
TEST(NodeService, AJobThatRewritesItsWeightInTheArbiterIsFlaggedAndHeld) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: a job's processes are found by its cgroup";
  double alone = 0;
  {
    Daemon d("1xH100-80GB", {"--socket-group", "nogroup"});
    auto [kept, forger] = AQuarterThatTakesMore(d, RewroteItsWeight());
    std::map<int64_t, json> last;
    alone = KeptPartOver(d, kept, forger, 5s, &last);
    EXPECT_LT(alone, 0.6) << "the attack works on the arbiter alone";
    EXPECT_EQ(last[forger]["over_share"], "request") << last[forger].dump();
    EXPECT_NE(d.Cli({"logs", std::to_string(forger)}).out.find("forging slot"), std::string::npos)
        << "the forger ran";
    d.Cli({"cancel", std::to_string(kept), std::to_string(forger)});
  }
  Daemon d("1xH100-80GB", {"--socket-group", "nogroup", "--gpu-compute-enforce"});
  auto [kept, forger] = AQuarterThatTakesMore(d, RewroteItsWeight());
  std::map<int64_t, json> last;
  // Measured 0.58-0.73 against 0.43 unenforced (docs/node-service.md): better, not the 0.9 of
  // 0.75 a job that removed the limiter is held to.
  const double held = KeptPartOver(d, kept, forger, 10s, &last);
  EXPECT_GT(held, alone + 0.08);
  d.Cli({"cancel", std::to_string(kept), std::to_string(forger)});
}

// What the job's limiter is told: its share of the GPU's time and the most it may take, by the
// node's policy, its queue's, or its own limit.
TEST(NodeService, AJobsLimitFileCarriesItsComputeShare) {
  Daemon d("1xH100-80GB", {},
           "version: 1\nqueues:\n  - name: fair\n    default: {gpus: 1}\n"
           "  - name: strict\n    default: {gpus: 1}\n    compute: strict\n");
  auto limits_of = [&](const std::string& queue, json request) {
    int64_t id =
        d.Submit({"sh", "-c", "grep '^gpu ' \"$GPUFRAC_LIMIT_FILE\""}, request, queue).body["id"];
    EXPECT_EQ(d.WaitFor(id, "final")["state"], "succeeded");
    return d.Cli({"logs", std::to_string(id)}).out;
  };
  EXPECT_NE(limits_of("fair", {{"gpu-fraction", 0.25}}).find(" compute 250 compute-limit 1000\n"),
            std::string::npos);
  EXPECT_NE(limits_of("strict", {{"gpu-fraction", 0.25}}).find(" compute 250 compute-limit 250\n"),
            std::string::npos);
  EXPECT_NE(
      limits_of("strict", {{"gpu-memory", "8G"}, {"gpu-compute", 0.1}, {"gpu-compute-limit", 0.5}})
          .find(" compute 100 compute-limit 500\n"),
      std::string::npos);
  // A whole GPU is not arbitrated.
  EXPECT_EQ(limits_of("fair", {{"gpus", 1}}).find(" compute "), std::string::npos);
}

// What people read: ps gives each shared job's compute as request..limit, status each GPU's
// booked and free compute and each job's; the JSON carries the same numbers.
TEST(NodeService, PsAndStatusShowComputeRequestsAndLimits) {
  Daemon d("1xH100-80GB");
  const std::vector<std::string> wait = {"sh", "-c", "sleep 30"};
  int64_t asked =
      d.Submit(wait, {{"gpu-memory", "8G"}, {"gpu-compute", "0.3"}, {"gpu-compute-limit", "0.6"}})
          .body["id"];
  int64_t plain = d.Submit(wait, {{"gpu-fraction", "0.25"}}).body["id"];
  d.WaitFor(asked, "running");
  d.WaitFor(plain, "running");

  RunResult ps = d.Cli({"ps"});
  ASSERT_EQ(ps.status, 0) << ps.err;
  EXPECT_NE(ps.out.find(" COMPUTE "), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find(" 0.3..0.6 "), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find(" 0.25..1 "), std::string::npos) << ps.out;
  json listed = json::parse(d.Cli({"ps", "--json"}).out);
  for (const json& job : listed["jobs"]) {
    EXPECT_EQ(job["gpus"][0]["compute_limit"], job["id"] == asked ? 0.6 : 1.0) << job.dump();
  }

  RunResult table = d.Cli({"status"});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("COMPUTE-ALLOC COMPUTE-FREE"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" 0.55         0.45\n"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("compute 0.3..0.6   memory 8 GiB"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("compute 0.25..1"), std::string::npos) << table.out;
  json status = json::parse(d.Cli({"status", "--json"}).out);
  EXPECT_EQ(status["gpus"][0]["allocated_share"], 0.55) << status.dump();
  for (const json& w : status["gpus"][0]["workloads"]) {
    EXPECT_EQ(w["share"], w["job"] == asked ? 0.3 : 0.25) << w.dump();
    EXPECT_EQ(w["compute_limit"], w["job"] == asked ? 0.6 : 1.0) << w.dump();
  }
  d.Cli({"cancel", std::to_string(asked), std::to_string(plain)});
}

// Where the GPU's time is not arbitrated (the policy off), a shared job has no compute limit: the
// JSON says null, and ps and status give the share alone.
TEST(NodeService, AShareWhoseTimeIsNotArbitratedHasNoComputeLimit) {
  Daemon d("1xH100-80GB", {"--gpu-compute-policy", "off"});
  int64_t id = d.Submit({"sh", "-c", "sleep 30"}, {{"gpu-fraction", "0.25"}}).body["id"];
  json job = d.WaitFor(id, "running");
  EXPECT_TRUE(job["gpus"][0].contains("compute_limit")) << job.dump();
  EXPECT_TRUE(job["gpus"][0]["compute_limit"].is_null()) << job.dump();
  RunResult ps = d.Cli({"ps"});
  ASSERT_EQ(ps.status, 0) << ps.err;
  EXPECT_NE(ps.out.find(" 0.25 "), std::string::npos) << ps.out;
  EXPECT_EQ(ps.out.find("0.25.."), std::string::npos) << ps.out;
  json status = json::parse(d.Cli({"status", "--json"}).out);
  ASSERT_EQ(status["gpus"][0]["workloads"].size(), 1u) << status.dump();
  EXPECT_TRUE(status["gpus"][0]["workloads"][0]["compute_limit"].is_null()) << status.dump();
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find("compute 0.25 "), std::string::npos) << table.out;
  d.Cli({"cancel", std::to_string(id)});
}

TEST(NodeService, CancelEndsARunningJobAndFreesItsShare) {
  Daemon d("1xH100-80GB");
  int64_t id = d.Submit({"sh", "-c", "trap '' TERM; sleep 30"}, {{"gpu-fraction", 0.5}}).body["id"];
  d.WaitFor(id, "running");
  EXPECT_EQ(d.Get("/v1/status").body["gpus"][0]["allocated_share"], 0.5);
  RunResult r = d.Cli({"cancel", std::to_string(id)});
  EXPECT_EQ(r.status, 0) << r.err;
  json job = d.WaitFor(id, "final", 10s);  // SIGTERM is ignored: SIGKILL after the 1 s grace
  EXPECT_EQ(job["state"], "cancelled");
  EXPECT_EQ(d.Get("/v1/status").body["gpus"][0]["allocated_share"], 0);
  RunResult again = d.Cli({"cancel", std::to_string(id)});
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("already ended"), std::string::npos) << again.err;
}

TEST(NodeService, ARunningJobSurvivesAServiceKillAndIsReadopted) {
  Daemon d("1xH100-80GB");
  std::string marker = d.dir() + "/may-end";
  int64_t id = d.Submit({"sh", "-c",
                         "while [ ! -e " + marker +
                             " ]; do sleep 0.05; done; echo finished; "
                             "exit 4"},
                        {{"gpu-memory", "8G"}})
                   .body["id"];
  d.WaitFor(id, "running");
  d.Stop(SIGKILL);
  d.Start();
  json status = d.Get("/v1/status").body;
  EXPECT_EQ(status["gpus"][0]["allocated_memory"], 8LL << 30) << status.dump();
  EXPECT_EQ(d.Job(id)["state"], "running");
  // A job that would need the whole GPU must still wait: the share is not double-booked.
  int64_t whole = d.Submit({"true"}, {{"gpus", 1}}).body["id"];
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(d.Job(whole)["state"], "pending");
  std::ofstream(marker) << "";
  json job = d.WaitFor(id, "final");
  EXPECT_EQ(job["state"], "failed");
  EXPECT_EQ(job["exit_code"], 4);
  EXPECT_EQ(d.WaitFor(whole, "final")["state"], "succeeded");
  EXPECT_EQ(d.Cli({"logs", std::to_string(id)}).out, "finished\n");
}

TEST(NodeService, RunKeepsFollowingItsJobAcrossAServiceRestart) {
  Daemon d("1xH100-80GB");
  std::string out = d.dir() + "/run.out";
  std::string marker = d.dir() + "/may-end";
  pid_t pid = fork();
  if (pid == 0) {
    setenv("GPUFRAC_SOCKET", d.socket().c_str(), 1);
    freopen(out.c_str(), "w", stdout);
    std::string bin = Bin("gpufrac");
    std::string script =
        "echo before; while [ ! -e " + marker + " ]; do sleep 0.05; done; echo after";
    execl(bin.c_str(), "gpufrac", "run", "--gpus", "1", "--", "sh", "-c", script.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // Once `run` is following the job's output (the submission's answer has arrived).
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(out);
    std::string line;
    if (std::getline(in, line) && line == "before") break;
    std::this_thread::sleep_for(10ms);
  }
  d.Stop(SIGKILL);
  std::this_thread::sleep_for(300ms);
  d.Start();
  std::ofstream(marker) << "";
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "before\nafter\n");
}

TEST(NodeService, AJobThatEndsWhileTheServiceIsDownGetsItsRealOutcome) {
  Daemon d("1xH100-80GB");
  int64_t id = d.Submit({"sh", "-c", "sleep 0.3; exit 7"}, {{"gpus", 1}}).body["id"];
  d.WaitFor(id, "running");
  d.Stop(SIGKILL);
  std::this_thread::sleep_for(800ms);
  d.Start();
  json job = d.WaitFor(id, "final");
  EXPECT_EQ(job["state"], "failed");
  EXPECT_EQ(job["exit_code"], 7);
  EXPECT_EQ(d.Get("/v1/status").body["gpus"][0]["allocated_share"], 0);
}

// kill -9 at random moments while jobs start and finish: afterwards every job ran exactly once
// and has exactly one outcome, and at every restart each GPU's allocation equals what the jobs
// on it hold.
TEST(NodeService, SurvivesKillNineAtRandomPoints) {
  Daemon d("2xH100-80GB");
  std::string ran = d.dir() + "/ran";
  std::mt19937 rng(12345);
  std::vector<int64_t> ids;
  const std::vector<json> requests = {{{"gpu-fraction", 0.25}},
                                      {{"gpu-memory", "30G"}},
                                      {{"gpus", 1}},
                                      {{"gpus", 2}},
                                      {{"gpu-fraction", 0.5}}};
  for (int round = 0; round < 22; ++round) {
    for (int k = 0; k < 3; ++k) {
      double secs = std::uniform_int_distribution<int>(0, 30)(rng) / 100.0;
      std::string token = "job" + std::to_string(ids.size());
      Reply r =
          d.Submit({"sh", "-c", "echo " + token + " >> " + ran + "; sleep " + std::to_string(secs)},
                   requests[rng() % requests.size()]);
      ASSERT_EQ(r.status, 201) << r.body.dump();
      ids.push_back(r.body["id"]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
    d.Stop(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));
    d.Start();
    json status = d.Get("/v1/status").body;
    for (const json& g : status["gpus"]) {
      double held = 0;
      for (const json& w : g["workloads"]) held += w["share"].get<double>();
      EXPECT_NEAR(g["allocated_share"].get<double>(), held, 1e-9) << status.dump();
      EXPECT_LE(g["allocated_share"].get<double>(), 1.0) << status.dump();
    }
  }
  for (int64_t id : ids) EXPECT_EQ(d.WaitFor(id, "final", 60s)["state"], "succeeded") << id;
  json final_status = d.Get("/v1/status").body;
  for (const json& g : final_status["gpus"]) EXPECT_EQ(g["allocated_share"], 0);
  // Each job wrote its token once: it ran exactly once.
  std::ifstream in(ran);
  std::map<std::string, int> runs;
  std::string line;
  while (std::getline(in, line)) ++runs[line];
  EXPECT_EQ(runs.size(), ids.size());
  for (const auto& [token, count] : runs) EXPECT_EQ(count, 1) << token;
}

TEST(NodeService, AJobWhoseSupervisorDiesIsLostAndLeavesNothingRunning) {
  Daemon d("1xH100-80GB");
  int64_t id = d.Submit({"sleep", "30"}, {{"gpus", 1}}).body["id"];
  d.WaitFor(id, "running");
  std::string job_dir = d.dir() + "/state/jobs/" + std::to_string(id);
  pid_t pid = 0;
  for (int i = 0; i < 200 && pid == 0; ++i) {
    std::ifstream(job_dir + "/pid") >> pid;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(pid, 0);
  RunCommand({"pkill", "-KILL", "-f", "gpufrac-shim " + job_dir}, {});
  json job = d.WaitFor(id, "final");
  EXPECT_EQ(job["state"], "lost");
  EXPECT_NE(job["reason"].get<std::string>().find("remaining processes were killed"),
            std::string::npos)
      << job.dump();
  EXPECT_EQ(d.Get("/v1/status").body["gpus"][0]["allocated_share"], 0);
  // The job's process is gone (or a zombie waiting for init), not still using the GPU.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string all;
    std::getline(stat, all);
    gone = all.empty() || all.substr(all.rfind(')') + 2, 1) == "Z";
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(gone);
}

TEST(NodeService, TcpCallersNeedTheTokenAndMayRunJobsAsANamedUser) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to run a job as another user";
  std::string token_file = "/tmp/gpufrac-token-" + std::to_string(getpid());
  std::ofstream(token_file) << "0123456789abcdef0123456789abcdef\n";
  chmod(token_file.c_str(), 0600);
  // nobody's primary group is nogroup: TCP jobs may run as its members only.
  Daemon d("1xH100-80GB",
           {"--listen", "127.0.0.1:0", "--token-file", token_file, "--tcp-group", "nogroup"});
  // By default, only ordinary accounts (uid 1000-60000): not system ones such as daemon.
  Daemon ranged("1xH100-80GB", {"--listen", "127.0.0.1:0", "--token-file", token_file});
  unlink(token_file.c_str());
  // The service names its port once it serves (the API may answer a moment before).
  std::string log = d.Log();
  for (int i = 0; i < 200 && log.find("and 127.0.0.1:") == std::string::npos; ++i) {
    std::this_thread::sleep_for(10ms);
    log = d.Log();
  }
  size_t at = log.find("and 127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << log;
  int port = std::atoi(log.c_str() + at + 14);
  httplib::Client c("127.0.0.1", port);
  auto anonymous = c.Get("/v1/jobs");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  c.set_bearer_token_auth("wrong-token-wrong-token");
  EXPECT_EQ(c.Get("/v1/jobs")->status, 401);
  c.set_bearer_token_auth("0123456789abcdef0123456789abcdef");
  json body = {{"command", {"id", "-u"}}, {"cwd", "/tmp"}, {"request", {{"gpu-fraction", 0.5}}}};
  EXPECT_EQ(c.Post("/v1/jobs", body.dump(), "application/json")->status, 400)
      << "a root service must be told which user a TCP job runs as";
  body["user"] = "root";
  EXPECT_EQ(c.Post("/v1/jobs", body.dump(), "application/json")->status, 403);
  body["user"] = "daemon";
  auto not_member = c.Post("/v1/jobs", body.dump(), "application/json");
  EXPECT_EQ(not_member->status, 403);
  EXPECT_NE(not_member->body.find("only as members of group nogroup; daemon is not one"),
            std::string::npos)
      << not_member->body;
  {
    std::string ranged_log = ranged.Log();
    for (int i = 0; i < 200 && ranged_log.find("and 127.0.0.1:") == std::string::npos; ++i) {
      std::this_thread::sleep_for(10ms);
      ranged_log = ranged.Log();
    }
    size_t ranged_at = ranged_log.find("and 127.0.0.1:");
    ASSERT_NE(ranged_at, std::string::npos) << ranged_log;
    httplib::Client r("127.0.0.1", std::atoi(ranged_log.c_str() + ranged_at + 14));
    r.set_bearer_token_auth("0123456789abcdef0123456789abcdef");
    auto system_account = r.Post("/v1/jobs", body.dump(), "application/json");
    ASSERT_TRUE(system_account);
    EXPECT_EQ(system_account->status, 403);
    EXPECT_NE(system_account->body.find("only as users with uid 1000-60000; daemon is uid 1"),
              std::string::npos)
        << system_account->body;
  }
  body["user"] = "nobody";
  auto submitted = c.Post("/v1/jobs", body.dump(), "application/json");
  ASSERT_TRUE(submitted);
  ASSERT_EQ(submitted->status, 201) << submitted->body;
  int64_t id = json::parse(submitted->body)["id"];
  EXPECT_EQ(d.WaitFor(id, "final")["state"], "succeeded");
  EXPECT_EQ(d.Cli({"logs", std::to_string(id)}).out, "65534\n");
  auto all = c.Get("/v1/jobs?all=1");
  ASSERT_TRUE(all);
  EXPECT_EQ(json::parse(all->body)["jobs"][0]["user"], "nobody");
}

TEST(NodeService, CtrlCDuringRunCancelsTheJob) {
  Daemon d("1xH100-80GB");
  std::string out = d.dir() + "/run.out";
  pid_t pid = fork();
  if (pid == 0) {
    setenv("GPUFRAC_SOCKET", d.socket().c_str(), 1);
    freopen(out.c_str(), "w", stderr);
    std::string bin = Bin("gpufrac");
    execl(bin.c_str(), "gpufrac", "run", "--gpus", "1", "--", "sleep", "30",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  json jobs;
  for (int i = 0; i < 500; ++i) {
    jobs = d.Get("/v1/jobs").body["jobs"];
    if (!jobs.empty() && jobs[0]["state"] == "running") break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(jobs.empty());
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_EQ(d.Job(jobs[0]["id"])["state"], "cancelled");
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("cancelling job"), std::string::npos) << text.str();
}

TEST(NodeService, BadStartupInputIsOneLineAndNothingStarts) {
  char tmpl[] = "/tmp/gpufracd-bad-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/queues.yaml") << "version: 1\nqueues:\n  - name: a\n    quota: 2\n";
  auto start = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {Bin("gpufracd"), "--state-dir", dir + "/state", "--socket",
                                     dir + "/api.sock"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, {});
  };
  RunResult queues = start({"--sim", "1xH100-80GB", "--queues", dir + "/queues.yaml"});
  EXPECT_EQ(queues.status, 1);
  EXPECT_NE(queues.err.find("queues.yaml:4: quota of queue a"), std::string::npos) << queues.err;
  RunResult sim = start({"--sim", "2xH999"});
  EXPECT_EQ(sim.status, 1);
  EXPECT_NE(sim.err.find("--sim 2xH999"), std::string::npos) << sim.err;
  RunResult listen = start({"--sim", "1xL4", "--listen", "127.0.0.1:80"});
  EXPECT_EQ(listen.status, 1);
  EXPECT_NE(listen.err.find("--token-file"), std::string::npos) << listen.err;
  // Plain HTTP on an address other machines reach: refused unless asked for by name.
  RunResult open = start({"--sim", "1xL4", "--listen", "0.0.0.0:7450"});
  EXPECT_EQ(open.status, 1);
  EXPECT_NE(open.err.find("--listen 0.0.0.0:7450: other machines would see the token"),
            std::string::npos)
      << open.err;
  EXPECT_NE(open.err.find("--insecure-listen"), std::string::npos) << open.err;
  // TLS: both files, and a private key that not every user can read.
  ASSERT_EQ(std::system(("cd " + dir +
                         " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                         "-days 1 -subj /CN=t -keyout key.pem -out cert.pem 2>/dev/null && chmod "
                         "644 key.pem && echo 0123456789abcdef0123 > token && chmod 600 token")
                            .c_str()),
            0);
  RunResult half = start({"--sim", "1xL4", "--listen", "0.0.0.0:7450", "--token-file",
                          dir + "/token", "--tls-cert", dir + "/cert.pem"});
  EXPECT_EQ(half.status, 1);
  EXPECT_NE(half.err.find("--tls-cert and --tls-key go together"), std::string::npos) << half.err;
  RunResult readable =
      start({"--sim", "1xL4", "--listen", "0.0.0.0:7450", "--token-file", dir + "/token",
             "--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"});
  EXPECT_EQ(readable.status, 1);
  EXPECT_NE(readable.err.find("every user may read this private key; chmod o-rwx it"),
            std::string::npos)
      << readable.err;
  RunResult range = start({"--sim", "1xL4", "--tcp-users", "0-100"});
  EXPECT_EQ(range.status, 1);
  EXPECT_NE(range.err.find("--tcp-users 0-100: write a uid range"), std::string::npos) << range.err;
  RunResult logs = start({"--sim", "1xL4", "--max-log-bytes", "0"});
  EXPECT_EQ(logs.status, 1);
  EXPECT_NE(logs.err.find("--max-log-bytes 0: write a size"), std::string::npos) << logs.err;
  for (const RunResult* r : {&queues, &sim, &listen, &open, &half, &readable, &range, &logs}) {
    EXPECT_EQ(std::count(r->err.begin(), r->err.end(), '\n'), 1) << r->err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/api.sock"));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(NodeService, ASecondServiceOnTheSameStateDirectoryIsRefused) {
  Daemon d("1xH100-80GB");
  RunResult second = RunCommand({Bin("gpufracd"), "--sim", "1xH100-80GB", "--state-dir",
                                 d.dir() + "/state", "--socket", d.dir() + "/other.sock"},
                                {});
  EXPECT_EQ(second.status, 1);
  EXPECT_NE(second.err.find("another gpufracd is already using the state directory"),
            std::string::npos)
      << second.err;
  EXPECT_EQ(d.Get("/v1/health").status, 200);
}

// ---- Dynamic MIG ----

TEST(NodeServiceMig, AMigJobGetsTheSmallestInstanceAndSeesOnlyItsMemory) {
  Daemon d("1xA100-40GB:mig");
  RunResult info = d.Cli({"run", "--mig-profile", "1g.5gb", "--", ProbePath(), "info"});
  ASSERT_EQ(info.status, 0) << info.out << info.err;
  long long total = info.GetInt("total");
  EXPECT_GT(total, 4LL << 30);
  EXPECT_LT(total, 5LL << 30);
  // A memory request on a node whose GPUs are all in MIG mode is served by MIG too: 7G needs
  // the next size up, 1g.10gb; the idle 1g.5gb stays (destroyed only when its slices are needed).
  int64_t id =
      d.Submit({"sh", "-c", "echo $CUDA_VISIBLE_DEVICES; sleep 30"}, {{"gpu-memory", "7G"}})
          .body["id"];
  json job = d.WaitFor(id, "running");
  std::string uuid = job["gpus"][0]["uuid"];
  EXPECT_EQ(uuid.rfind("MIG-", 0), 0u) << job.dump();
  json status = d.Get("/v1/status").body;
  ASSERT_EQ(status["mig"].size(), 1u) << status.dump();
  json instances = status["mig"][0]["instances"];
  ASSERT_EQ(instances.size(), 2u) << status.dump();
  bool found = false;
  for (const json& i : instances) {
    if (i["job"] == id) {
      found = true;
      EXPECT_EQ(i["profile"], "1g.10gb");
      EXPECT_EQ(i["uuid"], uuid);
      EXPECT_EQ(i["gpu"], 0);
      EXPECT_EQ(i["size"], 2);
    } else {
      EXPECT_EQ(i["profile"], "1g.5gb");
      EXPECT_TRUE(i["job"].is_null());
    }
  }
  EXPECT_TRUE(found) << status.dump();
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find("MIG ["), std::string::npos) << table.out;
  d.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  d.WaitFor(id, "final");
}

TEST(NodeServiceMig, ModeChangesNeedAnIdleGpu) {
  Daemon d("1xH100-80GB");
  int64_t id = d.Submit({"sleep", "30"}, {{"gpu-fraction", 0.5}}).body["id"];
  d.WaitFor(id, "running");
  RunResult busy = d.Cli({"mig", "enable", "--gpu", "0"});
  EXPECT_EQ(busy.status, 1);
  EXPECT_NE(busy.err.find("runs jobs"), std::string::npos) << busy.err;
  d.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  d.WaitFor(id, "final");
  RunResult on = d.Cli({"mig", "enable", "--gpu", "0"});
  ASSERT_EQ(on.status, 0) << on.err;
  // Now a fraction is served by a MIG instance rather than a share under the limiter.
  int64_t mig_job = d.Submit({"true"}, {{"gpu-fraction", 0.25}}).body["id"];
  json done = d.WaitFor(mig_job, "succeeded");
  EXPECT_EQ(done["gpus"][0]["uuid"].get<std::string>().rfind("MIG-", 0), 0u) << done.dump();
  RunResult off = d.Cli({"mig", "disable", "--gpu", "0"});
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_TRUE(d.Get("/v1/status").body["mig"].empty());
  RunResult none = d.Cli({"submit", "--mig-profile", "1g.10gb", "--", "true"});
  EXPECT_NE(none.status, 0);
  EXPECT_NE(none.err.find("MIG mode"), std::string::npos) << none.err;
}

TEST(NodeServiceMig, AppliesAndExportsMigPartedFilesWhateverTheOrder) {
  Daemon d("1xA100-40GB:mig");
  // Created in this order at the lowest free starts, the 4g.20gb would find no room; applied
  // with explicit placements it fits.
  std::string file = d.dir() + "/mig.yaml";
  std::ofstream(file) << "version: v1\nmig-configs:\n  mixed:\n    - devices: all\n"
                         "      mig-enabled: true\n      mig-devices:\n        \"1g.5gb\": 1\n"
                         "        \"2g.10gb\": 1\n        \"4g.20gb\": 1\n"
                         "  too-much:\n    - devices: all\n      mig-enabled: true\n"
                         "      mig-devices:\n        \"7g.40gb\": 1\n        \"1g.5gb\": 1\n";
  RunResult apply = d.Cli({"mig", "apply", "-f", file, "-c", "mixed"});
  ASSERT_EQ(apply.status, 0) << apply.err;
  json instances = d.Get("/v1/status").body["mig"][0]["instances"];
  EXPECT_EQ(instances.size(), 3u) << instances.dump();
  RunResult exported = d.Cli({"mig", "export", "-c", "now"});
  EXPECT_NE(exported.out.find("now:"), std::string::npos) << exported.out;
  EXPECT_NE(exported.out.find("4g.20gb"), std::string::npos) << exported.out;
  RunResult bad = d.Cli({"mig", "apply", "-f", file, "-c", "too-much"});
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_EQ(d.Get("/v1/status").body["mig"][0]["instances"], instances)
      << "a refused apply changes nothing";
  RunResult several = d.Cli({"mig", "apply", "-f", file});
  EXPECT_EQ(several.status, 2);
  EXPECT_NE(several.err.find("name one with -c"), std::string::npos) << several.err;
}

TEST(NodeServiceMig, AnApplyThatFailsHalfwayDestroysWhatItCreated) {
  Daemon d("2xA100-40GB:mig");
  std::string file = d.dir() + "/mig.yaml";
  std::ofstream(file) << "version: v1\nmig-configs:\n  one:\n    - devices: [1]\n"
                         "      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 1}\n"
                         "  small:\n    - devices: all\n      mig-enabled: true\n"
                         "      mig-devices: {\"1g.5gb\": 7}\n";
  ASSERT_EQ(d.Cli({"mig", "apply", "-f", file, "-c", "one"}).status, 0);
  json status = d.Get("/v1/status").body;
  std::string uuid = status["mig"][1]["instances"][0]["uuid"];
  // A process gpufrac does not know about runs in GPU 1's instance, so the driver refuses to
  // destroy it, after GPU 0's seven instances were created.
  std::string seen;
  pid_t holder = Start({ProbePath(), "hold", std::to_string(1 << 30)},
                       {{"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR},
                        {"SIMGPU_CONFIG", "2xA100-40GB:mig"},
                        {"SIMGPU_NAMESPACE", node::ServiceInstanceName(d.dir() + "/state")},
                        {"CUDA_VISIBLE_DEVICES", uuid}},
                       "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;
  RunResult failed = d.Cli({"mig", "apply", "-f", file, "-c", "small"});
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_NE(failed.status, 0);
  EXPECT_NE(failed.err.find("destroyed again"), std::string::npos) << failed.err;
  json after = d.Get("/v1/status").body;
  EXPECT_TRUE(after["mig"][0]["instances"].empty()) << after.dump();
  ASSERT_EQ(after["mig"][1]["instances"].size(), 1u) << after.dump();
  EXPECT_EQ(after["mig"][1]["instances"][0]["uuid"], uuid);
}

// Issue 5: an instance holding a process gpufrac did not start is never handed to a job, nor
// destroyed under it; a job that could only be served by destroying it waits and says why.
TEST(NodeServiceMig, AnInstanceWithAProcessGpufracDidNotStartIsLeftAlone) {
  Daemon d("1xA100-40GB:mig");
  RunResult first = d.Cli({"run", "--mig-profile", "1g.5gb", "--", "true"});
  ASSERT_EQ(first.status, 0) << first.err;
  json instances = d.Get("/v1/status").body["mig"][0]["instances"];
  ASSERT_EQ(instances.size(), 1u) << instances.dump();
  ASSERT_TRUE(instances[0]["job"].is_null()) << "idle once its job ended";
  std::string uuid = instances[0]["uuid"];
  // Someone starts a CUDA program in the idle instance by hand.
  std::string seen;
  pid_t stranger = Start({ProbePath(), "hold", std::to_string(1 << 20)},
                         {{"LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR},
                          {"SIMGPU_CONFIG", "1xA100-40GB:mig"},
                          {"SIMGPU_NAMESPACE", node::ServiceInstanceName(d.dir() + "/state")},
                          {"CUDA_VISIBLE_DEVICES", uuid}},
                         "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;
  // The next job of the same profile gets an instance of its own.
  RunResult next = d.Cli(
      {"run", "--mig-profile", "1g.5gb", "--", "sh", "-c", "echo visible=$CUDA_VISIBLE_DEVICES"});
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(next.out.find(uuid), std::string::npos) << next.out;
  EXPECT_NE(next.out.find("visible=MIG-"), std::string::npos) << next.out;
  // The whole GPU needs every slice: it waits, naming the instance and the process.
  int64_t whole = d.Submit({"true"}, {{"mig-profile", "7g.40gb"}}).body["id"];
  std::string waiting;
  for (int i = 0; i < 200 && waiting.find("not gpufrac") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
    json job = d.Job(whole);
    ASSERT_EQ(job["state"], "pending") << job.dump();
    waiting = job.value("waiting_for", "");
  }
  EXPECT_NE(waiting.find("in use by pid " + std::to_string(stranger) + " (not gpufrac)"),
            std::string::npos)
      << waiting;
  EXPECT_NE(waiting.find(uuid), std::string::npos) << waiting;
  json status = d.Get("/v1/status").body;
  bool listed = false;
  for (const json& i : status["mig"][0]["instances"]) {
    if (i["uuid"] != uuid) continue;
    listed = i["job"].is_null();
    EXPECT_EQ(i["in_use"], true) << i.dump();
    EXPECT_EQ(i["pids"], json::array({stranger})) << i.dump();
  }
  EXPECT_TRUE(listed) << "the instance was not destroyed: " << status.dump();
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find("in use by pid " + std::to_string(stranger) + " (not gpufrac)"),
            std::string::npos)
      << table.out;
  // Once the process is gone, its instance is idle like any other and makes room.
  kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
  EXPECT_EQ(d.WaitFor(whole, "final")["state"], "succeeded");
}

TEST(NodeService, WholeGpusServeWholeGpuJobsOnly) {
  Daemon d("2xH100-80GB", {"--whole-gpus", "1"});
  std::vector<int64_t> halves;
  for (int i = 0; i < 3; ++i) {
    halves.push_back(d.Submit({"sleep", "30"}, {{"gpu-fraction", 0.5}}).body["id"]);
  }
  d.WaitFor(halves[1], "running");
  int64_t whole = d.Submit({"sleep", "30"}, {{"gpus", 1}}).body["id"];
  json w = d.WaitFor(whole, "running");
  EXPECT_EQ(w["gpus"][0]["index"], 1);
  EXPECT_EQ(d.Job(halves[2])["state"], "pending") << "a share must not go to the whole GPU";
  json status = d.Get("/v1/status").body;
  EXPECT_EQ(status["gpus"][1]["mode"], "whole");
  EXPECT_EQ(status["gpus"][0]["mode"], "shared");
  for (int64_t id : halves) d.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  d.Post("/v1/jobs/" + std::to_string(whole) + "/cancel", json::object());
  d.WaitFor(whole, "final");
}

TEST(NodeServiceMig, ARunningMigJobSurvivesAServiceKillAndKeepsItsInstance) {
  Daemon d("1xA100-40GB:mig,1xH100-80GB", {},
           "version: 1\nqueues:\n  - name: small\n    quota: 0.25\n  - name: big\n");
  std::string marker = d.dir() + "/may-end";
  int64_t id = d.Submit({"sh", "-c", "while [ ! -e " + marker + " ]; do sleep 0.05; done"},
                        {{"mig-profile", "1g.5gb"}}, "big")
                   .body["id"];
  json job = d.WaitFor(id, "running");
  std::string uuid = job["gpus"][0]["uuid"];
  d.Stop(SIGKILL);
  d.Start();
  // Re-adopted: its instance still serves it, and a second 1g.5gb job gets another instance.
  int64_t second = d.Submit({"true"}, {{"mig-profile", "1g.5gb"}}, "big").body["id"];
  json other = d.WaitFor(second, "succeeded");
  EXPECT_NE(other["gpus"][0]["uuid"], uuid);
  bool serving = false;
  json status = d.Get("/v1/status").body;
  for (const json& i : status["mig"][0]["instances"]) {
    if (i["uuid"] == uuid) serving = i["job"] == id;
  }
  EXPECT_TRUE(serving) << status.dump() << " " << uuid;
  // A request over the queue's quota is refused, not sent to MIG to get around the quota.
  RunResult over = d.Cli({"submit", "-q", "small", "--gpu-memory", "60G", "--", "true"});
  EXPECT_EQ(over.status, 2);
  EXPECT_NE(over.err.find("quota"), std::string::npos) << over.err;
  // A model no MIG GPU here has is refused at submit, not left pending.
  RunResult model =
      d.Cli({"submit", "--mig-profile", "1g.10gb", "--gpu-model", "H100-80GB", "--", "true"});
  EXPECT_NE(model.status, 0);
  EXPECT_NE(model.err.find("H100-80GB"), std::string::npos) << model.err;
  json queues = d.Get("/v1/queues").body["queues"];
  EXPECT_EQ(queues[1]["running"], 1) << "MIG jobs count in their queue";
  EXPECT_GT(queues[1]["share_in_use"].get<double>(), 0.1);
  std::ofstream(marker) << "";
  EXPECT_EQ(d.WaitFor(id, "final")["state"], "succeeded");
}

TEST(NodeServiceMig, AModeChangeFailsPendingJobsOnlyTheOldModeCouldServe) {
  Daemon d("2xH100-80GB");
  int64_t half = d.Submit({"sleep", "30"}, {{"gpu-fraction", 0.5}}).body["id"];
  d.WaitFor(half, "running");
  int64_t both = d.Submit({"true"}, {{"gpus", 2}}).body["id"];
  RunResult on = d.Cli({"mig", "enable", "--gpu", "1"});
  ASSERT_EQ(on.status, 0) << on.err;
  json stranded = d.WaitFor(both, "final");
  EXPECT_EQ(stranded["state"], "failed");
  EXPECT_NE(stranded["reason"].get<std::string>().find("can no longer run"), std::string::npos)
      << stranded.dump();
  EXPECT_EQ(d.Job(half)["state"], "running");
  d.Post("/v1/jobs/" + std::to_string(half) + "/cancel", json::object());
  d.WaitFor(half, "final");
}

TEST(NodeService, MetricsDescribeGpusQueuesAndSchedulingLatency) {
  Daemon d("1xH100-80GB");
  int64_t id = d.Submit({"sleep", "30"}, {{"gpu-memory", "10G"}}).body["id"];
  d.WaitFor(id, "running");
  httplib::Client c(d.socket());
  c.set_address_family(AF_UNIX);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const std::string& m = res->body;
  EXPECT_NE(m.find("# TYPE gpufrac_gpu_memory_allocated_bytes gauge"), std::string::npos) << m;
  EXPECT_NE(m.find("gpufrac_gpu_memory_allocated_bytes{gpu=\"0\""), std::string::npos) << m;
  EXPECT_NE(m.find("} 10737418240\n"), std::string::npos) << m;
  EXPECT_NE(m.find("gpufrac_queue_running_jobs{queue=\"default\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("gpufrac_scheduling_decision_seconds_bucket{le=\"+Inf\"}"), std::string::npos)
      << m;
  d.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  d.WaitFor(id, "final");
}

TEST(NodeService, TheGrafanaDashboardDrawsOnlyMetricsTheServiceExports) {
  Daemon d("1xH100-80GB");
  int64_t id = d.Submit({"sleep", "30"}, {{"gpu-fraction", 0.5}}).body["id"];
  d.WaitFor(id, "running");
  httplib::Client c(d.socket());
  c.set_address_family(AF_UNIX);
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const std::set<std::string> exported = ExportedMetrics(res->body);
  // The extender's panels are checked against the extender (k8s_end_to_end_test).
  std::set<std::string> drawn = DashboardMetrics();
  std::erase_if(drawn, [](const std::string& m) { return m.rfind("gpufrac_extender_", 0) == 0; });
  EXPECT_GE(drawn.size(), 15u) << "the dashboard's GPU, queue, job and latency panels";
  for (const std::string& metric : drawn) {
    EXPECT_TRUE(exported.count(metric)) << metric << " is drawn but gpufracd does not export it";
  }
  // The per-job panels have the running job to show.
  const std::string job = "job=\"" + std::to_string(id) + "\"";
  for (const char* metric :
       {"gpufrac_workload_memory_limit_bytes{", "gpufrac_workload_compute_share{",
        "gpufrac_workload_compute_limit{"}) {
    size_t at = res->body.find(std::string("\n") + metric);
    ASSERT_NE(at, std::string::npos) << metric << res->body;
    EXPECT_NE(res->body.substr(at, res->body.find('\n', at + 1) - at).find(job), std::string::npos)
        << metric;
  }
  EXPECT_NE(res->body.find("gpufrac_workload_compute_share{gpu=\"0\"," + job), std::string::npos)
      << res->body;
  d.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
  d.WaitFor(id, "final");
}

TEST(NodeService, AnotherUsersCommandCannotForgeRowsOrDriveTheTerminal) {
  Daemon d("1xH100-80GB");
  // A command whose words hold a newline that would start a forged row, a terminal escape that
  // would set the admin's window title, and a bidirectional override.
  const std::string forged = "x\n999    root       default    running    --gpus 1";
  const std::string title = "\x1b]0;pwned\x07";
  int64_t id = d.Submit({"true", forged, title,
                         "\xe2\x80\xae"
                         "gpj.exe"},
                        {{"gpu-fraction", 0.25}})
                   .body["id"];
  d.WaitFor(id, "final");
  RunResult ps = d.Cli({"ps", "--all"});
  ASSERT_EQ(ps.status, 0) << ps.err;
  EXPECT_EQ(std::count(ps.out.begin(), ps.out.end(), '\n'), 2) << ps.out;  // Header and one row.
  EXPECT_EQ(ps.out.find('\x1b'), std::string::npos) << ps.out;
  EXPECT_EQ(ps.out.find('\x07'), std::string::npos) << ps.out;
  EXPECT_EQ(ps.out.find("\xe2\x80\xae"), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find("true x\\n999"), std::string::npos) << ps.out;
  // JSON stays exact.
  json listed = json::parse(d.Cli({"ps", "--all", "--json"}).out);
  ASSERT_EQ(listed["jobs"].size(), 1u);
  EXPECT_EQ(listed["jobs"][0]["command"][1], forged);
  EXPECT_EQ(listed["jobs"][0]["command"][2], title);
}

TEST(NodeService, ListingsHaveTablesAndJson) {
  Daemon d("1xH100-80GB,1xA30-24GB", {},
           "version: 1\nqueues:\n  - name: a\n    quota: 0.5\n  - name: b\n");
  int64_t id = d.Submit({"sleep", "30"}, {{"gpu-fraction", 0.25}}, "b").body["id"];
  d.WaitFor(id, "running");
  RunResult ps = d.Cli({"ps"});
  EXPECT_EQ(ps.status, 0);
  EXPECT_NE(ps.out.find("running"), std::string::npos) << ps.out;
  RunResult ps_json = d.Cli({"ps", "--json"});
  EXPECT_EQ(json::parse(ps_json.out)["jobs"][0]["id"], id);
  RunResult status = d.Cli({"status", "--json"});
  json s = json::parse(status.out);
  ASSERT_EQ(s["gpus"].size(), 2u);
  EXPECT_EQ(s["gpus"][1]["model"], "A30-24GB");
  EXPECT_EQ(s["gpus"][1]["workloads"][0]["job"], id) << "the smaller GPU that holds it";
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find("A30-24GB"), std::string::npos) << table.out;
  json q = json::parse(d.Cli({"queues", "--json"}).out);
  EXPECT_EQ(q["queues"][0]["name"], "a");
  EXPECT_EQ(q["queues"][0]["quota"], 0.5);
  EXPECT_EQ(q["queues"][1]["running"], 1);
  d.Cli({"cancel", std::to_string(id)});
}

// `gpufrac ARGS` against `d` in the background, its output (stdout and stderr) going to `out`
// (a file, or a terminal's side); returns its pid.
pid_t StartCli(Daemon& d, const std::vector<std::string>& args, int out) {
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    setenv("GPUFRAC_SOCKET", d.socket().c_str(), 1);
    std::vector<std::string> argv = {Bin("gpufrac")};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> ptrs;
    for (std::string& a : argv) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    execv(ptrs[0], ptrs.data());
    _exit(127);
  }
  return pid;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits until `path` holds `text` `count` times (or 10 s pass); returns the content.
std::string WaitForText(const std::string& path, const std::string& text, int count = 1) {
  std::string content;
  for (int i = 0; i < 500; ++i) {
    content = ReadFile(path);
    int found = 0;
    for (size_t at = content.find(text); at != std::string::npos; at = content.find(text, at + 1)) {
      ++found;
    }
    if (found >= count) return content;
    std::this_thread::sleep_for(20ms);
  }
  ADD_FAILURE() << "never saw \"" << text << "\" " << count << " times in:\n" << content;
  return content;
}

int StopWith(pid_t pid, int sig) {
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(NodeService, StatusWatchShowsEachRoundUntilInterruptedAndOutlivesAServiceRestart) {
  Daemon d("1xH100-80GB");
  const std::string out_path = d.dir() + "/watch.out";
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(out, 0);
  pid_t watch = StartCli(d, {"status", "--watch", "0.2"}, out);
  close(out);
  // Not a terminal: rounds follow each other, each under its time line, no screen control.
  std::string first = WaitForText(out_path, "Every 0.2s: gpufrac status", 2);
  EXPECT_EQ(first.find('\033'), std::string::npos) << first;
  EXPECT_EQ(first.find("job "), std::string::npos) << first;
  int64_t id = d.Submit({"sleep", "30"}, {{"gpu-memory", "4G"}}).body["id"];
  d.WaitFor(id, "running");
  WaitForText(out_path, "job " + std::to_string(id));
  // The service goes away and comes back: the watch says so and goes on.
  d.Stop(SIGTERM);
  WaitForText(out_path, "gpufrac status: ");
  d.Start();
  std::string before = ReadFile(out_path);
  size_t rounds = 0;
  for (size_t at = before.find("Every"); at != std::string::npos;
       at = before.find("Every", at + 1)) {
    ++rounds;
  }
  WaitForText(out_path, "Every 0.2s", static_cast<int>(rounds) + 2);
  std::string after = ReadFile(out_path).substr(before.size());
  EXPECT_NE(after.find("H100-80GB"), std::string::npos) << after;
  EXPECT_EQ(StopWith(watch, SIGINT), 0) << "Ctrl-C ends a watch normally";
  d.Cli({"cancel", std::to_string(id)});
}

TEST(NodeService, PsWatchRedrawsInPlaceOnATerminal) {
  Daemon d("1xH100-80GB");
  int terminal = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  ASSERT_EQ(grantpt(terminal), 0);
  ASSERT_EQ(unlockpt(terminal), 0);
  int side = open(ptsname(terminal), O_RDWR | O_NOCTTY);
  ASSERT_GE(side, 0);
  pid_t watch = StartCli(d, {"ps", "--watch", "0.2"}, side);
  close(side);
  std::string screen;
  char buffer[4096];
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    ssize_t n = read(terminal, buffer, sizeof(buffer));
    if (n <= 0) break;
    screen.append(buffer, static_cast<size_t>(n));
    size_t clears = 0;
    for (size_t at = screen.find("\033[H\033[2J"); at != std::string::npos;
         at = screen.find("\033[H\033[2J", at + 1)) {
      ++clears;
    }
    if (clears >= 2) break;
  }
  EXPECT_EQ(screen.rfind("\033[H\033[2JEvery 0.2s: gpufrac ps", 0), 0u) << screen;
  EXPECT_NE(screen.find("\033[H\033[2J", 1), std::string::npos) << "a second round: " << screen;
  EXPECT_NE(screen.find("STATE"), std::string::npos) << screen;
  EXPECT_EQ(StopWith(watch, SIGINT), 0);
  close(terminal);
}

TEST(NodeService, AWatchIntervalThatIsNotSecondsIsRefused) {
  Daemon d("1xH100-80GB");
  RunResult r = d.Cli({"status", "--watch", "soon"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "gpufrac status: --watch is \"soon\"; give the seconds between redraws, from 0.1 to "
            "86400 (e.g. --watch 5)\n");
}

TEST(NodeService, TheCommandNeverStartsASecondServiceBesideAnInstalledOne) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to act as an ordinary user";
  Daemon d("1xL4");  // The "system" service: its socket is root's, mode 0600.
  char tmpl[] = "/tmp/gpufrac-home-XXXXXX";
  std::string home = mkdtemp(tmpl);
  chown(home.c_str(), kNobody, kNobody);
  std::string gpufrac = Bin("gpufrac");
  const std::string state = d.dir() + "/system-state";  // The system service's state directory.
  std::filesystem::create_directories(state);
  auto ps_as_nobody = [&](const std::string& system_socket, const char* file) {
    int rc = AsNobody([&] {
      std::string cmd =
          "HOME=" + home +
          " XDG_RUNTIME_DIR= GPUFRAC_SOCKET= GPUFRAC_SIM= " + "GPUFRAC_SYSTEM_STATE_DIR=" + state +
          " GPUFRAC_SYSTEM_SOCKET=" + system_socket + " " + gpufrac + " ps > " + home + "/" + file +
          " 2>&1";
      return WEXITSTATUS(system(cmd.c_str()));
    });
    std::ifstream in(home + "/" + file);
    std::stringstream text;
    text << in.rdbuf();
    return std::make_pair(rc, text.str());
  };
  // Not allowed on the system socket: says so, and starts nothing of its own.
  auto [denied_rc, denied] = ps_as_nobody(d.socket(), "denied");
  EXPECT_EQ(denied_rc, 1);
  EXPECT_NE(denied.find("permission denied on " + d.socket() + ": ask to be added to group root"),
            std::string::npos)
      << denied;
  // The system service is installed (its socket's directory is there) but not running.
  const std::string stopped = d.dir() + "/stopped/gpufracd.sock";
  std::filesystem::create_directories(d.dir() + "/stopped");
  auto [stopped_rc, down] = ps_as_nobody(stopped, "down");
  EXPECT_EQ(stopped_rc, 1);
  EXPECT_NE(down.find("the system service is not running (nothing answers on " + stopped + ")"),
            std::string::npos)
      << down;
  // No socket directory, but a state directory a service ran in (its database): installed too.
  const std::string gone = d.dir() + "/gone/gpufracd.sock";
  std::ofstream(state + "/gpufracd.db") << "";
  auto [ran_rc, ran] = ps_as_nobody(gone, "ran");
  EXPECT_EQ(ran_rc, 1);
  EXPECT_NE(ran.find("the system service is not running"), std::string::npos) << ran;
  EXPECT_FALSE(std::filesystem::exists(home + "/.local/state/gpufrac")) << "a service was started";
  // What root's failed first start leaves (a log, no database) is no service: the user's own is
  // tried (and fails here for want of GPUs: GPUFRAC_SIM is empty).
  std::filesystem::remove(state + "/gpufracd.db");
  std::ofstream(state + "/gpufracd.log") << "gpufracd: no NVIDIA driver found\n";
  auto [left_rc, left] = ps_as_nobody(gone, "left");
  EXPECT_EQ(left_rc, 1);
  EXPECT_EQ(left.find("the system service is not running"), std::string::npos) << left;
  EXPECT_NE(left.find("could not start gpufracd"), std::string::npos) << left;
  std::error_code ec;
  std::filesystem::remove_all(home, ec);
}

TEST(NodeService, TheFirstCommandStartsAServiceForTheUser) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to act as an ordinary user";
  char tmpl[] = "/tmp/gpufrac-home-XXXXXX";
  std::string home = mkdtemp(tmpl);
  chown(home.c_str(), kNobody, kNobody);
  std::string out = home + "/out";
  std::string gpufrac = Bin("gpufrac");
  // No system service here, whatever the host has installed (/run/gpufrac, /var/lib/gpufrac).
  const std::string no_system =
      "HOME=" + home + " XDG_RUNTIME_DIR= GPUFRAC_SOCKET= " + "GPUFRAC_SYSTEM_SOCKET=" + home +
      "/no-system/gpufracd.sock " + "GPUFRAC_SYSTEM_STATE_DIR=" + home + "/no-system ";
  auto run_ps = [&](const char* file) {
    return AsNobody([&] {
      std::string cmd =
          no_system + "GPUFRAC_SIM=1xL4 " + gpufrac + " ps > " + home + "/" + file + " 2>&1";
      return WEXITSTATUS(system(cmd.c_str()));
    });
  };
  // No GPU and no GPUFRAC_SIM: the service cannot start, and the command says why at once.
  auto begin = std::chrono::steady_clock::now();
  int failed = AsNobody([&] {
    std::string cmd = no_system + "GPUFRAC_SIM= " + gpufrac + " ps > " + home + "/nogpu 2>&1";
    return WEXITSTATUS(system(cmd.c_str()));
  });
  EXPECT_EQ(failed, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 5s);
  EXPECT_EQ(run_ps("first"), 0);
  EXPECT_EQ(run_ps("second"), 0);
  auto read = [&](const char* file) {
    std::ifstream in(home + "/" + file);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  EXPECT_NE(read("first").find("started gpufracd for you"), std::string::npos) << read("first");
  EXPECT_EQ(read("second").find("started gpufracd"), std::string::npos) << read("second");
  EXPECT_NE(read("nogpu").find("could not start gpufracd"), std::string::npos) << read("nogpu");
  EXPECT_NE(read("nogpu").find("--sim"), std::string::npos) << read("nogpu");
  std::ifstream pid_file(home + "/.local/state/gpufrac/gpufracd.pid");
  pid_t pid = 0;
  pid_file >> pid;
  ASSERT_GT(pid, 0);
  kill(pid, SIGTERM);
  for (int i = 0; i < 100 && kill(pid, 0) == 0; ++i) usleep(20000);
  // The user's simulated machine, which is named after the user's state directory.
  const std::string machine = node::ServiceInstanceName(home + "/.local/state/gpufrac");
  AsNobody([&] { return simgpu::RemoveSharedMachine(machine) ? 0 : 1; });
  testing::RemoveRecordedBudgetDir(home + "/.local/state/gpufrac/budget-dir");
  std::error_code ec;
  std::filesystem::remove_all(home, ec);
}

// MPS mode: set at the first start, changed only on an idle GPU, kept across restarts (the state
// directory's record, not the flag, decides then); refused where it cannot be.
TEST(NodeService, MpsModeIsChangedOnlyOnIdleGpusAndKeptAcrossRestarts) {
  Daemon d("1xH100-80GB", {"--mps-gpus", "0", "--socket-group", "nogroup"});
  auto mode = [&] { return d.Get("/v1/status").body["gpus"][0].value("mode", std::string("?")); };
  EXPECT_EQ(mode(), "mps");
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find("H100-80GB (mps)"), std::string::npos) << table.out;

  int64_t id = d.Submit({"sh", "-c", "sleep 30"}, {{"gpus", 1}}).body["id"];
  d.WaitFor(id, "running");
  RunResult busy = d.Cli({"mps", "disable", "--gpu", "0"});
  EXPECT_EQ(busy.status, 1);
  EXPECT_NE(busy.err.find("GPU 0 runs jobs; wait for them to end or cancel them first"),
            std::string::npos)
      << busy.err;
  d.Cli({"cancel", std::to_string(id)});
  d.WaitFor(id, "final");
  RunResult off = d.Cli({"mps", "disable", "--gpu", "0"});
  EXPECT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(off.out, "GPU 0: shared (MPS mode off)\n");
  EXPECT_EQ(d.Cli({"mps", "disable", "--gpu", "0"}).out, "GPU 0: already shared\n");
  RunResult missing = d.Cli({"mps", "enable", "--gpu", "7"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("no GPU 7 on this node"), std::string::npos) << missing.err;

  // The record wins over --mps-gpus 0 from now on.
  d.Stop(SIGTERM);
  d.Start();
  EXPECT_EQ(mode(), "shared");
  RunResult on = d.Cli({"mps", "enable", "--gpu", "0", "--json"});
  EXPECT_EQ(json::parse(on.out)["changed"], true) << on.out;
  d.Stop(SIGTERM);
  d.Start();
  EXPECT_EQ(mode(), "mps");

  // Only admins may change it.
  if (getuid() != 0) return;
  const std::string socket = d.socket();
  int rc = AsNobody([&] {
    httplib::Client c(socket);
    c.set_address_family(AF_UNIX);
    auto r = c.Post("/v1/gpus/0/mps", R"({"enabled": false})", "application/json");
    return r && r->status == 403 &&
                   r->body.find("only root and members of the admin group") != std::string::npos
               ? 0
               : 1;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(mode(), "mps");
}

TEST(NodeService, AGpuServingWholeJobsOnlyCannotBeInMpsMode) {
  Daemon d("2xH100-80GB", {"--whole-gpus", "1"});
  RunResult r = d.Cli({"mps", "enable", "--gpu", "1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("serves whole-GPU jobs only"), std::string::npos) << r.err;
  RunResult both = RunCommand({Bin("gpufracd"), "--sim", "2xH100-80GB", "--state-dir",
                               d.dir() + "/other", "--whole-gpus", "1", "--mps-gpus", "1"},
                              {});
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.err.find("is in both --whole-gpus and --mps-gpus"), std::string::npos) << both.err;
  // The simulated machine the refused service had opened for its state directory.
  simgpu::RemoveSharedMachine(node::ServiceInstanceName(d.dir() + "/other"));
}

// A job on an MPS GPU runs as a client of the GPU's daemon, which the service started for it: it
// gets the daemon's pipe directory, its compute limit as its share of the SMs and its memory as
// its pinned limit, and the driver makes it a client of the daemon's server; the daemon is watched
// (killed, it is started again and the job says so) and stopped when the GPU leaves MPS mode.
TEST(NodeService, JobsOnAnMpsGpuAreClientsOfItsDaemon) {
  Daemon d("1xH100-80GB", {"--mps-gpus", "0", "--gpu-compute-policy", "strict"});
  const std::string marker = d.dir() + "/may-end";
  int64_t id = d.Submit({"sh", "-c",
                         "env | grep ^CUDA_MPS_ | sort; " + BuildPath("bin/mps_probe") +
                             " info; while [ ! -e " + marker + " ]; do sleep 0.05; done"},
                        {{"gpu-memory", "20G"}, {"gpu-compute", "0.25"}})
                   .body["id"];
  d.WaitFor(id, "running");
  const std::string pipe = d.dir() + "/state/mps/0/pipe";
  std::this_thread::sleep_for(300ms);
  std::ifstream out(d.dir() + "/state/jobs/" + std::to_string(id) + "/stdout.log");
  std::ifstream err(d.dir() + "/state/jobs/" + std::to_string(id) + "/stderr.log");
  std::stringstream env;
  env << out.rdbuf() << err.rdbuf();
  EXPECT_NE(env.str().find("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n"), std::string::npos)
      << env.str();
  EXPECT_NE(env.str().find("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M\n"), std::string::npos)
      << env.str();
  EXPECT_NE(env.str().find("CUDA_MPS_PIPE_DIRECTORY=" + pipe + "\n"), std::string::npos)
      << env.str();
  // It is a client of the daemon's server: its kernels may use a quarter of the 132 SMs.
  EXPECT_NE(env.str().find("sms=33"), std::string::npos) << env.str();
  // The daemon runs, in directories of the service's own.
  auto daemon_pid = [&] {
    std::ifstream in(pipe + "/nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    in >> pid;
    return pid;
  };
  const pid_t first = daemon_pid();
  ASSERT_GT(first, 0);
  EXPECT_EQ(kill(first, 0), 0);
  struct stat st;
  ASSERT_EQ(stat(pipe.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 022, 0u);
  RunResult table = d.Cli({"status"});
  EXPECT_NE(table.out.find("sm 25%"), std::string::npos) << table.out;

  // Killed, it is started again, and the job says so.
  ASSERT_EQ(kill(first, SIGKILL), 0);
  pid_t second = 0;
  for (int i = 0; i < 200 && (second == 0 || second == first); ++i) {
    std::this_thread::sleep_for(20ms);
    second = daemon_pid();
  }
  EXPECT_NE(second, first);
  EXPECT_EQ(kill(second, 0), 0);
  std::ofstream(marker).put('\n');
  json job = d.WaitFor(id, "final");
  EXPECT_NE(job.value("reason", "").find("its MPS daemon (GPU 0) ended while it ran"),
            std::string::npos)
      << job.dump();

  // Out of MPS mode, the daemon stops.
  EXPECT_EQ(d.Cli({"mps", "disable", "--gpu", "0"}).status, 0);
  for (int i = 0; i < 100 && kill(second, 0) == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_NE(kill(second, 0), 0);
}

// An MPS control daemon that stops answering holds up only the jobs starting on its GPU, and
// those only until the control command's timeout: the service's lock is not held meanwhile, so
// `status` answers and a job on another GPU is submitted, started and finished at once.
TEST(NodeService, AnMpsDaemonThatStopsAnsweringStallsNeitherTheApiNorOtherGpus) {
  Daemon d("1xH100-80GB,1xA30-24GB", {"--mps-gpus", "0"});
  const std::string marker = d.dir() + "/may-end";
  const json on_mps = {{"gpu-memory", "10G"}, {"gpu-model", "H100-80GB"}};
  // A first job on the MPS GPU starts its daemon.
  int64_t first =
      d.Submit({"sh", "-c", "while [ ! -e " + marker + " ]; do sleep 0.05; done"}, on_mps)
          .body["id"];
  d.WaitFor(first, "running");
  pid_t daemon = 0;
  std::ifstream(d.dir() + "/state/mps/0/pipe/nvidia-cuda-mps-control.pid") >> daemon;
  ASSERT_GT(daemon, 0);
  // It stops answering (it still runs), and a second job's start asks it for its servers.
  ASSERT_EQ(kill(daemon, SIGSTOP), 0);
  int64_t stuck = d.Submit({"true"}, on_mps).body["id"];
  std::this_thread::sleep_for(500ms);

  const auto begin = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::steady_clock::now() - begin; };
  EXPECT_EQ(d.Get("/v1/status").status, 200);
  EXPECT_LT(elapsed(), 1s) << "status waited for the MPS daemon";
  int64_t other = d.Submit({"true"}, {{"gpu-memory", "4G"}, {"gpu-model", "A30-24GB"}}).body["id"];
  json done = d.WaitFor(other, "final", 10s);
  EXPECT_EQ(done["state"], "succeeded") << done.dump();
  EXPECT_EQ(done["gpus"][0]["index"], 1) << done.dump();
  EXPECT_LT(elapsed(), 2s) << "the job on the other GPU waited for the MPS daemon";
  EXPECT_EQ(d.Job(stuck)["state"], "starting");
  // Another one waits behind it, and is cancelled at once.
  int64_t dropped = d.Submit({"true"}, on_mps).body["id"];
  d.WaitFor(dropped, "starting", 1s);
  EXPECT_EQ(d.Cli({"cancel", std::to_string(dropped)}).status, 0);
  EXPECT_EQ(d.Job(dropped)["state"], "cancelled");
  EXPECT_LT(elapsed(), 3s) << "the cancel waited for the MPS daemon";

  // The stuck start ends when the control command times out; the job says why.
  json failed = d.WaitFor(stuck, "final", 15s);
  EXPECT_EQ(failed["state"], "failed") << failed.dump();
  EXPECT_NE(failed.value("reason", "").find("did not answer within"), std::string::npos)
      << failed.dump();
  ASSERT_EQ(kill(daemon, SIGCONT), 0);
  std::ofstream(marker).put('\n');
  EXPECT_EQ(d.WaitFor(first, "final")["state"], "succeeded");
  // The daemon answers again: the cancelled job's late readiness starts nothing.
  std::this_thread::sleep_for(300ms);
  json cancelled = d.Job(dropped);
  EXPECT_EQ(cancelled["state"], "cancelled");
  EXPECT_EQ(cancelled.value("reason", ""), "cancelled before it started") << cancelled.dump();
}

// After a restart, the service takes back the MPS daemon its running job is a client of (the
// same process, not a new one) and watches it: killed, it is started again and the job says so.
TEST(NodeService, ARestartedServiceTakesBackAndWatchesTheMpsDaemonOfItsRunningJob) {
  Daemon d("1xH100-80GB", {"--mps-gpus", "0"});
  const std::string ready = d.dir() + "/client-ready";
  int64_t id = d.Submit({BuildPath("bin/mps_probe"), "--ready", ready, "hold", "60000"},
                        {{"gpu-memory", "10G"}})
                   .body["id"];
  d.WaitFor(id, "running");
  for (int i = 0; i < 250 && !std::filesystem::exists(ready); ++i)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(std::filesystem::exists(ready)) << "the job never became an MPS client";
  const std::string pid_file = d.dir() + "/state/mps/0/pipe/nvidia-cuda-mps-control.pid";
  auto daemon_pid = [&] {
    pid_t pid = 0;
    std::ifstream(pid_file) >> pid;
    return pid;
  };
  const pid_t first = daemon_pid();
  ASSERT_GT(first, 0);

  // It serves the job's client: the stopping service leaves it, the next takes it back.
  d.Stop(SIGTERM);
  EXPECT_EQ(kill(first, 0), 0) << "the daemon stopped with its client still there";
  d.Start();
  for (int i = 0; i < 100 && d.Log().find("taken back") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(d.Log().find("MPS daemon of GPU 0: pid " + std::to_string(first) +
                         ", left by the previous service, taken back"),
            std::string::npos)
      << d.Log();
  EXPECT_EQ(daemon_pid(), first);

  ASSERT_EQ(kill(first, SIGKILL), 0);
  pid_t second = 0;
  for (int i = 0; i < 200 && (second == 0 || second == first); ++i) {
    std::this_thread::sleep_for(20ms);
    second = daemon_pid();
  }
  EXPECT_NE(second, first) << "the daemon was not started again";
  d.Cli({"cancel", std::to_string(id)});
  json job = d.WaitFor(id, "final");
  EXPECT_NE(job.value("reason", "").find("its MPS daemon (GPU 0) ended while it ran"),
            std::string::npos)
      << job.dump();
}

}  // namespace
}  // namespace gpufrac::testing
