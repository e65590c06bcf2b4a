// Compute-share benchmark (issue 17): how closely saturating workloads on one simulated GPU get
// their compute requests, what that costs in GPU throughput and per launch, and what latency a
// small workload's short kernels see behind a big one's long kernels — for three arms measured in
// the same run: no limiter (the GPU's equal time-slicing), gpufrac (libgpufrac.so with compute
// requests) and a HAMi-core-like launch throttle (libhami_like.so, bench/hami_like_limiter.cc).
// The part "mps" (issue 18) sets a latency-sensitive and a throughput workload side by side under
// no sharing policy, gpufrac's time shares and MPS (clients of a control daemon, SM percentages).
// Ground truth is the simulator's engine time per process (simgpu/core/engine_truth.h). A
// benchmark, not a test: it measures and prints, and never fails on a number. Run
// bench/run_compute_bench.sh or bench/run_mps_bench.sh.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "busy_loops.h"
#include "limiter/budget.h"
#include "limiter/compute_arbiter.h"
#include "limiter/limit_config.h"
#include "mps_daemon.h"
#include "simgpu/core/engine_truth.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

enum class Arm { kNone, kGpufrac, kHami, kMps };
constexpr Arm kArms[] = {Arm::kNone, Arm::kGpufrac, Arm::kHami};
constexpr Arm kMpsArms[] = {Arm::kNone, Arm::kGpufrac, Arm::kMps};

const char* ArmName(Arm arm) {
  switch (arm) {
    case Arm::kNone:
      return "none";
    case Arm::kGpufrac:
      return "gpufrac";
    case Arm::kHami:
      return "hami-like";
    case Arm::kMps:
      return "mps";
  }
  return "?";
}

struct Options {
  int seeds = 10;
  double warmup_s = 1.0;
  double window_s = 5.0;
  int cost_reps = 7;
  double cost_s = 1.0;
  int latency_runs = 3;
  int length_runs = 2;
  double latency_s = 5.0;
  int mps_runs = 3;
  double mps_s = 6.0;
  std::string parts = "shares,lengths,cost,latency";
  std::string out = std::string(GPUFRAC_BUILD_DIR) + "/compute-bench";
  std::string hami_step;  // "" (published) or "linear"
  // The part "pressure": busy loops per core beside the workloads, one level after another.
  std::string hogs = "0,2,8";
  // "own": each loop in a session of its own (autogroup schedules it as a group beside the
  // workloads'); "callers": in the bench's, where every thread competes alone (busy_loops.h).
  std::string hog_group = "own";
  int pressure_seeds = 3;
};

Options g_opt;
std::string g_uuid;

