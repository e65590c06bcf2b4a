// `gpufrac sim openb`: reads the trace, runs every (policy, seed) pair, in parallel when asked,
// and prints a table, JSON lines, a CSV of the curves and/or a plot.
#include "cli/sim_command.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/posix.h"
#include "common/text.h"
#include "nlohmann/json.hpp"
#include "placement/policies.h"
#include "sim/openb_protocol.h"
#include "sim/openb_trace.h"
#include "sim/plot.h"
#include "sim/timed_replay.h"

namespace gpufrac::cli {
namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "gpufrac sim: %s\n", message.c_str());
  return code;
}

StatusOr<std::vector<uint64_t>> ParseSeeds(const SimOptions& o) {
  if (o.seeds.empty()) return std::vector<uint64_t>{o.seed};
  std::string_view s = o.seeds;
  size_t dash = s.find('-');
  uint64_t a = 0, b = 0;
  auto parse = [](std::string_view t, uint64_t& v) {
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return !t.empty() && ec == std::errc() && end == t.data() + t.size();
  };
  // One number is one seed; A-B is every seed from A to B.
  bool ok =
      dash == std::string_view::npos
          ? parse(s, a) && (b = a, true)
          : parse(s.substr(0, dash), a) && parse(s.substr(dash + 1), b) && a <= b && b - a < 100000;
  if (!ok) {
    return InvalidArgumentError("--seeds is \"" + Printable(o.seeds) +
                                "\"; give one seed (42) or a range A-B of whole numbers with "
                                "A <= B and at most 100000 seeds (42-51)");
  }
  std::vector<uint64_t> seeds;
  for (uint64_t i = 0; i <= b - a; ++i) seeds.push_back(a + i);
  return seeds;
}

StatusOr<std::vector<std::string>> ParsePolicies(const SimOptions& o) {
  std::vector<std::string> names;
  for (const std::string& item : o.policies) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = std::min(item.find(',', start), item.size());
      names.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  if (names.empty()) names.emplace_back(placement::kDefaultPolicy);
  for (const std::string& n : names) {
    if (placement::FindPolicy(n) == nullptr) {
      return InvalidArgumentError("unknown policy \"" + n + "\"; choose one of " +
                                  placement::PolicyNameList());
    }
  }
  return names;
}

// A progress bar on stderr, drawn only when stderr is a terminal and the work lasts over a second.
class ProgressBar {
 public:
  explicit ProgressBar(uint64_t total) : total_(total), start_(Clock::now()) {
    if (isatty(STDERR_FILENO)) thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressBar() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Add(uint64_t n) { done_.fetch_add(n, std::memory_order_relaxed); }
  // A run's real pod count replaces the estimate it was counted with.
  void Correct(uint64_t estimate, uint64_t actual) {
    total_.fetch_add(actual - estimate, std::memory_order_relaxed);  // Wraps correctly.
  }

 private:
  using Clock = std::chrono::steady_clock;
  void Loop() {
    bool drawn = false;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
      if (elapsed < 1) continue;
      uint64_t total = std::max<uint64_t>(total_.load(std::memory_order_relaxed), 1);
      uint64_t done = std::min(done_.load(std::memory_order_relaxed), total);
      int width = 30, filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\r[%s%s] %3d%% %llu/%llu pods %.0fs", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), static_cast<int>(100 * done / total),
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                   elapsed);
      drawn = true;
    }
    if (drawn) std::fprintf(stderr, "\r%*s\r", 72, "");
  }

  std::atomic<uint64_t> total_;
  Clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

struct Job {
  std::string policy;
  uint64_t seed;
};

std::string Percent(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", v);
  return buf;
}

// The fields every run's JSON starts with.
template <typename R>
nlohmann::json RunJson(const R& r, const SimOptions& o) {
  nlohmann::json j;
  j["policy"] = r.policy;
  j["seed"] = r.seed;
  j["pods_file"] = o.pods;
  j["pods_total"] = r.pods_total;
  j["elapsed_s"] = r.elapsed_s;
  return j;
}

