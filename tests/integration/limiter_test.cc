// libgpufrac.so end to end: cuda_probe processes on a simulated GPU, run under the limiter the way
// a launcher runs workloads. Covers the three access paths, every charged allocation kind and its
// free, the virtualised numbers, racing processes, SIGKILL clean-up, broken and tampered configs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"
#include "progs/race_shared.h"

namespace gpufrac::testing {
namespace {

constexpr unsigned long long kMiB = 1ull << 20;
constexpr unsigned long long kGiB = 1ull << 30;

class LimiterTest : public ::testing::Test {
 protected:
  LimiterTest() : machine_("1xH100-80GB"), uuid_(machine_.Uuid()) {}

  RunResult Probe(const Workload& w, std::vector<std::string> args) {
    args.insert(args.begin(), ProbePath());
    return RunCommand(args, Merge(machine_.Env(), w.Env()));
  }

  SimMachine machine_;
  std::string uuid_;
};

TEST_F(LimiterTest, SimulatedDeviceIsVisible) { ASSERT_EQ(uuid_.rfind("GPU-", 0), 0u) << uuid_; }

TEST_F(LimiterTest, WithoutAConfigurationEverythingPassesThrough) {
  auto env = Merge(machine_.Env(), {{"LD_PRELOAD", BuildPath("lib/libgpufrac.so")}});
  RunResult info = RunCommand({ProbePath(), "info"}, env);
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(info.GetInt("total"), 81559ll * kMiB);  // the whole simulated H100
  RunResult r = RunCommand({ProbePath(), "resolve"}, env);
  EXPECT_EQ(r.Get("gpa.cuMemAlloc.12000.default"), "cuMemAlloc_v2@libcuda.so.1");
  EXPECT_EQ(r.Get("dlsym.cuMemAlloc_v2"), "cuMemAlloc_v2@libcuda.so.1");
  EXPECT_EQ(r.Get("gpa.cuMemAlloc.3000.default"), "cuMemAlloc@libcuda.so.1");
  RunResult legacy = RunCommand({ProbePath(), "legacy", "dlsym", "mem", "1048576"}, env);
  EXPECT_EQ(legacy.GetInt("legacy"), 0) << legacy.err;
}

TEST_F(LimiterTest, EveryAccessPathSeesAndEnforcesTheLimit) {
  Workload w(uuid_, kGiB);
  for (const char* path : {"linked", "dlsym", "procaddr"}) {
    SCOPED_TRACE(path);
    RunResult info = Probe(w, {"--path", path, "info"});
    ASSERT_EQ(info.status, 0) << info.err;
    EXPECT_EQ(info.GetInt("total"), static_cast<long long>(kGiB));
    EXPECT_EQ(info.GetInt("device_total"), static_cast<long long>(kGiB));
    EXPECT_EQ(info.GetInt("free"), static_cast<long long>(kGiB));

    RunResult over = Probe(w, {"--path", path, "alloc", "mem", std::to_string(kGiB + 1)});
    EXPECT_EQ(over.GetInt("alloc"), 2) << "CUDA_ERROR_OUT_OF_MEMORY expected";
    EXPECT_NE(over.err.find("gpufrac: out of GPU memory on " + uuid_), std::string::npos)
        << over.err;
    EXPECT_NE(over.err.find("limit of 1.00 GiB"), std::string::npos) << over.err;

    RunResult fits = Probe(w, {"--path", path, "alloc", "mem", std::to_string(kGiB)});
    EXPECT_EQ(fits.GetInt("alloc"), 0);
    EXPECT_EQ(fits.GetInt("charged"), static_cast<long long>(kGiB));
    EXPECT_EQ(fits.GetInt("after"), 0);
  }
}

TEST_F(LimiterTest, WorksWithACuda13Driver) {
  Workload w(uuid_, kGiB);
  auto env = Merge(Merge(machine_.Env(), w.Env()), {{"SIMGPU_DRIVER_VERSION", "13000"}});
  RunResult r = RunCommand({ProbePath(), "--path", "procaddr", "--cuda-version", "13000", "alloc",
                            "mem", std::to_string(kGiB + 1)},
                           env);
  EXPECT_EQ(r.GetInt("alloc"), 2) << r.out << r.err;
  RunResult fits = RunCommand({ProbePath(), "--path", "procaddr", "--cuda-version", "13000",
                               "alloc", "async", std::to_string(kGiB)},
                              env);
  EXPECT_EQ(fits.GetInt("charged"), static_cast<long long>(kGiB)) << fits.out << fits.err;
}

// Allocation, free and memory info enter the kernel not once once a thread is set up.
TEST_F(LimiterTest, HotPathsMakeNoSystemCalls) {
  if (access("/usr/bin/strace", X_OK) != 0) GTEST_SKIP() << "strace is not installed";
  Workload w(uuid_, kGiB);
  char trace[] = "/tmp/gpufrac-strace-XXXXXX";
  close(mkstemp(trace));
  RunResult r = RunCommand({"/usr/bin/strace", "-f", "-o", trace, ProbePath(), "hotloop", "2000"},
                           Merge(machine_.Env(), w.Env()));
  ASSERT_EQ(r.Get("hotloop"), "done") << r.err;
  FILE* f = fopen(trace, "r");
  ASSERT_NE(f, nullptr);
  char line[1024];
  int markers = 0, between = 0;
  std::string first_inside;
  while (fgets(line, sizeof(line), f)) {
    std::string l(line);
    if (l.find("getppid()") != std::string::npos) {
      ++markers;
    } else if (markers == 1) {
      if (first_inside.empty()) first_inside = l;
      ++between;
    }
  }
  fclose(f);
  unlink(trace);
  EXPECT_EQ(markers, 2);
  EXPECT_EQ(between, 0) << "first system call inside the hot loop: " << first_inside;
}

TEST_F(LimiterTest, CuGetProcAddressHonoursVersionAndStreamFlags) {
  Workload w(uuid_, kGiB);
  RunResult r = Probe(w, {"resolve"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.Get("dlsym.cuGetProcAddress_v2"), "cuGetProcAddress_v2@libgpufrac.so");
  EXPECT_EQ(r.Get("dlsym.cuMemAlloc_v2"), "cuMemAlloc_v2@libgpufrac.so");
  EXPECT_EQ(r.Get("dlsym.cuDeviceGet"), "cuDeviceGet@libcuda.so.1");  // not hooked
  EXPECT_EQ(r.Get("gpa.cuMemAlloc.12000.default"), "cuMemAlloc_v2@libgpufrac.so");
  // CUDA < 3.2 gets the legacy 32-bit entry point: the limiter's, which refuses it.
  EXPECT_EQ(r.Get("gpa.cuMemAlloc.3000.default"), "cuMemAlloc@libgpufrac.so");
  EXPECT_EQ(r.Get("gpa.cuMemGetInfo.12000.default"), "cuMemGetInfo_v2@libgpufrac.so");
  EXPECT_EQ(r.Get("gpa.cuMemAllocAsync.12000.default"), "cuMemAllocAsync@libgpufrac.so");
  EXPECT_EQ(r.Get("gpa.cuMemAllocAsync.12000.ptsz"), "cuMemAllocAsync_ptsz@libgpufrac.so");
  EXPECT_EQ(r.GetInt("gpa.cuMemAllocAsync.11000.default.rc"), 500);    // CUDA_ERROR_NOT_FOUND
  EXPECT_EQ(r.GetInt("gpa.cuMemAllocAsync.11000.default.status"), 2);  // VERSION_NOT_SUFFICIENT
  EXPECT_EQ(r.Get("gpa.cuGetProcAddress.12000.default"), "cuGetProcAddress_v2@libgpufrac.so");
  EXPECT_EQ(r.Get("gpa.cuGetProcAddress.11030.default"), "cuGetProcAddress@libgpufrac.so");
  EXPECT_EQ(r.Get("gpa.cuDeviceGet.12000.default"), "cuDeviceGet@libcuda.so.1");
}

// The 32-bit entry points from before CUDA 3.2 (cuMemAlloc v1 and the others whose _v2 forms
// the limiter charges or virtualises). Without the limiter they work as the driver's do; under
// it, each is refused however the program finds it, and nothing is allocated.
TEST_F(LimiterTest, LegacyEntryPointsAreRefusedOnEveryPath) {
  Workload w(uuid_, 2 * kGiB);
  struct Legacy {
    const char* kind;
    const char* symbol;
    int plain_result;  // what the simulated driver answers without the limiter
  };
  const Legacy legacies[] = {
      {"mem", "cuMemAlloc", 0},
      {"pitch", "cuMemAllocPitch", 0},
      {"array", "cuArrayCreate", 0},
      {"array3d", "cuArray3DCreate", 0},
      {"ctx", "cuCtxCreate", 0},
      {"info", "cuMemGetInfo", 0},
      {"totalmem", "cuDeviceTotalMem", 0},
      {"free", "cuMemFree", 1},  // CUDA_ERROR_INVALID_VALUE: nothing at address 0
  };
  const std::string bytes = std::to_string(64 * kMiB);
  for (const char* how : {"linked", "dlsym", "default", "procaddr"}) {
    for (const Legacy& legacy : legacies) {
      SCOPED_TRACE(std::string(how) + " " + legacy.kind);
      std::vector<std::string> args = {"--cuda-version", "3010", "legacy", how, legacy.kind, bytes};
      std::vector<std::string> plain_argv = {ProbePath()};
      plain_argv.insert(plain_argv.end(), args.begin(), args.end());
      RunResult plain = RunCommand(plain_argv, machine_.Env());
      ASSERT_EQ(plain.status, 0) << plain.err;
      EXPECT_EQ(plain.GetInt("legacy"), legacy.plain_result) << plain.out;
      RunResult limited = Probe(w, args);
      ASSERT_EQ(limited.status, 0) << limited.err;
      EXPECT_EQ(limited.GetInt("legacy"), 801) << "CUDA_ERROR_NOT_SUPPORTED expected";
      EXPECT_EQ(limited.GetInt("charged"), 0);
      EXPECT_NE(limited.err.find(std::string("gpufrac: ") + legacy.symbol +
                                 " is the 32-bit form from before CUDA 3.2"),
                std::string::npos)
          << limited.err;
      EXPECT_EQ(
          limited.Get("legacy_total"),
          legacy.kind == std::string("info") || legacy.kind == std::string("totalmem") ? "0" : "");
    }
  }
  EXPECT_EQ(w.Used(), 0u);
}

// The report of issue 16: two processes of a 2 GiB workload each took 3.75 GiB through the
// legacy cuMemAlloc, uncharged. Without the limiter the simulated driver gives them that memory;
// under it, neither gets any, and the GPU holds nothing but their contexts.
TEST_F(LimiterTest, TwoProcessesTakeNothingThroughTheLegacyCuMemAlloc) {
  Workload w(uuid_, 2 * kGiB);
  const unsigned long long each = 3840 * kMiB;  // all of the 32-bit address range
  auto physical_used = [&] {
    RunResult r = RunCommand({ProbePath(), "info"}, machine_.Env());
    return r.GetInt("total") - r.GetInt("free");
  };
  const long long one_context = physical_used();
  for (bool limited : {false, true}) {
    SCOPED_TRACE(limited ? "under the limiter" : "without the limiter");
    auto env = limited ? Merge(machine_.Env(), w.Env()) : machine_.Env();
    std::vector<pid_t> holders;
    std::string seen[2];
    const char* ways[2] = {"dlsym", "procaddr"};
    for (int i = 0; i < 2; ++i) {
      holders.push_back(Start(
          {ProbePath(), "--cuda-version", "3010", "legacy-hold", ways[i], std::to_string(each)},
          env, "legacy=", &seen[i]));
    }
    const long long used = physical_used();
    for (pid_t pid : holders) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (const std::string& line : seen) {
      EXPECT_NE(line.find(limited ? "legacy=801" : "legacy=0"), std::string::npos) << line;
    }
    EXPECT_EQ(used, 3 * one_context + (limited ? 0 : 2 * static_cast<long long>(each)));
  }
  EXPECT_EQ(w.Used(), 0u);
}

struct KindCase {
  const char* kind;
  unsigned long long bytes;
  unsigned long long expected_charge;
};

TEST_F(LimiterTest, EachAllocationKindIsChargedAndReleased) {
  Workload w(uuid_, kGiB, 100 * kMiB);
  const KindCase cases[] = {
      {"mem", 64 * kMiB, 64 * kMiB},
      {"pitch", 64 * kMiB, 64 * kMiB},  // 65536-byte rows need no padding
      {"managed", 64 * kMiB, 64 * kMiB},
      {"async", 64 * kMiB, 64 * kMiB},
      {"async_ptsz", 64 * kMiB, 64 * kMiB},
      {"pool", 64 * kMiB, 64 * kMiB},
      {"vmm", 64 * kMiB, 64 * kMiB},
      {"vmmmap", 64 * kMiB, 64 * kMiB},    // released while mapped: charged until the unmap
      {"vmmmulti", 64 * kMiB, 64 * kMiB},  // two mappings gone in one unmap
      {"array", 64 * kMiB, 64 * kMiB},
      {"array3d", 64 * kMiB, 64 * kMiB},
      {"mipmap", 64 * kMiB, 80 * kMiB},  // two levels: full size plus a quarter
      {"ctx", 0, 100 * kMiB},            // a created context costs the context charge
      {"hostpool", 64 * kMiB, 0},        // host memory is not device memory
      {"vmmhost", 64 * kMiB, 0},
      {"vmmnuma", 64 * kMiB, 0},
  };
  for (const KindCase& c : cases) {
    SCOPED_TRACE(c.kind);
    RunResult r = Probe(w, {"alloc", c.kind, std::to_string(c.bytes)});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.GetInt("alloc"), 0) << r.out;
    EXPECT_EQ(r.GetInt("charged"), static_cast<long long>(c.expected_charge)) << r.out;
    EXPECT_EQ(r.GetInt("free"), 0);
    EXPECT_EQ(r.GetInt("after"), 0) << "the free must release the whole charge";
  }
  // Every kind is refused past the limit (the primary context holds 100 MiB of it).
  for (const char* kind : {"mem", "pitch", "managed", "async", "pool", "vmm", "array", "mipmap"}) {
    SCOPED_TRACE(kind);
    RunResult r = Probe(w, {"alloc", kind, std::to_string(960 * kMiB)});
    EXPECT_EQ(r.GetInt("alloc"), 2) << r.out;
  }
}

TEST_F(LimiterTest, ContextMemoryCountsAgainstTheLimit) {
  Workload w(uuid_, kGiB, 200 * kMiB);
  RunResult info = Probe(w, {"info"});
  EXPECT_EQ(info.GetInt("free"), static_cast<long long>(kGiB - 200 * kMiB));
  RunResult fill = Probe(w, {"fill", std::to_string(100 * kMiB)});
  EXPECT_EQ(fill.GetInt("count"), 8);
  EXPECT_EQ(fill.GetInt("last"), 2);
}

// Destroying a context frees what was allocated in it; the charges must go with it.
TEST_F(LimiterTest, EndingAContextReleasesWhatWasAllocatedInIt) {
  Workload w(uuid_, kGiB, 100 * kMiB);
  RunResult destroyed = Probe(w, {"endctx", "ctx", std::to_string(500 * kMiB)});
  ASSERT_EQ(destroyed.status, 0) << destroyed.err;
  // The primary context (100 MiB), the created one (100 MiB) and the allocation.
  EXPECT_EQ(destroyed.GetInt("during"), static_cast<long long>(700 * kMiB));
  EXPECT_EQ(destroyed.GetInt("after"), static_cast<long long>(100 * kMiB));
  RunResult reset = Probe(w, {"endctx", "reset", std::to_string(500 * kMiB)});
  ASSERT_EQ(reset.status, 0) << reset.err;
  EXPECT_EQ(reset.GetInt("during"), static_cast<long long>(600 * kMiB));
  EXPECT_EQ(reset.GetInt("after"), static_cast<long long>(100 * kMiB));  // the new primary
}

// Many threads allocating at once, each block freed by another thread than allocated it: every
// allocation that fitted was charged, and everything was released.
TEST_F(LimiterTest, ThreadsAllocatingAndFreeingAcrossEachOther) {
  Workload w(uuid_, kGiB);
  RunResult r = Probe(w, {"threads", "8", std::to_string(2 * kMiB)});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.GetInt("failures"), 0);
  EXPECT_EQ(r.GetInt("threads_added"), static_cast<long long>(8 * 50 * 2 * kMiB));
  EXPECT_EQ(r.GetInt("threads_after"), 0);
  // 8 x 50 x 4 MiB = 1600 MiB does not fit in 1 GiB: exactly 256 blocks do.
  RunResult over = Probe(w, {"threads", "8", std::to_string(4 * kMiB)});
  EXPECT_EQ(over.GetInt("threads_added"), static_cast<long long>(kGiB));
  EXPECT_EQ(over.GetInt("threads_after"), 0);
}

TEST_F(LimiterTest, NvmlReportsTheLimitAndTheWorkloadsUse) {
  Workload w(uuid_, 4 * kGiB, 300 * kMiB);
  RunResult r = Probe(w, {"nvml"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* v : {"nvml", "nvml2"}) {
    SCOPED_TRACE(v);
    EXPECT_EQ(r.GetInt(std::string(v) + ".total"), static_cast<long long>(4 * kGiB));
    EXPECT_EQ(r.GetInt(std::string(v) + ".used"), static_cast<long long>(300 * kMiB));
    EXPECT_EQ(r.GetInt(std::string(v) + ".free"), static_cast<long long>(4 * kGiB - 300 * kMiB));
  }
}

TEST(LimiterPhysicalTest, ReportedFreeNeverExceedsWhatTheDeviceHasFree) {
  SimMachine machine("1xT4");
  std::string uuid = machine.Uuid();
  Workload w(uuid, 14 * kGiB);
  // Someone outside the workload takes most of the card.
  std::string seen;
  pid_t other =
      Start({ProbePath(), "hold", std::to_string(12 * kGiB)}, machine.Env(), "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;
  RunResult r = RunCommand({ProbePath(), "info"}, Merge(machine.Env(), w.Env()));
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  EXPECT_EQ(r.GetInt("total"), static_cast<long long>(14 * kGiB));
  EXPECT_GT(r.GetInt("free"), 0);
  EXPECT_LT(r.GetInt("free"), static_cast<long long>(15360 * kMiB - 12 * kGiB));
}

TEST_F(LimiterTest, EightRacingProcessesNeverHoldMoreThanTheLimit) {
  constexpr int kProcesses = 8, kRounds = 100;
  const unsigned long long limit = 1000 * kMiB, each = 300 * kMiB;
  Workload w(uuid_, limit);
  std::string shm = "/gpufrac-race-" + std::to_string(getpid());
  int fd = shm_open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, sizeof(RaceShared)), 0);
  auto* shared = static_cast<RaceShared*>(
      mmap(nullptr, sizeof(RaceShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&shared->barrier, &attr, kProcesses);

  std::vector<pid_t> pids;
  auto env = Merge(machine_.Env(), w.Env());
  for (int p = 0; p < kProcesses; ++p) {
    pids.push_back(Start({ProbePath(), "race", shm, std::to_string(each), std::to_string(kRounds)},
                         env, "init=", nullptr));
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_LE(shared->max_live_bytes.load(), static_cast<long long>(limit));
  for (int round = 0; round < kRounds; ++round) {
    // Exactly floor(1000 / 300) = 3 fit: never more (the limit holds), never fewer (no charge
    // leaks from one round to the next).
    ASSERT_EQ(shared->successes[round].load(), 3) << "round " << round;
  }
  EXPECT_EQ(w.Used(), 0u);
  munmap(shared, sizeof(RaceShared));
  shm_unlink(shm.c_str());
}

TEST_F(LimiterTest, AProcessKilledWithSigkillLeavesNoCharge) {
  Workload w(uuid_, 1000 * kMiB);
  auto env = Merge(machine_.Env(), w.Env());
  std::string seen;
  pid_t holder = Start({ProbePath(), "hold", std::to_string(700 * kMiB)}, env, "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;
  EXPECT_EQ(w.Used(), 700 * kMiB);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  // The next process of the workload sees the memory back, and can allocate it.
  RunResult info = Probe(w, {"info"});
  EXPECT_EQ(info.GetInt("free"), static_cast<long long>(1000 * kMiB));
  RunResult again = Probe(w, {"alloc", "mem", std::to_string(1000 * kMiB)});
  EXPECT_EQ(again.GetInt("alloc"), 0);
  EXPECT_EQ(w.Used(), 0u);
}

TEST_F(LimiterTest, KilledHolderIsReclaimedByTheNextAllocation) {
  Workload w(uuid_, 1000 * kMiB);
  auto env = Merge(machine_.Env(), w.Env());
  std::string seen;
  pid_t holder = Start({ProbePath(), "hold", std::to_string(900 * kMiB)}, env, "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos) << seen;
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  RunResult r = Probe(w, {"alloc", "mem", std::to_string(800 * kMiB)});
  EXPECT_EQ(r.GetInt("alloc"), 0) << r.err;
}

// Inside a container: the limiter loaded from /etc/ld.so.preload, the limits at the fixed path,
// which wins over GPUFRAC_LIMIT_FILE. Run in a private mount namespace with /etc overlaid, so the
// machine's own /etc is never touched.
TEST_F(LimiterTest, WorksFromEtcLdSoPreloadWithTheFixedLimitPath) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a private mount namespace";
  Workload w(uuid_, 3 * kGiB), bigger(uuid_, 9 * kGiB);
  char dir[] = "/tmp/gpufrac-etc-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string d = dir;
  std::string script = "mkdir -p " + d + "/u " + d +
                       "/w && "
                       "mount -t overlay overlay -o lowerdir=/etc,upperdir=" +
                       d + "/u,workdir=" + d +
                       "/w /etc || { echo overlay=unavailable; exit 0; }; "
                       "mkdir -p /etc/gpufrac && cp " +
                       w.path() +
                       " /etc/gpufrac/limits && "
                       "chmod 0444 /etc/gpufrac/limits && echo " +
                       BuildPath("lib/libgpufrac.so") + " > /etc/ld.so.preload && exec " +
                       ProbePath() + " info";
  RunResult r = RunCommand({"unshare", "-m", "sh", "-c", script},
                           Merge(machine_.Env(), {{"GPUFRAC_LIMIT_FILE", bigger.path()}}));
  RunCommand({"rm", "-rf", d}, {});
  if (r.Get("overlay") == "unavailable" || r.status == 127) {
    GTEST_SKIP() << "no overlay mounts here: " << r.err;
  }
  EXPECT_EQ(r.GetInt("total"), static_cast<long long>(3 * kGiB)) << r.out << r.err;
}

TEST_F(LimiterTest, AnUnusableConfigurationStopsCudaWithAClearMessage) {
  auto env = Merge(machine_.Env(), {{"LD_PRELOAD", BuildPath("lib/libgpufrac.so")},
                                    {"GPUFRAC_LIMIT_FILE", "/nonexistent/limits"}});
  RunResult missing = RunCommand({ProbePath(), "info"}, env);
  EXPECT_EQ(missing.GetInt("init"), 3);  // CUDA_ERROR_NOT_INITIALIZED
  EXPECT_NE(missing.err.find("gpufrac: cannot open limit file /nonexistent/limits"),
            std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find("CUDA is disabled"), std::string::npos);

  char path[] = "/tmp/gpufrac-bad-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_EQ(write(fd, "gpufrac-limits 1\nworkload w\ngpu nonsense limit 5\n", 49), 49);
  close(fd);
  chmod(path, 0444);
  env["GPUFRAC_LIMIT_FILE"] = path;
  RunResult bad = RunCommand({ProbePath(), "info"}, env);
  EXPECT_EQ(bad.GetInt("init"), 3);
  EXPECT_NE(bad.err.find("line 3: 'nonsense' is not a GPU or MIG UUID"), std::string::npos)
      << bad.err;
  unlink(path);
}

TEST_F(LimiterTest, AWorkloadCannotRaiseItsOwnLimit) {
  Workload w(uuid_, kGiB);
  Workload bigger(uuid_, 8 * kGiB);
  // 1. Pointing the limiter at another file, and setting variables, after start: no effect.
  RunResult r = Probe(w, {"setenv-alloc", bigger.path(), std::to_string(2 * kGiB)});
  EXPECT_EQ(r.GetInt("alloc"), 2);
  // 2. Rewriting the workload's own limit file once the budget exists: the budget keeps the
  //    limit it was created with.
  ASSERT_EQ(Probe(w, {"info"}).GetInt("total"), static_cast<long long>(kGiB));
  chmod(w.path().c_str(), 0644);
  FILE* f = fopen(w.path().c_str(), "w");
  fprintf(f, "gpufrac-limits 1\nworkload %s\ngpu %s limit %llu\n", w.id().c_str(), uuid_.c_str(),
          8 * kGiB);
  fclose(f);
  chmod(w.path().c_str(), 0444);
  RunResult after = Probe(w, {"alloc", "mem", std::to_string(2 * kGiB)});
  EXPECT_EQ(after.GetInt("alloc"), 2);
  EXPECT_EQ(Probe(w, {"info"}).GetInt("total"), static_cast<long long>(kGiB));
}

TEST_F(LimiterTest, TwoWorkloadsOnOneGpuStayWithinTheirOwnLimits) {
  Workload small(uuid_, kGiB), large(uuid_, 3 * kGiB);
  std::string seen;
  pid_t holder = Start({ProbePath(), "hold", std::to_string(900 * kMiB)},
                       Merge(machine_.Env(), small.Env()), "hold=", &seen);
  ASSERT_NE(seen.find("hold=0"), std::string::npos);
  RunResult l = Probe(large, {"fill", std::to_string(100 * kMiB)});
  RunResult s = Probe(small, {"fill", std::to_string(100 * kMiB)});
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_EQ(l.GetInt("count"), 30);  // the neighbour's use does not count against it
  EXPECT_EQ(s.GetInt("count"), 1);   // 900 MiB held elsewhere in the workload + 100 MiB
}

}  // namespace
}  // namespace gpufrac::testing

namespace gpufrac::testing {
namespace {

// Issue 16: a workload reaches only the GPUs of its limit file. One given GPU 0 of two, that
// names GPU 1 itself (by index or UUID, in its environment or by setenv before cuInit), sees
// no GPU 1 and cannot allocate there; NVML lists only GPU 0 and finds GPU 1 by no lookup.
class LimiterIsolationTest : public ::testing::Test {
 protected:
  LimiterIsolationTest()
      : machine_("2xH100-80GB"), gpu0_(machine_.Uuid(0)), gpu1_(machine_.Uuid(1)) {}

  // cuda_probe with `visible` as CUDA_VISIBLE_DEVICES ("" leaves it unset), under the limiter
  // for `w` or (null) without it.
  RunResult Probe(const Workload* w, const std::string& visible, std::vector<std::string> args) {
    auto env = machine_.Env();
    if (w != nullptr) env = Merge(env, w->Env());
    if (!visible.empty()) env["CUDA_VISIBLE_DEVICES"] = visible;
    args.insert(args.begin(), ProbePath());
    return RunCommand(args, env);
  }

  SimMachine machine_;
  std::string gpu0_, gpu1_;
};

TEST_F(LimiterIsolationTest, NamingAnotherGpuShowsNoDevice) {
  Workload w(gpu0_, kGiB);
  const std::string twenty_gib = std::to_string(20 * kGiB);
  for (const std::string& other : {std::string("1"), gpu1_, gpu1_.substr(0, 12)}) {
    SCOPED_TRACE(other);
    // Without the limiter the driver shows GPU 1 and lets 20 GiB be allocated there.
    RunResult plain = Probe(nullptr, other, {"alloc", "mem", twenty_gib});
    EXPECT_EQ(plain.GetInt("alloc"), 0) << plain.err;
    EXPECT_EQ(Probe(nullptr, other, {"uuid"}).Get("uuid"), gpu1_);

    RunResult limited = Probe(&w, other, {"alloc", "mem", twenty_gib});
    EXPECT_EQ(limited.GetInt("init"), 100) << "CUDA_ERROR_NO_DEVICE expected: " << limited.out;
    EXPECT_EQ(limited.Get("alloc"), "");
    EXPECT_NE(limited.err.find("gpufrac: CUDA_VISIBLE_DEVICES names " + other +
                               ", which is not one of this workload's GPUs (it has one: 0, or "
                               "its UUID); CUDA sees no device"),
              std::string::npos)
        << limited.err;
    // The same named with setenv after the limiter loaded, before cuInit, over the launcher's.
    RunResult later = Probe(&w, gpu0_, {"--setenv-visible", other, "alloc", "mem", twenty_gib});
    EXPECT_EQ(later.GetInt("init"), 100) << later.out;
    // Listed after the workload's own GPU, it is cut off: only GPU 0 is there.
    RunResult both = Probe(&w, "0," + other, {"devices"});
    EXPECT_EQ(both.GetInt("cuda.count"), 1) << both.err;
    EXPECT_EQ(both.Get("uuid"), gpu0_);
  }
  EXPECT_EQ(w.Used(), 0u);
}

TEST_F(LimiterIsolationTest, TheWorkloadsOwnGpuIsSeenHoweverItIsNamed) {
  Workload w(gpu0_, kGiB);
  for (const std::string& own : {std::string(""), gpu0_, std::string("0"), gpu0_.substr(0, 10)}) {
    SCOPED_TRACE(own);
    RunResult r = Probe(&w, own, {"devices"});
    EXPECT_EQ(r.GetInt("cuda.count"), 1) << r.err;
    EXPECT_EQ(r.Get("uuid"), gpu0_);
    EXPECT_EQ(r.err, "");  // nothing to complain about
    RunResult alloc = Probe(&w, own, {"alloc", "mem", std::to_string(kGiB)});
    EXPECT_EQ(alloc.GetInt("alloc"), 0);
    EXPECT_EQ(alloc.GetInt("charged"), static_cast<long long>(kGiB));
  }
  // A workload given GPU 1 only: it is that workload's GPU 0, as in a container given GPU 1.
  Workload second(gpu1_, kGiB);
  EXPECT_EQ(Probe(&second, "", {"uuid"}).Get("uuid"), gpu1_);
  EXPECT_EQ(Probe(&second, "0", {"uuid"}).Get("uuid"), gpu1_);
  EXPECT_EQ(Probe(&second, "1", {"uuid"}).GetInt("init"), 100);
}

TEST_F(LimiterIsolationTest, NvmlListsOnlyTheWorkloadsGpus) {
  RunResult all = Probe(nullptr, "", {"nvml-list", "GPU-none", "none"});
  ASSERT_EQ(all.GetInt("nvml.count"), 2) << all.err;
  ASSERT_EQ(all.Get("nvml.1.uuid"), gpu1_);
  const std::string serial1 = all.Get("nvml.1.serial");
  ASSERT_EQ(serial1.size(), 13u);
  // Without the limiter every lookup of GPU 1 finds it.
  RunResult plain = Probe(nullptr, "", {"nvml-list", gpu1_, serial1});
  EXPECT_EQ(plain.GetInt("byuuid.rc"), 0);
  EXPECT_EQ(plain.GetInt("byserial.rc"), 0);
  EXPECT_EQ(plain.GetInt("byuuidv.rc"), 0);
  EXPECT_EQ(plain.GetInt("bypci.found"), 2);

  const std::string serial0 = all.Get("nvml.0.serial");

  Workload on0(gpu0_, kGiB), on1(gpu1_, kGiB);
  struct Case {
    const Workload* w;
    std::string mine, other, other_serial;
  };
  for (const Case& c : {Case{&on0, gpu0_, gpu1_, serial1}, Case{&on1, gpu1_, gpu0_, serial0}}) {
    SCOPED_TRACE(c.mine);
    RunResult r = Probe(c.w, "", {"nvml-list", c.other, c.other_serial});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.GetInt("nvml.count"), 1);
    EXPECT_EQ(r.GetInt("nvml.count1"), 1);
    EXPECT_EQ(r.Get("nvml.0.uuid"), c.mine);
    EXPECT_EQ(r.GetInt("nvml.0.index"), 0);  // numbered from 0, as in a container
    EXPECT_EQ(r.GetInt("nvml.0.rc1"), 0);
    EXPECT_EQ(r.GetInt("nvml.0.same"), 1);
    EXPECT_EQ(r.GetInt("nvml.1.rc"), 2);  // NVML_ERROR_INVALID_ARGUMENT: past the last
    EXPECT_EQ(r.GetInt("nvml.1.rc1"), 2);
    EXPECT_EQ(r.GetInt("byuuid.rc"), 6);  // NVML_ERROR_NOT_FOUND
    EXPECT_EQ(r.GetInt("byserial.rc"), 6);
    EXPECT_EQ(r.GetInt("byuuidv.rc"), 6);
    EXPECT_EQ(r.GetInt("bypci.found"), 1);  // of all 256 buses, only its own GPU's
    EXPECT_EQ(r.GetInt("bypci1.found"), 1);
    // Its own GPU is found by every lookup.
    RunResult own = Probe(c.w, "", {"nvml-list", c.mine, r.Get("nvml.0.serial")});
    EXPECT_EQ(own.GetInt("byuuid.rc"), 0);
    EXPECT_EQ(own.GetInt("byserial.rc"), 0);
    EXPECT_EQ(own.GetInt("byuuidv.rc"), 0);
  }
}

// A workload given a MIG device: CUDA sees that device only, and NVML lists its GPU with that
// one MIG device; the GPU's other MIG device is found by no lookup.
TEST(LimiterMigIsolationTest, OnlyTheWorkloadsMigDeviceIsVisible) {
  SimMachine machine("1xA100-40GB:mig");
  RunResult setup = RunCommand({ProbePath(), "mig-setup"}, machine.Env());
  ASSERT_EQ(setup.status, 0) << setup.err;
  const std::string mine = setup.Get("mig.0"), other = setup.Get("mig.1");
  ASSERT_EQ(mine.rfind("MIG-", 0), 0u) << setup.out;
  Workload w(mine, kGiB);
  auto env = Merge(machine.Env(), w.Env());
  env["CUDA_VISIBLE_DEVICES"] = mine;
  // (The probe prints the device's UUID bytes with a GPU- prefix.)
  const std::string mine_bytes = "GPU-" + mine.substr(4);
  RunResult cuda = RunCommand({ProbePath(), "devices"}, env);
  EXPECT_EQ(cuda.GetInt("cuda.count"), 1) << cuda.err;
  EXPECT_EQ(cuda.Get("uuid"), mine_bytes);
  env["CUDA_VISIBLE_DEVICES"] = other;
  EXPECT_EQ(RunCommand({ProbePath(), "devices"}, env).GetInt("init"), 100);
  env.erase("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(RunCommand({ProbePath(), "devices"}, env).Get("uuid"), mine_bytes);

  RunResult plain = RunCommand({ProbePath(), "nvml-list", other, "none"}, machine.Env());
  EXPECT_EQ(plain.GetInt("nvml.0.migs"), 2) << plain.out;
  EXPECT_EQ(plain.GetInt("byuuid.rc"), 0);
  RunResult nvml = RunCommand({ProbePath(), "nvml-list", other, "none"}, env);
  EXPECT_EQ(nvml.GetInt("nvml.count"), 1) << nvml.err;
  EXPECT_EQ(nvml.Get("nvml.0.uuid"), plain.Get("nvml.0.uuid"));  // the MIG device's GPU
  EXPECT_EQ(nvml.GetInt("nvml.0.migs"), 1);
  EXPECT_EQ(nvml.Get("nvml.0.mig.0"), mine);
  EXPECT_EQ(nvml.GetInt("byuuid.rc"), 6);
}

}  // namespace
}  // namespace gpufrac::testing