void SleepS(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One run's environment for the arms that need files: a budget directory as a launcher makes it,
// with the GPU's compute arbiter in it. Removed when the run ends.
class RunDir {
 public:
  RunDir() {
    char tmpl[] = "/tmp/gpufrac-cbench-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char err[256];
    if (!gpufrac::limiter::ComputeArbiter::CreateAt(fd_, ("compute." + g_uuid).c_str(),
                                                    gpufrac::limiter::kDefaultTurnNs, err,
                                                    sizeof(err))) {
      std::fprintf(stderr, "compute_share_bench: arbiter: %s\n", err);
      std::exit(1);
    }
  }
  ~RunDir() {
    mps_.reset();  // quit before its directories go
    close(fd_);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A gpufrac workload: its budget and read-only limit file; returns the file's path.
  std::string AddGpufracWorkload(const std::string& id, int request_milli) {
    char name[200], err[256];
    gpufrac::limiter::BudgetName(id.c_str(), g_uuid.c_str(), name, sizeof(name));
    if (!gpufrac::limiter::Budget::CreateAt(fd_, name + 1, uint64_t{20} << 30, 0, -1, -1, err,
                                            sizeof(err))) {
      std::fprintf(stderr, "compute_share_bench: budget: %s\n", err);
      std::exit(1);
    }
    const std::string path = dir_ + "/" + id + ".limits";
    std::ofstream(path) << "gpufrac-limits 1\nworkload " << id << "\nbudgets " << dir_ << "\ngpu "
                        << g_uuid << " limit " << (uint64_t{20} << 30) << " context 0 compute "
                        << request_milli << " compute-limit 1000\n";
    chmod(path.c_str(), 0444);
    return path;
  }
  // An MPS control daemon for this run, started on first use; its pipe directory.
  const std::string& Mps() {
    if (mps_ == nullptr) {
      mps_ = std::make_unique<gpufrac::bench::MpsDaemon>(
          std::string(GPUFRAC_SIMGPU_DIR) + "/bin/nvidia-cuda-mps-control", dir_);
      std::string error;
      if (!mps_->Start(&error)) {
        std::fprintf(stderr, "compute_share_bench: MPS daemon: %s\n", error.c_str());
        std::exit(1);
      }
    }
    return mps_->pipe_directory();
  }
  gpufrac::bench::MpsDaemon* mps() { return mps_.get(); }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  int fd_ = -1;
  std::unique_ptr<gpufrac::bench::MpsDaemon> mps_;
};

struct Proc {
  pid_t pid = -1;
  std::string out;  // its stdout, a file
};

// Starts gpu_load under `arm` as a workload with compute request `request_milli`, and returns
// once it printed "ready". Its kernels are sized for `sized_for_sms` SMs (0: the count its device
// reports, which under MPS is the client's share). Under MPS the request is the client's active
// thread percentage; under the other arms no MPS daemon can reach it.
Proc StartLoad(RunDir& run, Arm arm, int index, int request_milli, const std::string& mode,
               double kernel_ms, double seconds, int sized_for_sms = 0) {
  const std::string id = "w" + std::to_string(index);
  std::vector<std::pair<std::string, std::string>> env;
  if (arm == Arm::kMps) {
    char percentage[16];
    std::snprintf(percentage, sizeof(percentage), "%.1f", request_milli / 10.0);
    env.push_back({"CUDA_MPS_PIPE_DIRECTORY", run.Mps()});
    env.push_back({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", percentage});
  } else {
    env.push_back({"CUDA_MPS_PIPE_DIRECTORY", run.path() + "/no-mps-daemon"});
  }
  if (arm == Arm::kGpufrac) {
    env.push_back({"LD_PRELOAD", std::string(GPUFRAC_BUILD_DIR) + "/lib/libgpufrac.so"});
    env.push_back({"GPUFRAC_LIMIT_FILE", run.AddGpufracWorkload(id, request_milli)});
  } else if (arm == Arm::kHami) {
    env.push_back({"LD_PRELOAD", std::string(GPUFRAC_BUILD_DIR) + "/lib/libhami_like.so"});
    env.push_back({"HAMI_LIKE_SHARE", std::to_string(request_milli / 1000.0)});
    if (!g_opt.hami_step.empty()) env.push_back({"HAMI_LIKE_STEP", g_opt.hami_step});
  }
  Proc p;
  p.out = run.path() + "/" + id + ".out";
  char kms[32], secs[32], sms[16] = "";
  std::snprintf(kms, sizeof(kms), "%.4f", kernel_ms);
  std::snprintf(secs, sizeof(secs), "%.3f", seconds);
  if (sized_for_sms > 0) std::snprintf(sms, sizeof(sms), "%d", sized_for_sms);
  const std::string load = std::string(GPUFRAC_BUILD_DIR) + "/tests/gpu_load";
  p.pid = fork();
  if (p.pid == 0) {
    const int fd = open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    if (sized_for_sms > 0) {
      execl(load.c_str(), load.c_str(), mode.c_str(), kms, secs, sms, static_cast<char*>(nullptr));
    }
    execl(load.c_str(), load.c_str(), mode.c_str(), kms, secs, static_cast<char*>(nullptr));
    _exit(127);
  }
  const Clock::time_point start = Clock::now();
  while (ReadFile(p.out).find("ready") == std::string::npos) {
    int status;
    if (waitpid(p.pid, &status, WNOHANG) == p.pid || SecondsSince(start) > 20) {
      std::fprintf(stderr, "compute_share_bench: gpu_load %s did not start\n", mode.c_str());
      std::exit(1);
    }
    SleepS(0.002);
  }
  return p;
}

void Kill(Proc& p) {
  if (p.pid <= 0) return;
  kill(p.pid, SIGKILL);
  waitpid(p.pid, nullptr, 0);
  p.pid = -1;
}

// Waits for `p` to exit (killing it after `timeout_s`), and returns its stdout.
std::string Finish(Proc& p, double timeout_s) {
  const Clock::time_point start = Clock::now();
  int status;
  while (waitpid(p.pid, &status, WNOHANG) != p.pid) {
    if (SecondsSince(start) > timeout_s) {
      std::fprintf(stderr, "compute_share_bench: pid %d overran; killed\n", p.pid);
      Kill(p);
      break;
    }
    SleepS(0.01);
  }
  p.pid = -1;
  return ReadFile(p.out);
}

uint64_t EngineNs(pid_t pid) {
  unsigned long long ns = 0;
  simgpuGetProcessEngineTime(0, static_cast<unsigned>(pid), &ns);
  return ns;
}

uint64_t BusyNs() {
  unsigned long long ns = 0;
  simgpuGetEngineBusyTime(0, &ns);
  return ns;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[rank == 0 ? 0 : rank - 1];
}
double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double Max(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

// --- shares --------------------------------------------------------------------------------

struct Mix {
  const char* name;
  std::vector<int> requests;  // thousandths
  std::vector<double> kernel_ms = {};  // fixed kernel lengths; empty: drawn by the seed
};
const Mix kMixes[] = {{"0.25/0.75", {250, 750}},
                      {"0.1/0.9", {100, 900}},
                      {"0.3/0.7", {300, 700}},
                      {"0.2/0.3/0.5", {200, 300, 500}}};

struct ShareRun {
  double error_pts = 0;  // max over the workloads of |got - request|, percentage points
  double busy = 0;       // the engine's busy fraction over the window
  std::vector<double> got;
};

// "0.250 / 0.744": each workload's median share over `runs`.
std::string MedianShares(const std::vector<ShareRun>& runs, size_t workloads) {
  std::string cell;
  for (size_t i = 0; i < workloads; ++i) {
    std::vector<double> g;
    for (const ShareRun& r : runs) g.push_back(r.got[i]);
    char item[32];
    std::snprintf(item, sizeof(item), "%s%.3f", i ? " / " : "", Median(g));
    cell += item;
  }
  return cell;
}

// One mix under one arm with one seed. The seed draws each workload's kernel length (0.5-2 ms),
// the order they start in and the gaps between their starts (0-100 ms); every arm sees the same
// draws for a seed.
ShareRun RunShares(const Mix& mix, int mix_index, Arm arm, int seed, std::ofstream& csv) {
  std::mt19937 rng(static_cast<unsigned>(seed * 7919 + mix_index));
  std::uniform_real_distribution<double> kernel(0.5, 2.0), gap(0.0, 0.1);
  const size_t n = mix.requests.size();
  std::vector<double> kernel_ms(n);
  for (double& k : kernel_ms) k = kernel(rng);
  if (!mix.kernel_ms.empty()) kernel_ms = mix.kernel_ms;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<double> gaps(n);
  for (double& g : gaps) g = gap(rng);

  RunDir run;
  std::vector<Proc> procs(n);
  const double seconds = g_opt.warmup_s + g_opt.window_s + 5;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    if (k > 0) SleepS(gaps[k]);
    procs[i] = StartLoad(run, arm, static_cast<int>(i), mix.requests[i], "kernel", kernel_ms[i],
                         seconds);
  }
  SleepS(g_opt.warmup_s);
  // Engine time every second over the window, for the one-second extremes.
  std::vector<std::vector<uint64_t>> ns(n);
  std::vector<uint64_t> busy;
  std::vector<Clock::time_point> at;
  const int steps = std::max(1, static_cast<int>(std::lround(g_opt.window_s)));
  for (int s = 0; s <= steps; ++s) {
    if (s > 0) SleepS(g_opt.window_s * s / steps - SecondsSince(at.front()));
    at.push_back(Clock::now());
    busy.push_back(BusyNs());
    for (size_t i = 0; i < n; ++i) ns[i].push_back(EngineNs(procs[i].pid));
  }
  for (Proc& p : procs) Kill(p);

  ShareRun r;
  const double elapsed = std::chrono::duration<double>(at.back() - at.front()).count();
  r.busy = static_cast<double>(busy.back() - busy.front()) / 1e9 / elapsed;
  for (size_t i = 0; i < n; ++i) {
    const double got = static_cast<double>(ns[i].back() - ns[i].front()) / 1e9 / elapsed;
    double lo = 1, hi = 0;
    for (int s = 1; s <= steps; ++s) {
      const double dt = std::chrono::duration<double>(at[s] - at[s - 1]).count();
      const double share = static_cast<double>(ns[i][s] - ns[i][s - 1]) / 1e9 / dt;
      lo = std::min(lo, share);
      hi = std::max(hi, share);
    }
    const double err = std::fabs(got - mix.requests[i] / 1000.0) * 100;
    r.error_pts = std::max(r.error_pts, err);
    r.got.push_back(got);
    char line[256];
    std::snprintf(line, sizeof(line), "%s,%s,%d,%zu,%.3f,%.3f,%.4f,%.2f,%.4f,%.4f,%.4f\n",
                  mix.name, ArmName(arm), seed, i, mix.requests[i] / 1000.0, kernel_ms[i], got,
                  err, r.busy, lo, hi);
    csv << line;
  }
  csv.flush();
  return r;
}

// Whether a workload's kernel length moves its share: two workloads whose kernels differ 4x.
void LengthsPart(std::FILE* md) {
  static const Mix kLengthMixes[] = {{"0.5/0.5, 0.5 ms / 2 ms", {500, 500}, {0.5, 2.0}},
                                     {"0.25/0.75, 2 ms / 0.5 ms", {250, 750}, {2.0, 0.5}},
                                     {"0.25/0.75, 0.5 ms / 2 ms", {250, 750}, {0.5, 2.0}}};
  std::ofstream csv(g_opt.out + "/lengths.csv");
  csv << "mix,arm,seed,workload,request,kernel_ms,got,error_pts,busy,min_1s,max_1s\n";
  std::fprintf(md, "\n### Kernel length against share (%d runs each, %.1f s warm-up, %.1f s "
                   "window; shares got, median)\n\n| mix, kernels | none | gpufrac | hami-like "
                   "|\n|---|---|---|---|\n",
               g_opt.length_runs, g_opt.warmup_s, g_opt.window_s);
  for (int m = 0; m < static_cast<int>(std::size(kLengthMixes)); ++m) {
    std::map<Arm, std::vector<ShareRun>> by_arm;
    for (int seed = 0; seed < g_opt.length_runs; ++seed) {
      std::vector<Arm> arms(std::begin(kArms), std::end(kArms));
      std::mt19937 rng(static_cast<unsigned>(seed * 31 + m + 100));
      std::shuffle(arms.begin(), arms.end(), rng);
      for (Arm arm : arms) {
        by_arm[arm].push_back(RunShares(kLengthMixes[m], m + 100, arm, seed, csv));
        std::fprintf(stderr, "lengths %s %s run %d: error %.2f pts\n", kLengthMixes[m].name,
                     ArmName(arm), seed, by_arm[arm].back().error_pts);
      }
    }
    std::fprintf(md, "| %s", kLengthMixes[m].name);
    for (Arm arm : kArms) {
      std::fprintf(md, " | %s",
                   MedianShares(by_arm[arm], kLengthMixes[m].requests.size()).c_str());
    }
    std::fprintf(md, " |\n");
  }
}

void SharesPart(std::FILE* md) {
  std::ofstream csv(g_opt.out + "/shares.csv");
  csv << "mix,arm,seed,workload,request,kernel_ms,got,error_pts,busy,min_1s,max_1s\n";
  // results[mix][arm] per seed
  std::map<int, std::map<Arm, std::vector<ShareRun>>> results;
  for (int seed = 0; seed < g_opt.seeds; ++seed) {
    for (int m = 0; m < static_cast<int>(std::size(kMixes)); ++m) {
      // The arms' order changes with the seed, so that drift on the machine falls on all alike.
      std::vector<Arm> arms(std::begin(kArms), std::end(kArms));
      std::mt19937 rng(static_cast<unsigned>(seed * 31 + m));
      std::shuffle(arms.begin(), arms.end(), rng);
      for (Arm arm : arms) {
        const ShareRun r = RunShares(kMixes[m], m, arm, seed, csv);
        std::fprintf(stderr, "shares %s %s seed %d: error %.2f pts, busy %.4f\n", kMixes[m].name,
                     ArmName(arm), seed, r.error_pts, r.busy);
        results[m][arm].push_back(r);
      }
    }
  }
  std::fprintf(md,
               "\n### Share error (percentage points, max over the mix's workloads; %d seeds, "
               "%.1f s warm-up, %.1f s window)\n\n",
               g_opt.seeds, g_opt.warmup_s, g_opt.window_s);
  std::fprintf(md, "| mix | none: median | none: worst | gpufrac: median | gpufrac: worst | "
                   "hami-like: median | hami-like: worst |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (auto& [m, by_arm] : results) {
    std::fprintf(md, "| %s", kMixes[m].name);
    for (Arm arm : kArms) {
      std::vector<double> e;
      for (const ShareRun& r : by_arm[arm]) e.push_back(r.error_pts);
      std::fprintf(md, " | %.2f | %.2f", Median(e), Max(e));
    }
    std::fprintf(md, " |\n");
  }
  std::fprintf(md, "\n### Shares got (median over seeds, per workload)\n\n| mix | none | gpufrac | "
                   "hami-like |\n|---|---|---|---|\n");
  for (auto& [m, by_arm] : results) {
    std::fprintf(md, "| %s", kMixes[m].name);
    for (Arm arm : kArms) {
      std::fprintf(md, " | %s", MedianShares(by_arm[arm], kMixes[m].requests.size()).c_str());
    }
    std::fprintf(md, " |\n");
  }
  std::fprintf(md, "\n### GPU busy fraction and throughput lost against no limiter (paired by "
                   "seed: 1 - busy(arm) / busy(none))\n\n| mix | none: busy | gpufrac: busy | "
                   "gpufrac: lost, median | gpufrac: lost, worst | hami-like: busy | hami-like: "
                   "lost, median | hami-like: lost, worst |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (auto& [m, by_arm] : results) {
    auto busy = [&](Arm arm) {
      std::vector<double> b;
      for (const ShareRun& r : by_arm[arm]) b.push_back(r.busy);
      return b;
    };
    const std::vector<double> none = busy(Arm::kNone);
    std::fprintf(md, "| %s | %.4f", kMixes[m].name, Median(none));
    for (Arm arm : {Arm::kGpufrac, Arm::kHami}) {
      const std::vector<double> b = busy(arm);
      std::vector<double> lost;
      for (size_t s = 0; s < b.size() && s < none.size(); ++s) {
        lost.push_back((1 - b[s] / none[s]) * 100);
      }
      std::fprintf(md, " | %.4f | %.2f%% | %.2f%%", Median(b), Median(lost), Max(lost));
    }
    std::fprintf(md, " |\n");
  }
}

// --- CPU pressure ---------------------------------------------------------------------------

struct BurstRun {
  double busy = 0;
  int quiets = 0;              // quiet periods the bursty workload began in the window
  double idle_ms_per_quiet = 0;  // the GPU's idle time in the window over those
};

// A bursty workload (50 ms of 1 ms kernels, then 50 ms without work) beside a saturating one,
// both asking 0.5: when the bursty one goes quiet, the other's work should run at once. All of
// the GPU's idle time in the window is put down to the quiet periods.
BurstRun RunBurst(Arm arm) {
  RunDir run;
  const double seconds = g_opt.warmup_s + g_opt.window_s + 5;
  Proc steady = StartLoad(run, arm, 0, 500, "kernel", 1.0, seconds);
  Proc bursty = StartLoad(run, arm, 1, 500, "burst", 1.0, seconds);
  auto quiets = [&] {
    const std::string out = ReadFile(bursty.out);
    int n = 0;
    for (size_t at = out.find("burst\n"); at != std::string::npos;
         at = out.find("burst\n", at + 1)) {
      ++n;
    }
    return n;
  };
  SleepS(g_opt.warmup_s);
  const int quiets_before = quiets();
  const uint64_t busy_before = BusyNs();
  const Clock::time_point start = Clock::now();
  SleepS(g_opt.window_s);
  const uint64_t busy_after = BusyNs();
  const double elapsed = SecondsSince(start);
  const int quiets_after = quiets();
  Kill(steady);
  Kill(bursty);
  BurstRun r;
  const double busy_s = static_cast<double>(busy_after - busy_before) / 1e9;
  r.busy = busy_s / elapsed;
  r.quiets = quiets_after - quiets_before;
  r.idle_ms_per_quiet = r.quiets > 0 ? (elapsed - busy_s) * 1000 / r.quiets : NAN;
  return r;
}

std::vector<int> HogLevels() {
  std::vector<int> levels;
  std::stringstream in(g_opt.hogs);
  for (std::string item; std::getline(in, item, ',');) levels.push_back(std::atoi(item.c_str()));
  return levels;
}

// Share error, throughput lost and the hand-over after a burst, with CPU-bound neighbours.
void PressurePart(std::FILE* md) {
  std::ofstream csv(g_opt.out + "/pressure.csv");
  csv << "mix,arm,seed,workload,request,kernel_ms,got,error_pts,busy,min_1s,max_1s\n";
  std::ofstream burst_csv(g_opt.out + "/pressure-burst.csv");
  burst_csv << "hogs_per_core,arm,seed,busy,quiets,idle_ms_per_quiet\n";
  const int mixes[] = {0, 3};  // 0.25/0.75 and 0.2/0.3/0.5
  const bool callers = g_opt.hog_group == "callers";
  std::fprintf(md, "\n### CPU pressure (busy loops per core beside the workloads, %s; %d seeds, "
                   "%.1f s warm-up, %.1f s window)\n\nShare error: percentage points, median (worst) "
                   "over seeds. Lost: 1 - busy(arm) / busy(none), paired by seed, over both "
                   "mixes. Idle per quiet: the GPU's idle time while a bursty workload (50 ms on, "
                   "50 ms off) and a saturating one run, per quiet period, median.\n\n| busy "
                   "loops per core | arm | error 0.25/0.75 | error 0.2/0.3/0.5 | GPU busy | lost "
                   "| idle per quiet (ms) |\n|---:|---|---:|---:|---:|---:|---:|\n",
               callers ? "in the workloads' scheduling group" : "each in a session of its own",
               g_opt.pressure_seeds, g_opt.warmup_s, g_opt.window_s);
  for (int level : HogLevels()) {
    gpufrac::testing::BusyLoops hogs(level, callers
                                                ? gpufrac::testing::BusyLoops::Group::kCallersGroup
                                                : gpufrac::testing::BusyLoops::Group::kOwnSessions);
    std::map<Arm, std::map<int, std::vector<ShareRun>>> shares;  // arm, mix
    std::map<Arm, std::vector<BurstRun>> bursts;
    for (int seed = 0; seed < g_opt.pressure_seeds; ++seed) {
      std::vector<Arm> arms(std::begin(kArms), std::end(kArms));
      std::mt19937 rng(static_cast<unsigned>(seed * 31 + level + 200));
      std::shuffle(arms.begin(), arms.end(), rng);
      for (Arm arm : arms) {
        for (int m : mixes) shares[arm][m].push_back(RunShares(kMixes[m], m, arm, seed, csv));
        bursts[arm].push_back(RunBurst(arm));
        const BurstRun& b = bursts[arm].back();
        char line[160];
        std::snprintf(line, sizeof(line), "%d,%s,%d,%.4f,%d,%.2f\n", level, ArmName(arm), seed,
                      b.busy, b.quiets, b.idle_ms_per_quiet);
        burst_csv << line;
        std::fprintf(stderr, "pressure %d/core %s seed %d: errors %.2f %.2f pts, burst idle %.1f "
                             "ms per quiet\n",
                     level, ArmName(arm), seed, shares[arm][mixes[0]].back().error_pts,
                     shares[arm][mixes[1]].back().error_pts, b.idle_ms_per_quiet);
      }
    }
    for (Arm arm : kArms) {
      std::fprintf(md, "| %d | %s", level, ArmName(arm));
      std::vector<double> busy, lost;
      for (int m : mixes) {
        std::vector<double> e;
        for (size_t s = 0; s < shares[arm][m].size(); ++s) {
          e.push_back(shares[arm][m][s].error_pts);
          busy.push_back(shares[arm][m][s].busy);
          lost.push_back((1 - shares[arm][m][s].busy / shares[Arm::kNone][m][s].busy) * 100);
        }
        std::fprintf(md, " | %.2f (%.2f)", Median(e), Max(e));
      }
      std::vector<double> idle;
      for (const BurstRun& b : bursts[arm]) idle.push_back(b.idle_ms_per_quiet);
      std::fprintf(md, " | %.4f | %.2f%% (%.2f%%) | %.1f |\n", Median(busy), Median(lost),
                   Max(lost), Median(idle));
    }
  }
}

// --- cost per launch -----------------------------------------------------------------------

void CostPart(std::FILE* md) {
  std::ofstream csv(g_opt.out + "/cost.csv");
  csv << "arm,contended,rep,wall_ns_per_launch,cpu_ns_per_launch\n";
  std::map<std::pair<Arm, bool>, std::vector<std::pair<double, double>>> got;
  std::mt19937 rng(17);
  for (int rep = 0; rep < g_opt.cost_reps; ++rep) {
    std::vector<Arm> arms(std::begin(kArms), std::end(kArms));
    std::shuffle(arms.begin(), arms.end(), rng);
    for (Arm arm : arms) {
      for (bool contended : {false, true}) {
        RunDir run;
        Proc other;
        if (contended) {
          other = StartLoad(run, arm, 1, 750, "kernel", 1.0, g_opt.cost_s + 10);
          SleepS(0.3);
        }
        Proc p = StartLoad(run, arm, 0, 250, "cost", 0, g_opt.cost_s);
        const std::string out = Finish(p, g_opt.cost_s + 30);
        Kill(other);
        double wall = NAN, cpu = NAN;
        if (const size_t at = out.find("wall_ns_per_launch="); at != std::string::npos) {
          std::sscanf(out.c_str() + at, "wall_ns_per_launch=%lf cpu_ns_per_launch=%lf", &wall,
                      &cpu);
        }
        got[{arm, contended}].push_back({wall, cpu});
        csv << ArmName(arm) << "," << contended << "," << rep << "," << wall << "," << cpu << "\n";
        std::fprintf(stderr, "cost %s %s rep %d: wall %.1f ns cpu %.1f ns per launch\n",
                     ArmName(arm), contended ? "contended" : "alone", rep, wall, cpu);
      }
    }
  }
  std::fprintf(md,
               "\n### Cost per launch (ns; median of %d runs of %.1f s of 1,000-launch batches; "
               "\"added\" is the arm's median minus no limiter's)\n\n"
               "| situation | clock | none | gpufrac | gpufrac added | hami-like | hami-like added "
               "|\n|---|---|---:|---:|---:|---:|---:|\n",
               g_opt.cost_reps, g_opt.cost_s);
  for (bool contended : {false, true}) {
    for (int clock = 0; clock < 2; ++clock) {
      auto med = [&](Arm arm) {
        std::vector<double> v;
        for (const auto& [wall, cpu] : got[{arm, contended}]) v.push_back(clock ? cpu : wall);
        return Median(v);
      };
      const double none = med(Arm::kNone), gf = med(Arm::kGpufrac), hami = med(Arm::kHami);
      std::fprintf(md, "| %s | %s | %.1f | %.1f | %+.1f | %.1f | %+.1f |\n",
                   contended ? "contended (a 0.75 workload busy beside it)" : "alone",
                   clock ? "thread CPU" : "wall", none, gf, gf - none, hami, hami - none);
    }
  }
}

// --- latency -------------------------------------------------------------------------------

// A latency-sensitive client (`gpu_load latency`: one kernel at a time, synchronising after each)
// beside a throughput workload of saturating kernels, both under one arm.
struct PairSpec {
  int client_milli = 250;
  double client_kernel_ms = 0.2;
  int big_milli = 750;
  double big_kernel_ms = 20.0;  // 0: the client runs alone
  int sized_for_sms = 0;        // StartLoad's
  double client_s = 5.0;
};

struct PairRun {
  std::vector<std::pair<double, double>> samples;  // every kernel: launched at (s), latency (us)
  std::vector<double> latency_us;  // the kernels launched after the client's first 0.5 s
  // Engine time per second of each, and the GPU's busy time per second, from 0.5 s after the
  // client was ready until its last moment seen alive. Under MPS engine time is weighted by the
  // share of the SMs in use (simgpu.md, "Ground truth under MPS"): these are SM-time per second.
  double client_share = 0, big_share = 0, busy = 0;
  double client_kps = 0;   // the client's kernels per second, launched after its first 0.5 s
  size_t mps_clients = 0;  // under MPS: how many of the two processes the daemon lists as clients
};

constexpr double kSettleS = 0.5;  // the client's first half second: turns still settling

PairRun RunPair(Arm arm, const PairSpec& spec) {
  RunDir run;
  Proc big;
  if (spec.big_kernel_ms > 0) {
    big = StartLoad(run, arm, 1, spec.big_milli, "kernel", spec.big_kernel_ms,
                    g_opt.warmup_s + spec.client_s + 10, spec.sized_for_sms);
    SleepS(g_opt.warmup_s);
  }
  Proc client = StartLoad(run, arm, 0, spec.client_milli, "latency", spec.client_kernel_ms,
                          spec.client_s, spec.sized_for_sms);
  const Clock::time_point ready = Clock::now();
  PairRun r;
  if (arm == Arm::kMps) {
    for (pid_t pid : run.mps()->Clients()) r.mps_clients += pid == client.pid || pid == big.pid;
  }
  SleepS(kSettleS - SecondsSince(ready));
  const uint64_t client0 = EngineNs(client.pid), big0 = big.pid > 0 ? EngineNs(big.pid) : 0;
  const uint64_t busy0 = BusyNs();
  const Clock::time_point t0 = Clock::now();
  // The client's engine time is gone with its process: follow it until then.
  uint64_t client_ns = client0, big_ns = big0, busy_ns = busy0;
  double seen = 0;
  for (int status; waitpid(client.pid, &status, WNOHANG) != client.pid;) {
    unsigned long long ns = 0;
    if (simgpuGetProcessEngineTime(0, static_cast<unsigned>(client.pid), &ns) == 0 && ns > 0) {
      client_ns = ns;
      seen = SecondsSince(t0);
      big_ns = big.pid > 0 ? EngineNs(big.pid) : 0;
      busy_ns = BusyNs();
    }
    if (SecondsSince(t0) > spec.client_s + 30) {
      Kill(client);
      break;
    }
    SleepS(0.01);
  }
  client.pid = -1;
  Kill(big);
  r.client_share = static_cast<double>(client_ns - client0) / 1e9 / seen;
  r.big_share = static_cast<double>(big_ns - big0) / 1e9 / seen;
  r.busy = static_cast<double>(busy_ns - busy0) / 1e9 / seen;
  std::istringstream lines(ReadFile(client.out));
  double at, us;
  for (std::string line; std::getline(lines, line);) {
    if (std::sscanf(line.c_str(), "lat %lf %lf", &at, &us) != 2) continue;
    r.samples.push_back({at, us});
    if (at >= kSettleS) r.latency_us.push_back(us);
  }
  r.client_kps = static_cast<double>(r.latency_us.size()) / (spec.client_s - kSettleS);
  return r;
}

void LatencyPart(std::FILE* md) {
  std::ofstream csv(g_opt.out + "/latency.csv");
  csv << "arm,run,at_s,latency_us\n";
  std::map<Arm, std::vector<double>> lat;
  std::map<Arm, std::vector<double>> big_share, client_share, busy;
  std::mt19937 rng(29);
  PairSpec spec;
  spec.client_s = g_opt.latency_s;
  for (int run_index = 0; run_index < g_opt.latency_runs; ++run_index) {
    std::vector<Arm> arms(std::begin(kArms), std::end(kArms));
    std::shuffle(arms.begin(), arms.end(), rng);
    for (Arm arm : arms) {
      const PairRun r = RunPair(arm, spec);
      big_share[arm].push_back(r.big_share);
      client_share[arm].push_back(r.client_share);
      busy[arm].push_back(r.busy);
      for (const auto& [at, us] : r.samples) {
        csv << ArmName(arm) << "," << run_index << "," << at << "," << us << "\n";
      }
      lat[arm].insert(lat[arm].end(), r.latency_us.begin(), r.latency_us.end());
      std::fprintf(stderr, "latency %s run %d: %zu kernels, p50 %.0f us\n", ArmName(arm), run_index,
                   r.latency_us.size(), Median(r.latency_us));
    }
  }
  std::fprintf(md,
               "\n### Latency of a 0.25 workload's 0.2 ms kernels (launch, then synchronise) "
               "behind a 0.75 workload's 20 ms kernels (%d runs of %.1f s after the 0.75 "
               "workload's %.1f s warm-up, the client's first 0.5 s dropped)\n\n| arm | kernels | p50 | p90 | p99 | max | mean | shares meanwhile "
               "(client / 0.75) | GPU busy |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               g_opt.latency_runs, g_opt.latency_s, g_opt.warmup_s);
  for (Arm arm : kArms) {
    const std::vector<double>& v = lat[arm];
    double mean = 0;
    for (double x : v) mean += x;
    mean = v.empty() ? NAN : mean / static_cast<double>(v.size());
    std::fprintf(md,
                 "| %s | %zu | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.3f / %.3f | "
                 "%.3f |\n",
                 ArmName(arm), v.size(), Quantile(v, 0.5) / 1e3, Quantile(v, 0.9) / 1e3,
                 Quantile(v, 0.99) / 1e3, Max(v) / 1e3, mean / 1e3, Median(client_share[arm]),
                 Median(big_share[arm]),
                 Median(busy[arm]));
  }
}

// --- MPS (issue 18) -------------------------------------------------------------------------

// A latency-sensitive client and a throughput workload under no sharing policy, gpufrac's time
// shares and MPS. Every kernel is sized for the whole GPU (kH100Sms), so a kernel is the same
// work in every arm: under MPS it takes 1/share as long on the client's SMs
// (simgpu/core/sim_time.h).
constexpr int kH100Sms = 132;  // the SMs of main's simulated 1xH100-80GB

struct MpsMix {
  int client_milli;
  int big_milli;
  double big_kernel_ms;  // 0: the client alone
};
const MpsMix kMpsMixes[] = {{250, 750, 0}, {250, 750, 2}, {250, 750, 20},
                            {500, 500, 0}, {500, 500, 2}, {500, 500, 20}};

// The fraction of `latency_us` above `us`.
double FractionAbove(const std::vector<double>& latency_us, double us) {
  if (latency_us.empty()) return NAN;
  size_t n = 0;
  for (double x : latency_us) n += x > us;
  return static_cast<double>(n) / static_cast<double>(latency_us.size());
}

std::string MpsMixName(const MpsMix& mix) {
  char name[96];
  if (mix.big_kernel_ms == 0) {
    std::snprintf(name, sizeof(name), "%.2f client alone", mix.client_milli / 1000.0);
  } else {
    std::snprintf(name, sizeof(name), "%.2f / %.2f, %g ms", mix.client_milli / 1000.0,
                  mix.big_milli / 1000.0, mix.big_kernel_ms);
  }
  return name;
}

// The runs of one cell (a mix under an arm), by the mix's index in kMpsMixes.
using MpsRuns = std::map<std::pair<int, Arm>, std::vector<PairRun>>;

// One run of `mix` under `arm`: a row of mps.csv, its kernels' latencies in mps-latency.csv, and
// a line on stderr. Exits if the MPS arm's processes were not all MPS clients.
PairRun RunMpsCell(const MpsMix& mix, Arm arm, int run_index, std::ofstream& csv,
                   std::ofstream& kernels) {
  PairSpec spec;
  spec.client_milli = mix.client_milli;
  spec.big_milli = mix.big_milli;
  spec.big_kernel_ms = mix.big_kernel_ms;
  spec.sized_for_sms = kH100Sms;
  spec.client_s = g_opt.mps_s;
  PairRun r = RunPair(arm, spec);
  const size_t processes = mix.big_kernel_ms > 0 ? 2 : 1;
  if (arm == Arm::kMps && r.mps_clients != processes) {
    std::fprintf(stderr, "compute_share_bench: %zu of %zu processes were MPS clients\n",
                 r.mps_clients, processes);
    std::exit(1);
  }
  const double big_kps = mix.big_kernel_ms > 0 ? r.big_share * 1e3 / mix.big_kernel_ms : 0;
  char line[400];
  std::snprintf(line, sizeof(line),
                "%.2f,%.2f,%g,%s,%d,%zu,%.1f,%.1f,%.1f,%.5f,%.1f,%.2f,%.4f,%.4f,%.4f\n",
                mix.client_milli / 1000.0, mix.big_milli / 1000.0, mix.big_kernel_ms,
                ArmName(arm), run_index, r.latency_us.size(), Quantile(r.latency_us, 0.5),
                Quantile(r.latency_us, 0.99), Max(r.latency_us), FractionAbove(r.latency_us, 1e4),
                r.client_kps, big_kps, r.client_share, r.big_share, r.busy);
  csv << line;
  csv.flush();
  for (const auto& [at, us] : r.samples) {
    kernels << mix.client_milli / 1000.0 << "," << mix.big_kernel_ms << "," << ArmName(arm) << ","
            << run_index << "," << at << "," << us << "\n";
  }
  std::fprintf(stderr, "mps %s %s run %d: p50 %.0f us p99 %.0f us, SM-time %.3f + %.3f\n",
               MpsMixName(mix).c_str(), ArmName(arm), run_index, Quantile(r.latency_us, 0.5),
               Quantile(r.latency_us, 0.99), r.client_share, r.big_share);
  r.samples.clear();
  return r;
}

// The markdown table of the MPS part: one row per mix and arm, over that cell's runs.
void WriteMpsTable(std::FILE* md, MpsRuns& runs) {
  std::fprintf(
      md,
      "\n### A latency-sensitive client beside a throughput workload: time-slicing, "
      "gpufrac's time shares, MPS (%d runs per cell; the throughput workload warmed up "
      "%.1f s, the client ran %.1f s and its first %.1f s is dropped; p50 and p99: "
      "median over the runs of each run's value; max: over all runs; rates: median)\n\n"
      "| requests (client / throughput), throughput kernel | arm | client p50 | client "
      "p99 | client max | client kernels over 10 ms | client kernels/s | throughput kernels/s | "
      "SM-time/s client / throughput | useful SM-time/s |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      g_opt.mps_runs, g_opt.warmup_s, g_opt.mps_s, kSettleS);
  for (int m = 0; m < static_cast<int>(std::size(kMpsMixes)); ++m) {
    const MpsMix& mix = kMpsMixes[m];
    for (Arm arm : kMpsArms) {
      std::vector<double> p50, p99, maxima, over_10ms, client_kps, big_kps, client_share, big_share,
          total;
      for (const PairRun& r : runs[{m, arm}]) {
        p50.push_back(Quantile(r.latency_us, 0.5));
        p99.push_back(Quantile(r.latency_us, 0.99));
        maxima.push_back(Max(r.latency_us));
        over_10ms.push_back(FractionAbove(r.latency_us, 1e4) * 100);
        client_kps.push_back(r.client_kps);
        big_kps.push_back(mix.big_kernel_ms > 0 ? r.big_share * 1e3 / mix.big_kernel_ms : 0);
        client_share.push_back(r.client_share);
        big_share.push_back(r.big_share);
        total.push_back(r.client_share + r.big_share);
      }
      std::fprintf(md,
                   "| %s | %s | %.3f ms | %.3f ms | %.2f ms | %.2f%% | %.0f | %.1f | %.3f / %.3f | "
                   "%.3f |\n",
                   MpsMixName(mix).c_str(), ArmName(arm), Median(p50) / 1e3, Median(p99) / 1e3,
                   Max(maxima) / 1e3, Median(over_10ms), Median(client_kps), Median(big_kps),
                   Median(client_share), Median(big_share), Median(total));
    }
  }
}

void MpsPart(std::FILE* md) {
  std::ofstream csv(g_opt.out + "/mps.csv");
  csv << "client_request,throughput_request,throughput_kernel_ms,arm,run,client_kernels,p50_us,"
         "p99_us,max_us,over_10ms,client_kernels_per_s,throughput_kernels_per_s,client_sm_s_per_s,"
         "throughput_sm_s_per_s,busy\n";
  std::ofstream kernels(g_opt.out + "/mps-latency.csv");
  kernels << "client_request,throughput_kernel_ms,arm,run,at_s,latency_us\n";
  MpsRuns runs;
  std::mt19937 rng(43);
  for (int run_index = 0; run_index < g_opt.mps_runs; ++run_index) {
    for (int m = 0; m < static_cast<int>(std::size(kMpsMixes)); ++m) {
      std::vector<Arm> arms(std::begin(kMpsArms), std::end(kMpsArms));
      std::shuffle(arms.begin(), arms.end(), rng);
      for (Arm arm : arms) {
        runs[{m, arm}].push_back(RunMpsCell(kMpsMixes[m], arm, run_index, csv, kernels));
      }
    }
  }
  WriteMpsTable(md, runs);
}

std::string LoadAverage() {
  std::string s = ReadFile("/proc/loadavg");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

void Usage() {
  std::fprintf(
      stderr,
      "usage: compute_share_bench [--seeds N] [--warmup S] [--window S] [--cost-reps N] "
      "[--cost-seconds S] [--latency-runs N] [--latency-seconds S] [--length-runs N] "
      "[--mps-runs N] [--mps-seconds S] [--hogs N,N,...] [--hog-group own|callers] "
      "[--pressure-seeds N] "
      "[--parts shares,lengths,cost,latency,mps,pressure] [--hami-step linear] [--out DIR]\n"
      "(--parts defaults to shares,lengths,cost,latency; --hogs: busy loops per core, one "
      "level after another, for the part pressure; --hog-group: each loop in a session of its own, "
      "or all in the bench's)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Usage();
    const char* v = argv[++i];
    if (a == "--seeds") g_opt.seeds = std::atoi(v);
    else if (a == "--warmup") g_opt.warmup_s = std::atof(v);
    else if (a == "--window") g_opt.window_s = std::atof(v);
    else if (a == "--cost-reps") g_opt.cost_reps = std::atoi(v);
    else if (a == "--cost-seconds") g_opt.cost_s = std::atof(v);
    else if (a == "--latency-runs") g_opt.latency_runs = std::atoi(v);
    else if (a == "--length-runs") g_opt.length_runs = std::atoi(v);
    else if (a == "--latency-seconds") g_opt.latency_s = std::atof(v);
    else if (a == "--mps-runs") g_opt.mps_runs = std::atoi(v);
    else if (a == "--mps-seconds") g_opt.mps_s = std::atof(v);
    else if (a == "--parts") g_opt.parts = v;
    else if (a == "--hami-step") g_opt.hami_step = v;
    else if (a == "--hogs") g_opt.hogs = v;
    else if (a == "--hog-group") g_opt.hog_group = v;
    else if (a == "--pressure-seeds") g_opt.pressure_seeds = std::atoi(v);
    else if (a == "--out") g_opt.out = v;
    else Usage();
  }
  if (g_opt.hog_group != "own" && g_opt.hog_group != "callers") Usage();
  signal(SIGPIPE, SIG_IGN);
  // A private simulated machine (one H100-80GB) for the whole run; every workload joins it.
  const std::string name_space = "compute-bench-" + std::to_string(getpid());
  setenv("SIMGPU_NAMESPACE", name_space.c_str(), 1);
  setenv("SIMGPU_CONFIG", "1xH100-80GB", 1);
  setenv("LD_LIBRARY_PATH", GPUFRAC_SIMGPU_DIR, 1);
  unsetenv("LD_PRELOAD");
  unsetenv("GPUFRAC_LIMIT_FILE");
  {
    FILE* probe = popen(GPUFRAC_BUILD_DIR "/bin/cuda_probe uuid", "r");
    char line[256];
    while (probe != nullptr && std::fgets(line, sizeof(line), probe) != nullptr) {
      if (std::strncmp(line, "uuid=", 5) == 0) g_uuid.assign(line + 5, std::strcspn(line + 5, "\n"));
    }
    if (probe != nullptr) pclose(probe);
  }
  if (g_uuid.empty()) {
    std::fprintf(stderr, "compute_share_bench: cuda_probe gave no UUID\n");
    return 1;
  }
  fs::create_directories(g_opt.out);
  const std::string summary_path = g_opt.out + "/summary.md";
  std::FILE* md = std::fopen(summary_path.c_str(), "w");
  const std::string load_before = LoadAverage();
  const Clock::time_point start = Clock::now();
  std::fprintf(md, "compute_share_bench: simulated 1xH100-80GB, SIMGPU_TIMESLICE_US=%s, gpufrac "
                   "turn %llu ms, hami-like step %s; /proc/loadavg before: %s\n",
               getenv("SIMGPU_TIMESLICE_US") ? getenv("SIMGPU_TIMESLICE_US") : "2000 (default)",
               static_cast<unsigned long long>(gpufrac::limiter::kDefaultTurnNs / 1'000'000),
               g_opt.hami_step.empty() ? "published (quadratic)" : g_opt.hami_step.c_str(),
               load_before.c_str());
  if (g_opt.parts.find("shares") != std::string::npos) SharesPart(md);
  if (g_opt.parts.find("lengths") != std::string::npos) LengthsPart(md);
  if (g_opt.parts.find("cost") != std::string::npos) CostPart(md);
  if (g_opt.parts.find("latency") != std::string::npos) LatencyPart(md);
  if (g_opt.parts.find("mps") != std::string::npos) MpsPart(md);
  if (g_opt.parts.find("pressure") != std::string::npos) PressurePart(md);
  std::fprintf(md, "\nTook %.0f s; /proc/loadavg after: %s\n", SecondsSince(start),
               LoadAverage().c_str());
  std::fclose(md);
  const std::string shm = "/simgpu." + std::to_string(getuid()) + "." + name_space;
  shm_unlink(shm.c_str());
  std::fputs(ReadFile(summary_path).c_str(), stdout);
  return 0;
}
