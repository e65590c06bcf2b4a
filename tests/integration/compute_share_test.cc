// Compute shares end to end: gpu_load workloads under libgpufrac.so on one simulated GPU, each
// with a compute request and limit in its limit file, sharing the GPU's arbiter in a launcher's
// budget directory. What each got is the simulator's ground truth (engine_truth.h), which the
// engine measures whatever the limiter does; without the limiter the same workloads split the GPU
// equally (simgpu_engine_test).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "busy_loops.h"
#include "harness.h"
#include "limiter/budget.h"
#include "limiter/compute_arbiter.h"
#include "limiter/limit_config.h"
#include "service_budget_dir.h"
#include "simgpu/core/engine_truth.h"

namespace gpufrac::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Share {
  uint32_t request;  // thousandths
  uint32_t limit;
  std::string mode = "kernel";
  double kernel_ms = 1.0;
  int processes = 1;  // processes of the workload, each running `mode`
};

class ComputeShareTest : public ::testing::Test {
 protected:
  ComputeShareTest() : machine_("1xH100-80GB"), uuid_(machine_.Uuid()) {
    char tmpl[] = "/tmp/gpufrac-compute-XXXXXX";
    dir_ = mkdtemp(tmpl);
    prefix_ = dir_.substr(dir_.rfind('-') + 1) + "-";
    dir_fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char err[256];
    EXPECT_TRUE(limiter::ComputeArbiter::CreateAt(dir_fd_, ("compute." + uuid_).c_str(),
                                                  limiter::kDefaultTurnNs, err, sizeof(err)))
        << err;
    for (const auto& [key, value] : machine_.Env()) setenv(key.c_str(), value.c_str(), 1);
  }
  ~ComputeShareTest() override {
    // SIGTERM first, so that a `gpufrac exec` a failed check left running removes its files.
    for (pid_t pid : pids_) kill(pid, SIGTERM);
    for (pid_t pid : pids_) {
      bool reaped = false;
      for (int i = 0; i < 200 && !reaped; ++i) {
        reaped = waitpid(pid, nullptr, WNOHANG) == pid;
        if (!reaped) usleep(10000);
      }
      if (!reaped) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    RemoveRecordedBudgetDir(dir_ + "/.local/state/gpufrac/exec-arbiters");
    close(dir_fd_);
    std::filesystem::remove_all(dir_);
    for (const auto& [pid, id] : workloads_) {
      char name[200];
      limiter::BudgetName(id.c_str(), uuid_.c_str(), name, sizeof(name));
      shm_unlink(name);
    }
  }

  // Starts a workload with `share` running `seconds`; returns its (first) process's pid once its
  // processes have a context.
  pid_t StartWorkload(const Share& share, double seconds) {
    const std::string id = prefix_ + "w" + std::to_string(next_id_++);
    char name[200], err[256];
    limiter::BudgetName(id.c_str(), uuid_.c_str(), name, sizeof(name));
    EXPECT_TRUE(limiter::Budget::CreateAt(dir_fd_, name + 1, uint64_t{20} << 30, 0, -1, -1, err,
                                          sizeof(err)))
        << err;
    const std::string limits = dir_ + "/" + id + ".limits";
    // A container's limit file (the Kubernetes agent's) has no budget directory: the limiter
    // makes the memory budget in its own /dev/shm, and finds the arbiter where it is mounted.
    const std::string where =
        as_container_ ? "arbiters " + dir_ + "\n" : "budgets " + dir_ + "\n";
    std::ofstream(limits) << "gpufrac-limits 1\nworkload " << id << "\n"
                          << where << "gpu " << uuid_ << " limit " << (uint64_t{20} << 30)
                          << " context 0 compute " << share.request << " compute-limit "
                          << share.limit << "\n";
    chmod(limits.c_str(), 0444);
    auto env = Merge(machine_.Env(), {{"LD_PRELOAD", BuildPath("lib/libgpufrac.so")},
                                      {"GPUFRAC_LIMIT_FILE", limits}});
    // CUDA 13's entry points are there only when the driver is 13.0 or newer.
    if (share.mode == "runtime13") env["SIMGPU_DRIVER_VERSION"] = "13000";
    pid_t first = 0;
    for (int p = 0; p < share.processes; ++p) {
      std::string seen;
      pid_t pid = Start({BuildPath("tests/gpu_load"), share.mode, std::to_string(share.kernel_ms),
                         std::to_string(seconds)},
                        env, "ready", &seen);
      EXPECT_NE(seen.find("ready"), std::string::npos) << seen;
      pids_.push_back(pid);
      if (first == 0) first = pid;
      members_[first].push_back(pid);
    }
    workloads_[first] = id;
    return first;
  }

  // The GPU time the engine gave the workload whose first process is `pid`.
  uint64_t EngineNs(pid_t pid) {
    uint64_t total = 0;
    for (pid_t member : members_.count(pid) ? members_[pid] : std::vector<pid_t>{pid}) {
      unsigned long long ns = 0;
      simgpuGetProcessEngineTime(0, static_cast<unsigned>(member), &ns);
      total += ns;
    }
    return total;
  }

  // The GPU's arbiter, mapped as any workload maps it (nullptr when it cannot be).
  limiter::ArbiterSegment* MapSegment() {
    int fd = open((dir_ + "/compute." + uuid_).c_str(), O_RDWR);
    if (fd < 0) return nullptr;
    void* map = mmap(nullptr, sizeof(limiter::ArbiterSegment), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
    close(fd);
    return map == MAP_FAILED ? nullptr : static_cast<limiter::ArbiterSegment*>(map);
  }

  // The GPU time the arbiter charged to `pid`'s workload.
  uint64_t ChargedNs(pid_t pid) {
    uint64_t ns = 0;
    limiter::ComputeArbiter::PeekUsedNs(dir_fd_, ("compute." + uuid_).c_str(),
                                        workloads_[pid].c_str(), &ns);
    return ns;
  }

  // Each workload's share of the GPU's time over `seconds` (and in charged_, what the arbiter
  // charged it, as a share).
  std::vector<double> Measure(const std::vector<pid_t>& pids, double seconds) {
    std::vector<uint64_t> before, charged_before;
    for (pid_t pid : pids) {
      before.push_back(EngineNs(pid));
      charged_before.push_back(ChargedNs(pid));
    }
    const Clock::time_point start = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<double> shares;
    for (size_t i = 0; i < pids.size(); ++i) {
      shares.push_back((EngineNs(pids[i]) - before[i]) / 1e9 / elapsed);
      charged_.push_back((ChargedNs(pids[i]) - charged_before[i]) / 1e9 / elapsed);
    }
    return shares;
  }

  // Starts the workloads, lets them settle and returns each one's share of the GPU's time over
  // `seconds` (charged_: what the arbiter charged each); `line` says both, beside `expected`.
  std::vector<double> RunShares(const std::vector<Share>& shares,
                                const std::vector<double>& expected, double seconds,
                                std::string* line) {
    std::vector<pid_t> pids;
    for (const Share& s : shares) pids.push_back(StartWorkload(s, seconds + 3));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    charged_.clear();
    const std::vector<double> got = Measure(pids, seconds);
    for (size_t i = 0; i < got.size(); ++i) {
      char item[96];
      std::snprintf(item, sizeof(item), "%s%.3f (want %.3f, charged %.3f)", i ? ", " : "", got[i],
                    expected[i], charged_[i]);
      *line += item;
    }
    return got;
  }

  // Runs the workloads and checks each gets its expected share within `tolerance`. The shares
  // asked for add up to the whole GPU, so the GPU must be kept busy; what each got is its part of
  // the GPU time the workloads used, as the arbiter splits the time it hands out. A host that
  // starves the workloads' threads (a loaded 2-core machine) leaves the GPU idle now and then, and
  // that idle time is nobody's; it is checked apart (the arbiter may not waste a tenth of it).
  void ExpectShares(const std::vector<Share>& shares, const std::vector<double>& expected,
                    double seconds, double tolerance, double busy_floor = 0.9) {
    std::string line;
    const std::vector<double> got = RunShares(shares, expected, seconds, &line);
    double busy = 0, charged = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      busy += got[i];
      charged += charged_[i];
    }
    line += "; GPU busy " + std::to_string(busy);
    std::printf("shares: %s\n", line.c_str());
    ASSERT_GT(busy, busy_floor) << "the GPU idled more than it may: " << line;
    ASSERT_GT(charged, 0.9) << "the arbiter charged less than nine tenths of the time: " << line;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i] / busy, expected[i], tolerance) << line;
      // What a workload is charged is its part of the GPU time (an overcharged workload would get
      // less than its share, an undercharged one more).
      EXPECT_NEAR(charged_[i] / charged, got[i] / busy, 0.02) << line;
    }
  }

  SimMachine machine_;
  std::string uuid_;
  std::string dir_;
  int dir_fd_ = -1;
  std::vector<pid_t> pids_;
  std::map<pid_t, std::string> workloads_;     // by first process
  std::map<pid_t, std::vector<pid_t>> members_;  // a workload's processes, by first process
  std::vector<double> charged_;
  int next_id_ = 0;
  std::string prefix_;         // of workload ids: unique to the test (budgets may be in /dev/shm)
  bool as_container_ = false;  // limit files as the Kubernetes agent writes them
};