nlohmann::json ToJson(const sim::OpenbRunResult& r, const SimOptions& o) {
  nlohmann::json j = RunJson(r, o);
  j["unallocated_gpu_pct_at_100"] = std::isnan(r.unallocated_gpu_pct_at_100)
                                        ? nlohmann::json()
                                        : nlohmann::json(r.unallocated_gpu_pct_at_100);
  j["allocated_pct_final"] = r.allocated_pct_final;
  j["arrived_pct_final"] = r.arrived_pct_final;
  j["pods_failed"] = r.pods_failed;
  j["gpu_pods_failed"] = r.gpu_pods_failed;
  return j;
}

nlohmann::json ToJson(const sim::TimedRunResult& r, const SimOptions& o) {
  nlohmann::json j = RunJson(r, o);
  j["mode"] = "timed";
  j["speedup"] = o.speedup;
  j["pods_placed"] = r.pods_placed;
  j["pods_waited"] = r.pods_waited;
  j["pods_never_placed"] = r.pods_never_placed;
  j["mean_wait_s"] = r.mean_wait_s;
  j["p99_wait_s"] = r.p99_wait_s;
  j["max_queue"] = r.max_queue;
  j["time_avg_allocated_pct"] = std::isnan(r.time_avg_allocated_pct)
                                    ? nlohmann::json()
                                    : nlohmann::json(r.time_avg_allocated_pct);
  return j;
}

void PrintTimedTable(const std::vector<sim::TimedRunResult>& results) {
  std::printf("%-15s %6s %8s %8s %8s %12s %12s %10s %9s\n", "POLICY", "SEED", "PODS", "WAITED",
              "NEVER", "MEAN WAIT", "P99 WAIT", "ALLOC(AVG)", "TIME");
  for (const sim::TimedRunResult& r : results) {
    std::printf("%-15s %6llu %8llu %8llu %8llu %11.0fs %11.0fs %10s %8.2fs\n", r.policy.c_str(),
                static_cast<unsigned long long>(r.seed),
                static_cast<unsigned long long>(r.pods_total),
                static_cast<unsigned long long>(r.pods_waited),
                static_cast<unsigned long long>(r.pods_never_placed), r.mean_wait_s, r.p99_wait_s,
                Percent(r.time_avg_allocated_pct).c_str(), r.elapsed_s);
  }
}

Status WriteCurves(const std::string& path, const std::vector<sim::OpenbRunResult>& results) {
  std::ofstream out(path);
  if (!out) return InvalidArgumentError("--curve: cannot write " + path);
  out << "policy,seed,arrived_pct,allocated_pct,unallocated_pct\n";
  for (const sim::OpenbRunResult& r : results) {
    for (int k = 0; k <= r.curve.max_percent(); ++k) {
      std::optional<double> a = r.curve.AllocatedAt(k);
      if (!a) continue;
      char line[128];
      std::snprintf(line, sizeof(line), "%s,%llu,%d,%.4f,%.4f\n", r.policy.c_str(),
                    static_cast<unsigned long long>(r.seed), k, *a, 100 - *a);
      out << line;
    }
  }
  out.close();
  if (!out) return InternalError("--curve: writing " + path + " failed");
  return OkStatus();
}

// One line per policy: unallocated % against arrived %, averaged over the policy's seeds (at
// the percents every seed reached).
Status WritePlot(const std::string& path, const std::vector<sim::OpenbRunResult>& results,
                 const SimOptions& o) {
  std::vector<sim::PlotSeries> series;
  std::map<std::string, std::vector<const sim::OpenbRunResult*>> by_policy;
  for (const sim::OpenbRunResult& r : results) {
    if (by_policy[r.policy].empty()) series.push_back({r.policy, {}});
    by_policy[r.policy].push_back(&r);
  }
  for (sim::PlotSeries& s : series) {
    const auto& runs = by_policy[s.name];
    for (int k = 0; k <= runs.front()->curve.max_percent(); ++k) {
      double sum = 0;
      bool all = true;
      for (const sim::OpenbRunResult* r : runs) {
        std::optional<double> a = r->curve.AllocatedAt(k);
        all = all && a.has_value();
        if (a) sum += 100 - *a;
      }
      if (all) s.points.push_back({static_cast<double>(k), sum / runs.size()});
    }
  }
  std::string trace =
      o.pods.substr(o.pods.rfind('/') == std::string::npos ? 0 : o.pods.rfind('/') + 1);
  std::string seeds = o.seeds.empty() ? "seed " + std::to_string(o.seed) : "seeds " + o.seeds;
  return sim::WritePlotPng(
      path, series,
      {"Unallocated GPUs, " + trace + " (" + seeds + ")", "arrived GPU demand (% of capacity)",
       "unallocated GPUs (% of capacity)"});
}

