// MPS on the simulated GPU, without gpufrac's limiter: the nvidia-cuda-mps-control and
// nvidia-cuda-mps-server stand-ins and CUDA clients (mps_probe) reproduce what NVIDIA documents:
// the daemon's files and commands, one server per user with another user's client waiting, SM
// shares that let clients run at once, pinned memory limits, settings a client can only lower,
// fatal faults reaching every client of a server, and what clients see when the server or the
// daemon dies. Times come from the simulator's ground truth (engine_truth.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "machine/mps_control.h"

namespace gpufrac::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kH100Sms = 132;
constexpr unsigned long long kMiB = 1ull << 20;
constexpr unsigned long long kContextMiB = 527;  // an H100 context (catalogue)
// Blocks of 1024 threads for a kernel of `ms` on a whole H100: 2 us + threads / (132 * 2048) us.
unsigned long long FullGpuBlocks(double ms) {
  return static_cast<unsigned long long>(ms * 1000 * kH100Sms * 2048 / 1024);
}

std::string SimgpuBin(const std::string& name) {
  return std::string(GPUFRAC_SIMGPU_DIR) + "/bin/" + name;
}

std::uint64_t MonotonicNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1000000000u + now.tv_nsec;
}

// Running: a zombie whose parent (init, for the daemon) has not reaped it yet counts as ended.
bool Alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ||
         (text[paren + 2] != 'Z' && text[paren + 2] != 'X');
}