TEST_F(ComputeShareTest, AQuarterAndThreeQuartersGetTheirRequests) {
  ExpectShares({{250, 1000}, {750, 1000}}, {0.25, 0.75}, 10, 0.02);
}

TEST_F(ComputeShareTest, ATenthAndNineTenthsGetTheirRequests) {
  ExpectShares({{100, 1000}, {900, 1000}}, {0.1, 0.9}, 10, 0.02);
}

TEST_F(ComputeShareTest, ThreeAndSevenTenthsGetTheirRequests) {
  ExpectShares({{300, 1000}, {700, 1000}}, {0.3, 0.7}, 10, 0.02);
}

TEST_F(ComputeShareTest, ThreeWorkloadsGetTheirRequests) {
  ExpectShares({{200, 1000}, {300, 1000}, {500, 1000}}, {0.2, 0.3, 0.5}, 10, 0.02);
}

// Every way of putting work on the GPU is held to its share: the 0.25 workload uses it, the
// 0.75 one plain launches.
TEST_F(ComputeShareTest, EveryLaunchPathIsHeldToItsShare) {
  for (const char* mode : {"ptsz", "ex", "graph"}) {
    SCOPED_TRACE(mode);
    ExpectShares({{250, 1000, mode}, {750, 1000}}, {0.25, 0.75}, 3, 0.03);
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pids_.clear();
  }
}