void PrintTable(const std::vector<sim::OpenbRunResult>& results) {
  std::printf("%-15s %6s %18s %16s %8s %8s %9s\n", "POLICY", "SEED", "UNALLOCATED@100%",
              "ALLOCATED(END)", "PODS", "FAILED", "TIME");
  std::map<std::string, std::vector<const sim::OpenbRunResult*>> by_policy;
  std::vector<std::string> order;
  for (const sim::OpenbRunResult& r : results) {
    if (by_policy[r.policy].empty()) order.push_back(r.policy);
    by_policy[r.policy].push_back(&r);
    std::printf(
        "%-15s %6llu %18s %16s %8llu %8llu %8.2fs\n", r.policy.c_str(),
        static_cast<unsigned long long>(r.seed), Percent(r.unallocated_gpu_pct_at_100).c_str(),
        Percent(r.allocated_pct_final).c_str(), static_cast<unsigned long long>(r.pods_total),
        static_cast<unsigned long long>(r.pods_failed), r.elapsed_s);
  }
  if (results.size() == order.size()) return;
  std::printf("\nmean over seeds:\n");
  for (const std::string& p : order) {
    double sum = 0, time = 0;
    for (const sim::OpenbRunResult* r : by_policy[p]) {
      sum += r->unallocated_gpu_pct_at_100;
      time += r->elapsed_s;
    }
    size_t n = by_policy[p].size();
    std::printf("%-15s %6zu %18s %35s %8.2fs\n", p.c_str(), n, Percent(sum / n).c_str(), "",
                time / n);
  }
}

// Runs run(job, progress) -> StatusOr<T> for every job on `jobs_wanted` threads (0: one per
// core); the values in job order, or the first error.
template <typename Run>
auto RunParallel(const std::vector<Job>& jobs, int jobs_wanted, Run run, ProgressBar& bar,
                 uint64_t estimate_per_job)
    -> StatusOr<std::vector<std::decay_t<decltype(*run(jobs[0], sim::ProgressFn()))>>> {
  using Result = decltype(run(jobs[0], sim::ProgressFn()));
  std::vector<std::optional<Result>> slots(jobs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      uint64_t reported = 0;
      bool corrected = false;
      slots[i] = run(jobs[i], [&](uint64_t done, uint64_t total) {
        if (!corrected) bar.Correct(estimate_per_job, total);
        corrected = true;
        bar.Add(done - reported);
        reported = done;
      });
    }
  };
  unsigned threads = jobs_wanted > 0 ? static_cast<unsigned>(jobs_wanted)
                                     : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(jobs.size()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  std::vector<std::decay_t<decltype(**slots[0])>> values;
  for (auto& slot : slots) {
    if (!slot->ok()) return slot->status();
    values.push_back(std::move(**slot));
  }
  return values;
}

// JSON lines or the table for people.
template <typename R>
void Print(const std::vector<R>& runs, const SimOptions& o, void (*table)(const std::vector<R>&)) {
  if (!o.json) return table(runs);
  for (const R& r : runs) std::printf("%s\n", ToJson(r, o).dump().c_str());
}

}  // namespace

CLI::App* AddSimCommand(CLI::App& app, SimOptions& o) {
  CLI::App* sim = app.add_subcommand("sim", "Replay a cluster trace against placement policies");
  sim->require_subcommand(1);
  CLI::App* openb = sim->add_subcommand(
      "openb", "Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023) under the FGD protocol");
  openb->add_option("--nodes", o.nodes, "Node list CSV (openb_node_list_gpu_node.csv)")->required();
  openb->add_option("--pods", o.pods, "Pod list CSV (openb_pod_list_*.csv)")->required();
  openb->add_option("--policy", o.policies,
                    "Policy, or several separated by commas (" + placement::PolicyNameList() +
                        "; default gpufrac)");
  openb->add_option("--seed", o.seed, "Random seed of the run (default 42)");
  openb->add_option("--seeds", o.seeds, "A seed or a range of seeds, e.g. 42-51: one run per seed");
  openb
      ->add_option("--load", o.load,
                   "Resample the trace up to this multiple of GPU capacity (default 1.3)")
      ->check(CLI::Range(0.0, 100.0));
  openb->add_flag("--json", o.json, "One JSON object per run on stdout");
  openb->add_option("--curve", o.curve, "Write the allocation curves to this CSV file");
  openb->add_option("--plot", o.plot, "Draw unallocated % against arrived % into this PNG");
  openb->add_flag("--timed", o.timed,
                  "Replay creation and deletion times: pods depart, failed pods queue and retry");
  openb
      ->add_option("--speedup", o.speedup,
                   "With --timed: divide arrival times by X, keeping runtimes (default 1)")
      ->check(CLI::Range(1e-6, 1e9));
  openb->add_option("--jobs", o.jobs, "Runs in parallel (default: one per core)")
      ->check(CLI::Range(0, 1024));
  return sim;
}