bool WaitUntil(const std::function<bool()>& done, int timeout_ms) {
  const Clock::time_point end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<pid_t> Pids(const std::string& text) {
  std::vector<pid_t> pids;
  std::istringstream in(text);
  for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

// A probe run on a thread of its own (RunCommand waits for it), with a ready file that holds its
// pid once its context exists.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             std::string ready)
      : ready_(std::move(ready)) {
    std::vector<std::string> full = {argv[0], "--ready", ready_};
    full.insert(full.end(), argv.begin() + 1, argv.end());
    thread_ = std::thread([this, full, env] {
      result_ = RunCommand(full, env);
      done_ = true;
    });
  }
  ~Background() {
    if (thread_.joinable()) thread_.join();
  }
  // The probe's pid once it is ready; 0 if it is not within `timeout_ms`.
  pid_t WaitReady(int timeout_ms = 5000) {
    if (!WaitUntil([&] { return fs::exists(ready_); }, timeout_ms)) return 0;
    return static_cast<pid_t>(std::stol(ReadFile(ready_)));
  }
  bool done() const { return done_; }
  const RunResult& Wait() {
    thread_.join();
    return result_;
  }

 private:
  std::string ready_;
  std::thread thread_;
  RunResult result_;
  std::atomic<bool> done_{false};
};

class SimGpuMpsTest : public ::testing::Test {
 protected:
  // The simulated machine of the test.
  virtual std::string Config() const { return "1xH100-80GB"; }

  void SetUp() override {
    machine_ = std::make_unique<SimMachine>(Config());
    char pattern[] = "/tmp/simgpu-mps-XXXXXX";
    dir_ = mkdtemp(pattern);
    pipe_ = dir_ + "/pipe";
    log_ = dir_ + "/log";
  }

  void TearDown() override {
    const pid_t daemon = DaemonPid();
    std::vector<pid_t> servers;
    if (Alive(daemon)) {
      servers = Pids(Ctl("get_server_list").out);
      Ctl("quit");
      WaitUntil([&] { return !Alive(daemon); }, 3000);
    }
    // Whatever did not end by itself (a test that failed half-way) is ended here.
    if (Alive(daemon)) kill(daemon, SIGKILL);
    for (pid_t server : servers) {
      if (!WaitUntil([&] { return !Alive(server); }, 2000)) kill(server, SIGKILL);
    }
    fs::remove_all(dir_);
  }

  std::map<std::string, std::string> Env(const std::map<std::string, std::string>& extra = {}) {
    return Merge(Merge(machine_->Env(),
                       {{"CUDA_MPS_PIPE_DIRECTORY", pipe_}, {"CUDA_MPS_LOG_DIRECTORY", log_}}),
                 extra);
  }

  // The daemon of the test's pipe directory as gpufrac's MPS control client reaches it.
  machine::MpsControlOptions Control(const std::map<std::string, std::string>& extra = {}) {
    machine::MpsControlOptions options{.control = SimgpuBin("nvidia-cuda-mps-control"),
                                       .pipe_dir = pipe_,
                                       .log_dir = log_,
                                       .timeout = std::chrono::seconds(20)};
    for (const auto& [name, value] : Merge(machine_->Env(), extra)) {
      options.env.push_back(name + "=" + value);
    }
    return options;
  }

  // The client's outcome as these tests read it: status 0 and what the front end printed, or 1
  // and the client's error, which names the program's exit code and its stderr.
  static RunResult AsRunResult(const Status& status, std::string out = "") {
    RunResult r;
    r.status = status.ok() ? 0 : 1;
    r.out = std::move(out);
    r.err = status.message();
    return r;
  }

  RunResult StartDaemon(const std::map<std::string, std::string>& extra = {}) {
    return AsRunResult(machine::StartMpsControlDaemon(Control(extra)));
  }

  // The front end with `commands` (one per line) on its standard input.
  RunResult Ctl(const std::string& commands) {
    StatusOr<std::string> reply = machine::SendMpsControlCommands(Control(), commands + "\n");
    return reply.ok() ? AsRunResult(OkStatus(), *reply) : AsRunResult(reply.status());
  }

  pid_t DaemonPid() {
    const std::string text = ReadFile(pipe_ + "/nvidia-cuda-mps-control.pid");
    return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
  }

  pid_t OnlyServer() {
    const std::vector<pid_t> servers = Pids(Ctl("get_server_list").out);
    return servers.size() == 1 ? servers[0] : 0;
  }

  RunResult Probe(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& extra = {}) {
    std::vector<std::string> argv = {BuildPath("bin/mps_probe")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, Env(extra));
  }

  std::unique_ptr<Background> ProbeInBackground(
      const std::vector<std::string>& args, const std::map<std::string, std::string>& extra = {}) {
    std::vector<std::string> argv = {BuildPath("bin/mps_probe")};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Background>(argv, Env(extra),
                                        dir_ + "/ready." + std::to_string(++readies_));
  }

  std::unique_ptr<SimMachine> machine_;
  std::string dir_, pipe_, log_;
  int readies_ = 0;
};

// A start time far enough ahead for every probe of a test to be up by then.
std::string StartIn(int ms) { return std::to_string(MonotonicNs() + ms * 1000000ull); }

double Number(const RunResult& result, const std::string& key) {
  const std::string text = result.Get(key);
  return text.empty() ? -1 : std::stod(text);
}

TEST_F(SimGpuMpsTest, DaemonStartsWithItsFilesAnswersAndQuits) {
  // No daemon yet: the front end says so, and a CUDA program runs without MPS.
  RunResult none = Ctl("get_server_list");
  EXPECT_EQ(1, none.status);
  EXPECT_NE(
      std::string::npos,
      none.err.find("(exit code 1): nvidia-cuda-mps-control: cannot find an MPS control daemon"))
      << none.err;
  EXPECT_EQ(kH100Sms, Probe({"info"}).GetInt("sms"));

  RunResult started = StartDaemon();
  ASSERT_EQ(0, started.status) << started.err;
  const pid_t daemon = DaemonPid();
  EXPECT_TRUE(Alive(daemon));
  EXPECT_TRUE(fs::exists(pipe_ + "/control"));
  const std::string control_log = ReadFile(log_ + "/control.log");
  EXPECT_NE(std::string::npos,
            control_log.find("Control " + std::to_string(daemon) +
                             "] Starting control daemon using socket " + pipe_ + "/control"))
      << control_log;
  // A second daemon on the same pipe directory refuses to start.
  RunResult second = StartDaemon();
  EXPECT_EQ(1, second.status);
  EXPECT_NE(std::string::npos, second.err.find("(exit code 1)")) << second.err;
  EXPECT_NE(std::string::npos, second.err.find("already running")) << second.err;

  EXPECT_EQ("", Ctl("get_server_list").out);
  ASSERT_EQ(0, Ctl("start_server -uid " + std::to_string(getuid())).status);
  const pid_t server = OnlyServer();
  ASSERT_GT(server, 0);
  EXPECT_NE(std::string::npos,
            ReadFile(log_ + "/server.log").find("Server " + std::to_string(server)));
  EXPECT_NE(std::string::npos, ReadFile(log_ + "/control.log")
                                   .find("Starting new server " + std::to_string(server) +
                                         " for user " + std::to_string(getuid())));
  EXPECT_EQ("", Ctl("get_client_list " + std::to_string(server)).out);
  // A client of that server is listed while it lives.
  auto client = ProbeInBackground({"hold", "300"});
  const pid_t client_pid = client->WaitReady();
  ASSERT_GT(client_pid, 0);
  EXPECT_EQ(std::to_string(client_pid) + "\n",
            Ctl("get_client_list " + std::to_string(server)).out);
  EXPECT_EQ(0, client->Wait().GetInt("init"));
  EXPECT_TRUE(WaitUntil(
      [&] { return Ctl("get_client_list " + std::to_string(server)).out.empty(); }, 2000));

  RunResult quit = Ctl("quit");
  EXPECT_EQ(0, quit.status) << quit.err;
  EXPECT_TRUE(WaitUntil([&] { return !Alive(daemon) && !Alive(server); }, 3000));
  EXPECT_FALSE(fs::exists(pipe_ + "/nvidia-cuda-mps-control.pid"));
  EXPECT_FALSE(fs::exists(pipe_ + "/control"));
  EXPECT_NE(std::string::npos,
            ReadFile(log_ + "/control.log")
                .find("Server " + std::to_string(server) + " exited with status 0"));
}

TEST_F(SimGpuMpsTest, CommandsKeepSettingsAndRejectWhatTheyCannotTake) {
  ASSERT_EQ(0, StartDaemon({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "40"}}).status);
  // The daemon's environment sets the default; commands change it for servers started later.
  EXPECT_EQ("40.0\n", Ctl("get_default_active_thread_percentage").out);
  EXPECT_EQ(
      "25.0\n25.0\n",
      Ctl("set_default_active_thread_percentage 25\nget_default_active_thread_percentage").out);
  EXPECT_EQ("unlimited\n", Ctl("get_default_device_pinned_mem_limit 0").out);
  EXPECT_EQ("2G\n900M\nunlimited\n",
            Ctl("set_default_device_pinned_mem_limit 0 2G\n"
                "set_default_device_pinned_mem_limit " +
                machine_->Uuid(0) +
                " 900M\n"
                "get_default_device_pinned_mem_limit 0\n"
                "get_default_device_pinned_mem_limit " +
                machine_->Uuid(0) + "\nget_default_device_pinned_mem_limit 1")
                .out);
  ASSERT_EQ(0, Ctl("start_server -uid " + std::to_string(getuid())).status);
  const std::string server = std::to_string(OnlyServer());
  // The server took the defaults; of the two limits for device 0 the one set last counts.
  EXPECT_EQ("25.0\n900M\n900M\n",
            Ctl("get_active_thread_percentage " + server + "\nget_device_pinned_mem_limit " +
                server + " 0" + "\nget_device_pinned_mem_limit " + server + " " + machine_->Uuid(0))
                .out);
  EXPECT_EQ("60.0\n60.0\n3G\n",
            Ctl("set_active_thread_percentage " + server + " 60\n" +
                "get_active_thread_percentage " + server + "\n" + "set_device_pinned_mem_limit " +
                server + " 0 3G\n" + "get_device_pinned_mem_limit " + server + " 0")
                .out);
  // Rejected commands get an "Error:" line; the front end still ends well.
  const RunResult bad =
      Ctl("frobnicate\n"
          "set_default_active_thread_percentage 0\n"
          "set_default_active_thread_percentage 150\n"
          "set_default_active_thread_percentage abc\n"
          "set_default_device_pinned_mem_limit 0 12X\n"
          "set_default_device_pinned_mem_limit 0\n"
          "get_client_list 999999999\n"
          "set_device_pinned_mem_limit " +
          server + " 7 1G\nstart_server -uid\n");
  EXPECT_EQ(0, bad.status);
  std::istringstream lines(bad.out);
  std::vector<std::string> replies;
  for (std::string line; std::getline(lines, line);) replies.push_back(line);
  ASSERT_EQ(9u, replies.size()) << bad.out;
  EXPECT_EQ("Error: unknown command \"frobnicate\"", replies[0]);
  for (const std::string& reply : replies) EXPECT_EQ(0u, reply.rfind("Error: ", 0)) << reply;
  EXPECT_NE(std::string::npos, replies[6].find("no MPS server with PID 999999999"));
  EXPECT_NE(std::string::npos, replies[7].find("no device \"7\""));
  // Nothing changed.
  EXPECT_EQ("25.0\n", Ctl("get_default_active_thread_percentage").out);
}