// A cooperative grid must fit on the GPU at once, so on the simulated GPU each lasts a few
// microseconds and a loop of them is bound by how fast its host thread launches (on a loaded
// 2-core machine, far from filling its turns). What must hold is that the launches take turns:
// the cooperative workload holds the GPU for its quarter (the arbiter charges it that), gets no
// more of the GPU than it is charged, and the other workload gets its three quarters. (Let
// through, cooperative launches would take no turns, be charged nothing, and the other workload
// would have the GPU to itself whenever they paused: 0.07 and 0.93.)
TEST_F(ComputeShareTest, CooperativeLaunchesAreHeldToTheirShare) {
  std::string line;
  const std::vector<double> got =
      RunShares({{250, 1000, "coop"}, {750, 1000}}, {0.25, 0.75}, 3, &line);
  std::printf("shares: %s\n", line.c_str());
  EXPECT_NEAR(charged_[0], 0.25, 0.03) << line;
  EXPECT_LT(got[0], charged_[0] + 0.02) << line;
  EXPECT_NEAR(got[1], 0.75, 0.03) << line;
}

// A workload is all its processes and streams: two processes of the 0.25 workload together get a
// quarter, whatever the 0.75 workload's four streams do.
TEST_F(ComputeShareTest, AWorkloadsProcessesAndStreamsShareItsShare) {
  ExpectShares({{250, 1000, "kernel", 1.0, 2}, {750, 1000, "streams"}}, {0.25, 0.75}, 4, 0.02);
  for (pid_t pid : pids_) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  pids_.clear();
  ExpectShares({{250, 1000, "streams"}, {750, 1000, "kernel", 1.0, 3}}, {0.25, 0.75}, 4, 0.02);
}

// Work queued in several contexts of one process is that process's work: eight contexts, each
// with a 5 ms kernel queued at once, are held to the process's share (issue 31: 0.887 at a 0.25
// request, when only the current context was drained and charged).
TEST_F(ComputeShareTest, AProcessWithEightContextsIsHeldToItsShare) {
  ExpectShares({{250, 1000, "contexts", 5.0}, {750, 1000}}, {0.25, 0.75}, 4, 0.02);
}

// Containers (the Kubernetes agent's limit files: memory budgets in their own /dev/shm, the
// GPU's arbiter mounted) take turns as the node service's jobs do.
TEST_F(ComputeShareTest, ContainersTakeTurnsThroughTheArbiterTheirAgentMounted) {
  as_container_ = true;
  ExpectShares({{250, 1000}, {750, 1000}}, {0.25, 0.75}, 4, 0.02);
}