int RunSim(const SimOptions& o) {
  StatusOr<std::vector<uint64_t>> seeds = ParseSeeds(o);
  if (!seeds.ok()) return Fail(kExitBadInput, seeds.status().message());
  StatusOr<std::vector<std::string>> policies = ParsePolicies(o);
  if (!policies.ok()) return Fail(kExitBadInput, policies.status().message());
  if (o.timed && (!o.curve.empty() || !o.plot.empty())) {
    return Fail(kExitBadInput,
                "--curve and --plot draw the untimed protocol; drop them or --timed");
  }
  if (!std::isfinite(o.load) || !std::isfinite(o.speedup)) {
    return Fail(kExitBadInput, "--load and --speedup must be numbers");
  }
  // Output files are checked before hours of runs, not after.
  for (const std::string* path : {&o.curve, &o.plot}) {
    if (path->empty()) continue;
    if (std::FILE* f = std::fopen(path->c_str(), "w")) {
      std::fclose(f);
    } else {
      return Fail(kExitBadInput, ErrnoStatus("cannot write " + *path, errno).message());
    }
  }
  StatusOr<sim::NodeList> nodes = sim::ReadOpenbNodes(o.nodes);
  if (!nodes.ok()) return Fail(kExitBadInput, nodes.status().message());
  if (std::none_of(nodes->nodes.begin(), nodes->nodes.end(),
                   [](const placement::NodeSpec& n) { return n.gpu_count > 0; })) {
    return Fail(kExitBadInput, o.nodes + ": no node has GPUs");
  }
  StatusOr<sim::PodList> pods = sim::ReadOpenbPods(o.pods, nodes->models);
  if (!pods.ok()) return Fail(kExitBadInput, pods.status().message());
  if (o.timed && !pods->has_times) {
    return Fail(kExitBadInput, o.pods + ": --timed needs creation_time and deletion_time columns");
  }

  std::vector<Job> jobs;
  for (const std::string& p : *policies) {
    for (uint64_t s : *seeds) jobs.push_back({p, s});
  }
  uint64_t per_job = static_cast<uint64_t>((o.timed ? 1.0 : std::max(1.0, o.load)) *
                                           static_cast<double>(pods->pods.size()));
  auto bar = std::make_unique<ProgressBar>(per_job * jobs.size());
  // A run's errors are about its input (kInvalidArgument) unless something broke.
  auto fail = [](const Status& s) {
    return Fail(s.code() == StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure,
                s.message());
  };
  if (o.timed) {
    auto done = RunParallel(
        jobs, o.jobs,
        [&](const Job& job, const sim::ProgressFn& progress) {
          return sim::RunTimed(*nodes, *pods, job.policy, job.seed, o.speedup, progress);
        },
        *bar, per_job);
    bar.reset();  // Cleared before anything is printed.
    if (!done.ok()) return fail(done.status());
    Print(*done, o, PrintTimedTable);
    return 0;
  }
  auto done = RunParallel(
      jobs, o.jobs,
      [&](const Job& job, const sim::ProgressFn& progress) {
        return sim::RunOpenb(*nodes, *pods, {job.policy, job.seed, o.load}, progress);
      },
      *bar, per_job);
  bar.reset();
  if (!done.ok()) return fail(done.status());
  Print(*done, o, PrintTable);
  if (!o.curve.empty()) {
    Status s = WriteCurves(o.curve, *done);
    if (!s.ok()) return Fail(kExitFailure, s.message());
  }
  if (!o.plot.empty()) {
    Status s = WritePlot(o.plot, *done, o);
    if (!s.ok()) return Fail(kExitFailure, s.message());
  }
  return 0;
}

}  // namespace gpufrac::cli