TEST_F(SimGpuMpsTest, AnotherUsersClientWaitsUntilTheServerOfTheFirstHasExited) {
  ASSERT_EQ(0, StartDaemon().status);
  // User 5001's client holds its server for 800 ms.
  auto first = ProbeInBackground({"hold", "800"}, {{"SIMGPU_UID", "5001"}});
  ASSERT_GT(first->WaitReady(), 0);
  const Clock::time_point first_ready = Clock::now();
  const pid_t server_5001 = OnlyServer();
  ASSERT_GT(server_5001, 0);
  // A second client of the same user joins the same server at once.
  RunResult same = Probe({"info"}, {{"SIMGPU_UID", "5001"}});
  EXPECT_EQ(0, same.GetInt("init"));
  EXPECT_EQ(server_5001, OnlyServer());
  // User 5002's client waits in cuInit until 5001's server has exited with its last client.
  auto other = ProbeInBackground({"info"}, {{"SIMGPU_UID", "5002"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(other->done());
  EXPECT_EQ(server_5001, OnlyServer());
  ASSERT_GT(other->WaitReady(3000), 0);
  const double waited =
      std::chrono::duration<double, std::milli>(Clock::now() - first_ready).count();
  const RunResult result = other->Wait();
  EXPECT_EQ(0, result.GetInt("init"));
  EXPECT_EQ(0, first->Wait().status);
  std::printf("user 5002's client got its server %.0f ms after user 5001's holding one (800 ms)\n",
              waited);
  EXPECT_GE(waited, 780);
  EXPECT_LE(waited, 1300);
  EXPECT_FALSE(Alive(server_5001));
  const pid_t server_5002 = OnlyServer();
  EXPECT_GT(server_5002, 0);
  EXPECT_NE(server_5001, server_5002);
  const std::string log = ReadFile(log_ + "/control.log");
  EXPECT_NE(std::string::npos,
            log.find("Starting new server " + std::to_string(server_5002) + " for user 5002"))
      << log;
}

TEST_F(SimGpuMpsTest, ClientsAt25And75PercentRunTheirKernelsAtOnce) {
  ASSERT_EQ(0, StartDaemon().status);
  // Each queues 400 ms of work on its share: 20 kernels that would take 5 ms on the whole GPU
  // take 20 ms on 25% of the SMs (33), 60 of them 6.67 ms on 75% (99).
  const std::string start = StartIn(1000);
  const std::string blocks = std::to_string(FullGpuBlocks(5));
  auto quarter = ProbeInBackground({"run", start, blocks, "20"},
                                   {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"}});
  auto rest = ProbeInBackground({"run", start, blocks, "60"},
                                {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "75"}});
  ASSERT_GT(quarter->WaitReady(), 0);
  ASSERT_GT(rest->WaitReady(), 0);
  const RunResult a = quarter->Wait();
  const RunResult b = rest->Wait();
  ASSERT_EQ(0, a.GetInt("sync")) << a.out << a.err;
  ASSERT_EQ(0, b.GetInt("sync")) << b.out << b.err;
  std::printf("25%%: %.1f ms, engine %.1f ms; 75%%: %.1f ms, engine %.1f ms; GPU busy %.1f ms\n",
              Number(a, "elapsed_ms"), Number(a, "engine_ms"), Number(b, "elapsed_ms"),
              Number(b, "engine_ms"), Number(b, "busy_ms"));
  // Together in 400 ms (time-sliced they would need 800); engine time is the share used.
  EXPECT_NEAR(400, Number(a, "elapsed_ms"), 20);
  EXPECT_NEAR(400, Number(b, "elapsed_ms"), 20);
  EXPECT_NEAR(100, Number(a, "engine_ms"), 3);
  EXPECT_NEAR(300, Number(b, "engine_ms"), 5);
  EXPECT_NEAR(400, Number(b, "busy_ms"), 20);
}

TEST_F(SimGpuMpsTest, OversubscribedSharesSlowEachClientInProportion) {
  ASSERT_EQ(0, StartDaemon({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "75"}}).status);
  // 200 ms of work each at 75% of the SMs; together they ask for 150%, so each runs at 1/1.5.
  const std::string start = StartIn(1000);
  const std::string blocks = std::to_string(FullGpuBlocks(5));
  auto first = ProbeInBackground({"run", start, blocks, "30"});
  auto second = ProbeInBackground({"run", start, blocks, "30"});
  ASSERT_GT(first->WaitReady(), 0);
  ASSERT_GT(second->WaitReady(), 0);
  const RunResult a = first->Wait();
  const RunResult b = second->Wait();
  std::printf("75%% + 75%%: %.1f / %.1f ms, engine %.1f / %.1f ms, GPU busy %.1f ms\n",
              Number(a, "elapsed_ms"), Number(b, "elapsed_ms"), Number(a, "engine_ms"),
              Number(b, "engine_ms"), Number(a, "busy_ms"));
  EXPECT_NEAR(300, Number(a, "elapsed_ms"), 15);
  EXPECT_NEAR(300, Number(b, "elapsed_ms"), 15);
  EXPECT_NEAR(150, Number(a, "engine_ms"), 4);
  EXPECT_NEAR(150, Number(b, "engine_ms"), 4);
  EXPECT_NEAR(300, Number(a, "busy_ms"), 15);
}

TEST_F(SimGpuMpsTest, TheServersClientsAreOneContextToTheTimeSlicer) {
  ASSERT_EQ(0, StartDaemon().status);
  // Two MPS clients at 100% (100 ms of work each) and a process without MPS (200 ms): the
  // group and the other context get half the time each, and inside the group the two clients
  // ask for 200% of the SMs, so each runs at a quarter of its speed.
  const std::string start = StartIn(1000);
  const std::string blocks = std::to_string(FullGpuBlocks(5));
  auto a = ProbeInBackground({"run", start, blocks, "20"});
  auto b = ProbeInBackground({"run", start, blocks, "20"});
  auto c = ProbeInBackground({"run", start, blocks, "40"},
                             {{"CUDA_MPS_PIPE_DIRECTORY", dir_ + "/no-daemon"}});
  ASSERT_GT(a->WaitReady(), 0);
  ASSERT_GT(b->WaitReady(), 0);
  ASSERT_GT(c->WaitReady(), 0);
  const RunResult ra = a->Wait(), rb = b->Wait(), rc = c->Wait();
  std::printf("MPS %.1f / %.1f ms (engine %.1f / %.1f), other %.1f ms (engine %.1f), busy %.1f\n",
              Number(ra, "elapsed_ms"), Number(rb, "elapsed_ms"), Number(ra, "engine_ms"),
              Number(rb, "engine_ms"), Number(rc, "elapsed_ms"), Number(rc, "engine_ms"),
              Number(rc, "busy_ms"));
  for (const RunResult* r : {&ra, &rb, &rc}) EXPECT_NEAR(400, Number(*r, "elapsed_ms"), 20);
  EXPECT_NEAR(100, Number(ra, "engine_ms"), 4);
  EXPECT_NEAR(100, Number(rb, "engine_ms"), 4);
  EXPECT_NEAR(200, Number(rc, "engine_ms"), 6);
  EXPECT_NEAR(400, Number(rc, "busy_ms"), 20);
}

TEST_F(SimGpuMpsTest, PinnedMemoryLimitRefusesTheAllocationPastIt) {
  ASSERT_EQ(0, StartDaemon().status);
  ASSERT_EQ(0, Ctl("set_default_device_pinned_mem_limit 0 2G").status);
  // The limit counts the context (527 MiB) too: 1 GiB fits, a second one does not.
  const RunResult two = Probe({"alloc", "1024", "1024", "256"});
  EXPECT_EQ(0, two.GetInt("alloc0"));
  EXPECT_EQ(2, two.GetInt("alloc1"));  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(0, two.GetInt("alloc2"));
  // cuMemGetInfo reports the limit as the total and what is left under it as free.
  EXPECT_EQ(static_cast<long long>(2048 * kMiB), two.GetInt("total"));
  EXPECT_EQ(static_cast<long long>((2048 - kContextMiB - 1024 - 256) * kMiB), two.GetInt("free"));
  // Without MPS the same allocations fit.
  const RunResult plain =
      Probe({"alloc", "1024", "1024"}, {{"CUDA_MPS_PIPE_DIRECTORY", dir_ + "/no-daemon"}});
  EXPECT_EQ(0, plain.GetInt("alloc1"));
  EXPECT_EQ(static_cast<long long>(81559 * kMiB), plain.GetInt("total"));
}

TEST_F(SimGpuMpsTest, AClientsEnvironmentCanOnlyLowerTheServersSettings) {
  ASSERT_EQ(0, StartDaemon().status);
  ASSERT_EQ(0, Ctl("set_default_active_thread_percentage 50\n"
                   "set_default_device_pinned_mem_limit 0 2G")
                   .status);
  // Higher values in the client's environment change nothing; lower ones apply.
  const RunResult higher = Probe(
      {"alloc", "1024", "1024"},
      {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "90"}, {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4G"}});
  EXPECT_EQ(0, higher.GetInt("alloc0"));
  EXPECT_EQ(2, higher.GetInt("alloc1"));
  EXPECT_EQ(static_cast<long long>(2048 * kMiB), higher.GetInt("total"));
  EXPECT_EQ(66, Probe({"info"}, {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "90"}}).GetInt("sms"));
  EXPECT_EQ(13, Probe({"info"}, {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10"}}).GetInt("sms"));
  const RunResult lower = Probe({"alloc", "256", "512"},
                                {{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", machine_->Uuid(0) + "=1G"}});
  EXPECT_EQ(0, lower.GetInt("alloc0"));
  EXPECT_EQ(2, lower.GetInt("alloc1"));
  EXPECT_EQ(static_cast<long long>(1024 * kMiB), lower.GetInt("total"));
  // The server's own settings may exceed the defaults; clients that connect later get them.
  const std::string server = std::to_string(OnlyServer());
  ASSERT_EQ(0, Ctl("set_active_thread_percentage " + server + " 75\n" +
                   "set_device_pinned_mem_limit " + server + " 0 3G")
                   .status);
  EXPECT_EQ(99, Probe({"info"}).GetInt("sms"));
  EXPECT_EQ(static_cast<long long>(3072 * kMiB), Probe({"info"}).GetInt("total"));
  EXPECT_EQ(66, Probe({"info"}, {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"}}).GetInt("sms"));
}

TEST_F(SimGpuMpsTest, AFatalFaultReachesEveryClientOfTheServer) {
  ASSERT_EQ(0, StartDaemon().status);
  // Two clients, each with 2 s of work queued; one of them faults.
  const std::string blocks = std::to_string(FullGpuBlocks(2000));
  auto a = ProbeInBackground({"fault-wait", blocks, "800"});
  auto b = ProbeInBackground({"fault-wait", blocks, "800"});
  const pid_t pid_a = a->WaitReady();
  ASSERT_GT(pid_a, 0);
  ASSERT_GT(b->WaitReady(), 0);
  const pid_t server = OnlyServer();
  const Clock::time_point injected = Clock::now();
  const std::uint64_t injected_ns = MonotonicNs();
  ASSERT_EQ(0, Probe({"fault", "0", std::to_string(pid_a)}).GetInt("fault"));
  // The server turns new clients away until both have exited.
  EXPECT_TRUE(WaitUntil(
      [&] { return Ctl("get_server_status " + std::to_string(server)).out == "FAULT\n"; }, 1000));
  EXPECT_EQ(807, Probe({"info"}).GetInt("init"));  // CUDA_ERROR_MPS_SERVER_NOT_READY
  const RunResult ra = a->Wait(), rb = b->Wait();
  const double ended = std::chrono::duration<double, std::milli>(Clock::now() - injected).count();
  // Both waits ended with the sticky error (700 = CUDA_ERROR_ILLEGAL_ADDRESS), long before
  // their 4 s of work would have run, and later calls get it too.
  EXPECT_EQ(700, ra.GetInt("sync"));
  EXPECT_EQ(700, rb.GetInt("sync"));
  EXPECT_EQ(700, ra.GetInt("after"));
  EXPECT_EQ(700, rb.GetInt("after"));
  EXPECT_LT(ended, 2500);
  const double reach_a = (Number(ra, "sync_at_ns") - injected_ns) / 1e6;
  const double reach_b = (Number(rb, "sync_at_ns") - injected_ns) / 1e6;
  std::printf("the fault ended both clients' waits %.1f / %.1f ms after it was injected\n", reach_a,
              reach_b);
  EXPECT_LT(reach_a, 100);
  EXPECT_LT(reach_b, 100);
  EXPECT_TRUE(WaitUntil(
      [&] { return Ctl("get_server_status " + std::to_string(server)).out == "ACTIVE\n"; }, 1000));
  EXPECT_EQ(0, Probe({"info"}).GetInt("init"));
  EXPECT_NE(
      std::string::npos,
      ReadFile(log_ + "/server.log").find("Volta MPS: Server is handling a fatal GPU error."));

  // Without MPS the fault stays in the faulting process.
  const std::map<std::string, std::string> plain = {
      {"CUDA_MPS_PIPE_DIRECTORY", dir_ + "/no-daemon"}};
  const std::string short_blocks = std::to_string(FullGpuBlocks(300));
  auto c = ProbeInBackground({"fault-wait", short_blocks, "0"}, plain);
  auto d = ProbeInBackground({"fault-wait", short_blocks, "0"}, plain);
  const pid_t pid_c = c->WaitReady();
  ASSERT_GT(pid_c, 0);
  ASSERT_GT(d->WaitReady(), 0);
  ASSERT_EQ(0, Probe({"fault", "0", std::to_string(pid_c)}).GetInt("fault"));
  EXPECT_EQ(700, c->Wait().GetInt("sync"));
  EXPECT_EQ(0, d->Wait().GetInt("sync"));
}

class SimGpuMpsTwoGpuTest : public SimGpuMpsTest {
 protected:
  std::string Config() const override { return "2xH100-80GB"; }
};

TEST_F(SimGpuMpsTwoGpuTest, AFatalFaultStaysOnTheGpusItIsContainedIn) {
  ASSERT_EQ(0, StartDaemon().status);
  // One client of the server on each GPU (the clients pick among the server's devices); the
  // one on GPU 0 faults.
  auto a = ProbeInBackground({"fault-wait", std::to_string(FullGpuBlocks(2000)), "300"},
                             {{"CUDA_VISIBLE_DEVICES", "0"}});
  auto b = ProbeInBackground({"fault-wait", std::to_string(FullGpuBlocks(300)), "0"},
                             {{"CUDA_VISIBLE_DEVICES", "1"}});
  const pid_t pid_a = a->WaitReady();
  ASSERT_GT(pid_a, 0);
  ASSERT_GT(b->WaitReady(), 0);
  ASSERT_EQ(0, Probe({"fault", "0", std::to_string(pid_a)}).GetInt("fault"));
  EXPECT_EQ(700, a->Wait().GetInt("sync"));
  // The client on GPU 1 runs its work to the end.
  const RunResult rb = b->Wait();
  EXPECT_EQ(0, rb.GetInt("sync"));
  EXPECT_EQ(0, rb.GetInt("after"));
}

TEST_F(SimGpuMpsTest, AKilledServerFailsItsClientsAndTheNextClientGetsANewOne) {
  ASSERT_EQ(0, StartDaemon().status);
  auto client = ProbeInBackground({"watch", "3"});
  ASSERT_GT(client->WaitReady(), 0);
  const pid_t server = OnlyServer();
  ASSERT_GT(server, 0);
  const std::uint64_t killed = MonotonicNs();
  kill(server, SIGKILL);
  const RunResult watched = client->Wait();
  const double noticed = (Number(watched, "at_ns") - killed) / 1e6;
  std::printf("the client's calls failed %.1f ms after its server was killed\n", noticed);
  // Every call on its contexts fails from then on: CUDA_ERROR_MPS_RPC_FAILURE (806).
  EXPECT_EQ(806, watched.GetInt("watch"));
  EXPECT_LT(noticed, 100);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ReadFile(log_ + "/control.log")
                   .find("Server " + std::to_string(server) + " exited with status 137") !=
               std::string::npos;
      },
      2000));
  EXPECT_EQ(0, Probe({"info"}).GetInt("init"));
  const pid_t next = OnlyServer();
  EXPECT_GT(next, 0);
  EXPECT_NE(server, next);
}

TEST_F(SimGpuMpsTest, AKilledDaemonLeavesItsClientsRunningAndNewProcessesRunWithoutMps) {
  ASSERT_EQ(0, StartDaemon({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"}}).status);
  auto client = ProbeInBackground({"watch", "1"});
  ASSERT_GT(client->WaitReady(), 0);
  const pid_t server = OnlyServer();
  const pid_t daemon = DaemonPid();
  kill(daemon, SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return !Alive(daemon); }, 2000));
  // The client keeps working with its server; a new process finds no daemon and runs without
  // MPS (all the SMs, not the 50% the daemon would give).
  const RunResult fresh = Probe({"info"});
  EXPECT_EQ(0, fresh.GetInt("init"));
  EXPECT_EQ(kH100Sms, fresh.GetInt("sms"));
  const RunResult gone = Ctl("get_server_list");
  EXPECT_EQ(1, gone.status);
  EXPECT_NE(std::string::npos, gone.err.find("(exit code 1)")) << gone.err;
  EXPECT_EQ(0, client->Wait().GetInt("watch"));
  // The server, without a daemon, ends with its last client.
  EXPECT_TRUE(WaitUntil([&] { return !Alive(server); }, 2000));
}

}  // namespace
}  // namespace gpufrac::testing