// `gpufrac exec` commands of one user on a GPU take turns too: one with 20 GiB of the 80 GiB GPU
// (its compute request is its memory's share, 0.25) and one asking for 0.75.
TEST_F(ComputeShareTest, ExecCommandsOfOneUserTakeTurns) {
  auto env = Merge(machine_.Env(), {{"HOME", dir_}});
  std::vector<pid_t> loads;
  for (const std::vector<std::string>& request :
       {std::vector<std::string>{"--gpu-memory", "20G"},
        std::vector<std::string>{"--gpu-fraction", "0.5", "--gpu-compute", "0.75"}}) {
    std::vector<std::string> argv = {BuildPath("bin/gpufrac"), "exec"};
    argv.insert(argv.end(), request.begin(), request.end());
    for (const char* arg : {"--", "", "kernel", "1", "8"}) argv.push_back(arg);
    argv[argv.size() - 4] = BuildPath("tests/gpu_load");
    std::string seen;
    const pid_t exec = Start(argv, env, "ready", &seen);
    ASSERT_NE(seen.find("ready"), std::string::npos) << seen;
    pids_.push_back(exec);
    // The command is gpufrac's child: its engine time is the workload's.
    std::ifstream children("/proc/" + std::to_string(exec) + "/task/" + std::to_string(exec) +
                           "/children");
    pid_t load = 0;
    ASSERT_TRUE(children >> load) << "gpufrac exec has no child";
    members_[load] = {load};
    loads.push_back(load);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::vector<double> got = Measure(loads, 4);
  // As in ExpectShares: parts of the GPU time the two used (a starved host's idle time is
  // nobody's), and that idle time apart.
  const double busy = got[0] + got[1];
  std::printf("exec shares: %.3f / %.3f, GPU busy %.3f\n", got[0], got[1], busy);
  ASSERT_GT(busy, 0.9);
  EXPECT_NEAR(got[0] / busy, 0.25, 0.02);
  EXPECT_NEAR(got[1] / busy, 0.75, 0.02);
  // Their arbiter is in a directory of this user's, recorded in the user's state directory.
  std::ifstream record(dir_ + "/.local/state/gpufrac/exec-arbiters");
  std::string arbiters;
  ASSERT_TRUE(std::getline(record, arbiters));
  struct stat st;
  ASSERT_EQ(stat(arbiters.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(access((arbiters + "/compute." + uuid_).c_str(), R_OK | W_OK), 0);
  for (pid_t pid : pids_) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  pids_.clear();
}

// Every workload can write the arbiter; one that truncates it must not kill the others (their
// mappings fault): they finish their work, without turns.
TEST_F(ComputeShareTest, AWorkloadThatTruncatesTheArbiterCannotKillTheOthers) {
  const pid_t a = StartWorkload({250, 1000}, 2);
  const pid_t b = StartWorkload({750, 1000}, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(truncate((dir_ + "/compute." + uuid_).c_str(), 0), 0);
  for (pid_t pid : {a, b}) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "workload " << pid << " ended with "
        << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                : "status " + std::to_string(WEXITSTATUS(status)));
  }
  pids_.clear();
}

// Beside CPU-bound neighbours (two busy loops per core) the shares hold and the GPU stays busy
// (without a limiter it is busy all the time here): a turn passes as the holder's work runs out,
// whether or not the CPU runs the holder's thread then, and waiters no longer take a turn from a
// holder the CPU did not run in time. Before, 0.949-0.953 of the time busy in the same setting
// on an otherwise idle machine, 0.970-0.983 after; with 2 more loops per core outside the test
// 0.957-0.968. Where autogroup does not apply (a host without it, a CI runner's cgroup) this is
// the next test's case, and its floor, 0.94. (The rule itself is checked exactly by
// ComputeArbiterSlotsTest.ATurnPassesAsTheHoldersPublishedWorkRunsOut.)
TEST_F(ComputeShareTest, SharesHoldBesideBusyLoops) {
  BusyLoops loops(2);
  ExpectShares({{250, 1000}, {750, 1000}}, {0.25, 0.75}, 4, 0.03, 0.94);
}

// The same with the loops in the workloads' own scheduling group, where each thread competes
// with each loop alone (a host without autogroup, one container or service, CI's runner). There
// the GPU was busy only 0.83-0.85 of the time: a woken limiter thread waited for the running
// loop's slice to end, and a holder's estimate of when its work ends counted the time its thread
// was not run, so the waiter took the turn late. With the launching threads asking for the
// shortest slice (prompt_wake.h) and a late thread's estimate taken from the GPU's end (the
// anchor in hooks_launch.cc), 0.961-0.977 over 6 runs (the loops still run up to 0.1 ms before a
// woken thread): the floor is 0.94.
TEST_F(ComputeShareTest, SharesHoldBesideBusyLoopsOfTheirOwnGroup) {
  BusyLoops loops(2, BusyLoops::Group::kCallersGroup);
  ExpectShares({{250, 1000}, {750, 1000}}, {0.25, 0.75}, 4, 0.03, 0.94);
}

// A kernel longer than a turn cannot be cut short, but is charged: over time the workload still
// gets its share.
TEST_F(ComputeShareTest, LongKernelsAreHeldToTheirShare) {
  ExpectShares({{250, 1000, "kernel", 50.0}, {750, 1000}}, {0.25, 0.75}, 4, 0.03);
}

// PyTorch on CUDA 13 waits for its work through cuCtxSynchronize_v2 (torch.cuda.synchronize()).
// A holder waiting there is finishing its turn, and keeps it until its work is done: were the
// wait unseen, the holder would look idle, lose its turn 2 ms past its end while its kernels still
// ran, and they would run in the next holder's time. (On an H100, PyTorch matmul loops at 0.25 and
// 0.75 got 0.199 and 0.786 of the GPU so; with the wait seen, 0.246 and 0.747.) Here a workload
// launches 100 ms kernels and waits for each that way, against a busy one: each of its turns must
// last until its kernel is done, marked as draining, not end 2 ms past its 20 ms.
TEST_F(ComputeShareTest, AHolderWaitingThroughCuda13sSynchronizeKeepsItsTurnUntilItsWorkIsDone) {
  const pid_t waiter = StartWorkload({500, 1000, "runtime13", 100.0}, 6);
  StartWorkload({500, 1000}, 6);
  limiter::ArbiterSegment* seg = MapSegment();
  ASSERT_NE(seg, nullptr);
  // The holder and its draining flag every 0.2 ms for 3 s: the waiter's longest turn, and how
  // much of its turns it spent marked as draining.
  double longest_ms = 0, held = 0, draining = 0;
  Clock::time_point since{};
  const Clock::time_point end = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < end) {
    const bool holds = static_cast<pid_t>(seg->holder.load() & 0xffffffffu) == waiter;
    const Clock::time_point now = Clock::now();
    if (holds) {
      if (since == Clock::time_point{}) since = now;
      longest_ms =
          std::max(longest_ms, std::chrono::duration<double, std::milli>(now - since).count());
      ++held;
      if (seg->draining.load() != 0) ++draining;
    } else {
      since = {};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  munmap(seg, sizeof(limiter::ArbiterSegment));
  std::printf("longest turn %.1f ms, draining %.0f%% of its turns\n", longest_ms,
              held > 0 ? 100 * draining / held : 0.0);
  EXPECT_GT(longest_ms, 80);
  EXPECT_GT(draining, held / 2);
}

// Workloads with kernels of different lengths: a share is still the workload's, not its kernels'.
TEST_F(ComputeShareTest, KernelLengthDoesNotMoveAShare) {
  ExpectShares({{500, 1000, "kernel", 0.5}, {500, 1000, "kernel", 2.0}}, {0.5, 0.5}, 4, 0.02);
  for (pid_t pid : pids_) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  pids_.clear();
  ExpectShares({{250, 1000, "kernel", 2.0}, {750, 1000, "kernel", 0.5}}, {0.25, 0.75}, 4, 0.02);
}

// Fair: time a workload leaves (stopped, or killed) goes to the others within a second.
TEST_F(ComputeShareTest, AStoppedOrKilledWorkloadsTimeGoesToTheOthers) {
  pid_t a = StartWorkload({500, 1000}, 12);
  pid_t b = StartWorkload({500, 1000}, 12);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<double> both = Measure({a, b}, 1.0);
  EXPECT_NEAR(both[0], 0.5, 0.03);
  ASSERT_EQ(kill(a, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<double> stopped = Measure({a, b}, 1.0);
  std::printf("a stopped: %.3f / %.3f\n", stopped[0], stopped[1]);
  EXPECT_LT(stopped[0], 0.02);
  EXPECT_GT(stopped[1], 0.95);
  kill(a, SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<double> back = Measure({a, b}, 1.0);
  EXPECT_NEAR(back[0], 0.5, 0.05);
  ASSERT_EQ(kill(b, SIGKILL), 0);
  waitpid(b, nullptr, 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<double> killed = Measure({a}, 1.0);
  std::printf("b killed: %.3f\n", killed[0]);
  EXPECT_GT(killed[0], 0.95);
}

// A hostile member scribbling on the arbiter (claiming every turn with no end, as if it were
// finishing its work), then holding its lock: the others' waits are bounded, and once they see
// the arbiter failing them they go without turns, back to the GPU's own equal split. Nobody is
// starved.
TEST_F(ComputeShareTest, AHostileMemberCannotStarveTheOthers) {
  pid_t a = StartWorkload({250, 1000}, 30);
  pid_t b = StartWorkload({750, 1000}, 30);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  limiter::ArbiterSegment* seg = MapSegment();
  ASSERT_NE(seg, nullptr);
  std::atomic<bool> stop{false};
  std::thread scribbler([&] {
    while (!stop) {
      seg->holder.store(uint64_t{limiter::kArbiterSlots} << 32 | static_cast<uint32_t>(getpid()));
      seg->deadline_ns.store(UINT64_MAX);
      seg->draining.store(1);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(5));
  std::vector<double> scribbled = Measure({a, b}, 2.0);
  stop = true;
  scribbler.join();
  std::printf("scribbled on: %.3f / %.3f\n", scribbled[0], scribbled[1]);
  EXPECT_GT(scribbled[0] + scribbled[1], 0.9);
  EXPECT_GT(scribbled[0], 0.2);
  EXPECT_GT(scribbled[1], 0.2);

  // Holding the lock for good (as a stopped member inside a hand-over would).
  ASSERT_EQ(pthread_mutex_lock(&seg->lock), 0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::vector<double> locked = Measure({a, b}, 2.0);
  std::printf("lock held: %.3f / %.3f\n", locked[0], locked[1]);
  EXPECT_GT(locked[0] + locked[1], 0.9);
  EXPECT_GT(locked[0], 0.2);
  EXPECT_GT(locked[1], 0.2);
  pthread_mutex_unlock(&seg->lock);
  munmap(seg, sizeof(limiter::ArbiterSegment));
}

// A workload whose waiters were slow to take a turn handed to them is passed over, but only until
// one of them runs again: on a busy CPU, where that happens now and then, it keeps its share
// (passed over for a second each time, it would get none, and bypass the arbiter).
TEST_F(ComputeShareTest, AWorkloadMarkedAsMissingItsTurnsStillGetsThem) {
  pid_t a = StartWorkload({250, 1000}, 12);
  pid_t b = StartWorkload({750, 1000}, 12);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  limiter::ArbiterSegment* seg = MapSegment();
  ASSERT_NE(seg, nullptr);
  // a joined first: slot 0.
  ASSERT_EQ(seg->slots[0].weight.load(), 250u);
  std::atomic<bool> stop{false};
  std::thread marker([&] {
    while (!stop) {
      seg->slots[0].missed_at_ns.store(limiter::MonotonicNs());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<double> got = Measure({a, b}, 3.0);
  stop = true;
  marker.join();
  munmap(seg, sizeof(limiter::ArbiterSegment));
  std::printf("marked as missing: %.3f / %.3f\n", got[0], got[1]);
  EXPECT_NEAR(got[0], 0.25, 0.03);
  EXPECT_NEAR(got[1], 0.75, 0.03);
}

// Strict: a limit of 0.3 is never exceeded in any one-second window, even on an idle GPU.
TEST_F(ComputeShareTest, AStrictLimitHoldsInEveryOneSecondWindow) {
  pid_t a = StartWorkload({300, 300, "kernel", 0.5}, 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Engine time every 100 ms over 5 s; every window of 10 consecutive steps is one second.
  std::vector<uint64_t> ns;
  std::vector<Clock::time_point> at;
  for (int i = 0; i <= 50; ++i) {
    ns.push_back(EngineNs(a));
    at.push_back(Clock::now());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  double worst = 0, total = (ns.back() - ns.front()) / 1e9 /
                              std::chrono::duration<double>(at.back() - at.front()).count();
  for (size_t i = 10; i < ns.size(); ++i) {
    const double window = std::chrono::duration<double>(at[i] - at[i - 10]).count();
    worst = std::max(worst, (ns[i] - ns[i - 10]) / 1e9 / window);
  }
  std::printf("strict 0.3 alone: %.3f over 5 s, worst one-second window %.3f\n", total, worst);
  EXPECT_LE(worst, 0.32);
  EXPECT_NEAR(total, 0.3, 0.02);
}

}  // namespace
}  // namespace gpufrac::testing
