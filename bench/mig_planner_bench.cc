// The MIG planner benchmark of issue 5 (not a test): random streams of MIG requests arriving at
// and leaving a simulated 8 x H100-80GB node, served by gpufrac's placement rule (with and
// without the recent demand), the driver's lowest-start rule, an oracle that repacks idle
// instances away and a bound that repacks busy ones too; arrival-only sequences that one GPU can
// hold whole, and how many of them each rule serves whole (issue 19); then the planner's speed.
// Run bench/run_mig_bench.sh, which writes docs/mig-planner-benchmark.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "common/random.h"
#include "mig/demand.h"
#include "mig/planner.h"

namespace gpufrac::mig {
namespace {

constexpr int kGpus = 8;

const gpu::MigModel& H100() {
  static const gpu::MigModel* model = [] {
    const gpu::MigModel* m = gpu::FindMigModel("H100-80GB");
    if (m == nullptr) {
      std::fprintf(stderr, "the MIG catalogue has no H100-80GB\n");
      std::exit(2);
    }
    return m;
  }();
  return *model;
}

// The request mix, weighted towards small instances as inference and notebooks are.
struct MixEntry {
  const char* profile;
  double weight;
};
constexpr MixEntry kMix[] = {
    {"1g.10gb", 0.30}, {"1g.20gb", 0.20}, {"2g.20gb", 0.20},
    {"3g.40gb", 0.15}, {"4g.40gb", 0.10}, {"7g.80gb", 0.05},
};
constexpr int kMixSize = sizeof(kMix) / sizeof(kMix[0]);

int ProfileIndex(const char* name) {
  const gpu::MigProfile* p = gpu::FindMigProfile(H100(), name);
  if (p == nullptr) {
    std::fprintf(stderr, "H100-80GB has no profile %s\n", name);
    std::exit(2);
  }
  return static_cast<int>(p - H100().profiles);
}

double MeanComputeSlices() {
  double sum = 0;
  for (const MixEntry& e : kMix)
    sum += e.weight * H100().profiles[ProfileIndex(e.profile)].compute_slices;
  return sum;
}

GpuRequest ProfileRequest(std::string name) {
  GpuRequest request;
  request.kind = GpuRequest::Kind::kMigProfile;
  request.mig_profile = std::move(name);
  return request;
}

// One request of a stream: when it arrives, which profile (index into kMix), how long it runs.
struct Arrival {
  double time;
  int mix;
  double lifetime;
};

double Exponential(Random& rng, double mean) { return -mean * std::log1p(-rng.UniformDouble()); }

// An index into `weights` (which sum to 1) drawn with those probabilities.
int Draw(Random& rng, std::span<const double> weights) {
  double u = rng.UniformDouble(), acc = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    acc += weights[k];
    if (u < acc) return static_cast<int>(k);
  }
  return static_cast<int>(weights.size()) - 1;
}

std::vector<double> MixWeights() {
  std::vector<double> w;
  for (const MixEntry& e : kMix) w.push_back(e.weight);
  return w;
}

// Poisson arrivals and exponential lifetimes (mean 1) whose offered load is `load` of the node's
// compute slices: rate x mean slices x mean lifetime = load x 56.
std::vector<Arrival> Stream(uint64_t seed, double load, int count) {
  Random rng(seed);
  double rate = load * kGpus * H100().compute_slices / MeanComputeSlices();
  const std::vector<double> weights = MixWeights();
  std::vector<Arrival> stream;
  stream.reserve(count);
  double t = 0;
  for (int i = 0; i < count; ++i) {
    t += Exponential(rng, 1.0 / rate);
    int mix = Draw(rng, weights);
    stream.push_back({t, mix, Exponential(rng, 1.0)});
  }
  return stream;
}

// A serving strategy: Arrive returns whether the job got an instance at once; Depart is called
// only for jobs that did.
class Node {
 public:
  virtual ~Node() = default;
  virtual bool Arrive(int job, int profile) = 0;
  virtual void Depart(int job) = 0;
};

// The planner with one of its rules, applying its plans the way the node service does: a
// finished job's instance stays, idle, until it is reused or destroyed for a later request.
class PlannerNode : public Node {
 public:
  // With `repack_idle`, an instance is destroyed as soon as its job ends: the idle-repacking
  // oracle of the issue, for which idle instances are never in the way. With `demand`, the
  // planner is told how often each profile was requested recently, as the node service can
  // count it: every arrival so far (served or not, this one included), older ones decayed with
  // a half-life of 1,000 requests (mig::DemandTracker, as the node service and the Kubernetes
  // extender keep it). It is learnt from the stream, not read from the mix. The node has `gpus`
  // H100s.
  PlannerNode(PlacementRule rule, bool demand, bool repack_idle = false, int gpus = kGpus)
      : rule_(rule), use_demand_(demand), repack_idle_(repack_idle), gpus_(gpus), jobs_(gpus) {
    for (int g = 0; g < gpus; ++g) gpus_[g] = MigGpu{.gpu = g, .model = &H100(), .instances = {}};
  }

  bool Arrive(int job, int profile) override {
    GpuRequest request = ProfileRequest(gpu::MigProfileName(H100(), H100().profiles[profile]));
    demand_.Observe(H100(), profile);
    std::span<const ProfileDemand> demand;
    if (use_demand_) demand = demand_.demand();
    auto start = std::chrono::steady_clock::now();
    StatusOr<Plan> plan = PlanRequest(gpus_, request, rule_, demand);
    plan_ns_ +=
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    ++plans_;
    if (!plan.ok()) {
      if (plan.status().code() != StatusCode::kResourceExhausted) Die(plan.status().ToString());
      return false;
    }
    std::vector<Instance>& instances = gpus_[plan->gpu].instances;
    std::vector<int>& jobs = jobs_[plan->gpu];
    if (plan->reuse) {
      Instance& reused = instances[*plan->reuse];
      if (reused.busy || reused.profile != profile) Die("reused a busy or wrong instance");
      reused.busy = true;
      jobs[*plan->reuse] = job;
      return true;
    }
    std::vector<int> destroy = plan->destroy;
    std::sort(destroy.rbegin(), destroy.rend());
    for (int i : destroy) {
      if (instances[i].busy) Die("destroyed a busy instance");
      instances.erase(instances.begin() + i);
      jobs.erase(jobs.begin() + i);
    }
    Check(plan->gpu, profile, plan->placement);
    instances.push_back(Instance{.profile = profile, .placement = plan->placement, .busy = true});
    jobs.push_back(job);
    return true;
  }

  void Depart(int job) override {
    for (size_t g = 0; g < gpus_.size(); ++g) {
      for (size_t i = 0; i < jobs_[g].size(); ++i) {
        if (jobs_[g][i] == job) {
          jobs_[g][i] = -1;
          gpus_[g].instances[i].busy = false;
          if (repack_idle_) {
            jobs_[g].erase(jobs_[g].begin() + i);
            gpus_[g].instances.erase(gpus_[g].instances.begin() + i);
          }
          return;
        }
      }
    }
    Die("a departing job has no instance");
  }

  double MeanPlanNs() const { return plans_ == 0 ? 0 : plan_ns_ / plans_; }
  const std::vector<MigGpu>& gpus() const { return gpus_; }

 private:
  [[noreturn]] static void Die(const std::string& why) {
    std::fprintf(stderr, "mig_planner_bench: %s\n", why.c_str());
    std::exit(1);
  }

  // The plan obeys the driver's rules: a legal start, no overlap, the maximum count.
  void Check(int g, int profile, const gpu::MigPlacement& placement) const {
    const gpu::MigProfile& p = H100().profiles[profile];
    bool legal = false;
    for (int s = 0; s < p.start_count; ++s) {
      legal |= p.starts[s].start == placement.start && p.starts[s].size == placement.size;
    }
    int count = 0;
    for (const Instance& other : gpus_[g].instances) {
      int a = other.placement.start, b = a + other.placement.size;
      if (a < placement.start + placement.size && placement.start < b) Die("overlapping plan");
      count += other.profile == profile;
    }
    if (!legal || count >= p.max_count) Die("illegal plan");
  }

  PlacementRule rule_;
  bool use_demand_;
  bool repack_idle_;
  DemandTracker demand_{1000};
  std::vector<MigGpu> gpus_;
  std::vector<std::vector<int>> jobs_;  // Per instance: its job, or -1 when idle.
  double plan_ns_ = 0;
  long plans_ = 0;
};

// The per-GPU repack bound, stronger than the oracle: for each request it may repack
// every instance of a GPU (idle ones vanish, busy ones keep their GPU but may move to any legal
// placement on it, which MIG cannot do to a running workload), so a GPU can take a request
// whenever some legal layout holds its busy instances and the new one. It chooses among such
// GPUs with the planner's capacity rule evaluated on repacked layouts. Each GPU is a vector of
// instance counts per profile; which count vectors have a legal layout is found once by
// exhaustive search over placements (8 slices: a few thousand vectors).
class RepackBoundNode : public Node {
 public:
  RepackBoundNode() : counts_(kGpus, std::vector<int>(kProfiles, 0)) {
    const gpu::MigModel& m = H100();
    for (int p = 0; p < m.profile_count; ++p) {
      if (!m.profiles[p].media_extensions) profiles_.push_back(p);
    }
    // Largest first, as the planner's capacity vector.
    std::stable_sort(profiles_.begin(), profiles_.end(), [&](int a, int b) {
      const gpu::MigProfile &pa = m.profiles[a], &pb = m.profiles[b];
      if (pa.memory_slices != pb.memory_slices) return pa.memory_slices > pb.memory_slices;
      return pa.compute_slices > pb.compute_slices;
    });
    if (static_cast<int>(profiles_.size()) != kProfiles) {
      std::fprintf(stderr, "unexpected H100-80GB profile set\n");
      std::exit(2);
    }
    size_t states = 1;
    for (int p : profiles_) {
      radix_.push_back(static_cast<int>(states));
      states *= m.profiles[p].max_count + 1;
    }
    feasible_.assign(states, false);
    std::vector<int> c(kProfiles, 0);
    for (size_t s = 0; s < states; ++s) {
      Decode(s, c);
      feasible_[s] = Fits(c, 0, 0, 0);
    }
    slot_.assign(H100().profile_count, -1);
    for (int k = 0; k < kProfiles; ++k) slot_[profiles_[k]] = k;
  }

  bool Arrive(int job, int profile) override {
    int k = slot_[profile];
    int best = -1;
    std::vector<int> best_key;
    for (int g = 0; g < kGpus; ++g) {
      std::vector<int>& c = counts_[g];
      if (c[k] + 1 > Max(k) || !feasible_[Encode(c, k, 1)]) continue;
      std::vector<int> before = Capacity(c);
      ++c[k];
      std::vector<int> after = Capacity(c);
      --c[k];
      std::vector<int> key;
      for (int q = 0; q < kProfiles; ++q) key.push_back(before[q] - after[q]);
      int used = 0;
      for (int q = 0; q < kProfiles; ++q)
        used += c[q] * H100().profiles[profiles_[q]].memory_slices;
      key.push_back(-used);
      if (best < 0 || key < best_key) {
        best = g;
        best_key = key;
      }
    }
    if (best < 0) return false;
    ++counts_[best][k];
    where_.resize(std::max<size_t>(where_.size(), job + 1));
    where_[job] = {best, k};
    return true;
  }

  void Depart(int job) override { --counts_[where_[job].first][where_[job].second]; }

  // Whether one GPU can hold an instance of each of `profiles` (model profile indexes, +me ones
  // excluded) together, in some legal layout.
  bool OneGpuHolds(const std::vector<int>& profiles) const {
    std::vector<int> c(kProfiles, 0);
    for (int p : profiles) {
      int k = slot_[p];
      if (k < 0 || ++c[k] > Max(k)) return false;
    }
    return feasible_[Encode(c, 0, 0)];
  }

 private:
  static constexpr int kProfiles = 6;

  int Max(int k) const { return H100().profiles[profiles_[k]].max_count; }

  void Decode(size_t s, std::vector<int>& c) const {
    for (int k = kProfiles - 1; k >= 0; --k) {
      c[k] = static_cast<int>(s / radix_[k]);
      s %= radix_[k];
    }
  }
  size_t Encode(const std::vector<int>& c, int add_k, int add) const {
    size_t s = 0;
    for (int k = 0; k < kProfiles; ++k)
      s += static_cast<size_t>(c[k] + (k == add_k ? add : 0)) * radix_[k];
    return s;
  }

  // Whether instances c[k..] fit next to `used`, placing profile k's from its start index
  // `from` on (so each set of starts is tried once).
  bool Fits(std::vector<int>& c, int k, int from, uint32_t used) const {
    if (k == kProfiles) return true;
    if (c[k] == 0) return Fits(c, k + 1, 0, used);
    const gpu::MigProfile& p = H100().profiles[profiles_[k]];
    for (int s = from; s < p.start_count; ++s) {
      uint32_t m = ((1u << p.starts[s].size) - 1) << p.starts[s].start;
      if (used & m) continue;
      --c[k];
      bool ok = Fits(c, k, s + 1, used | m);
      ++c[k];
      if (ok) return true;
    }
    return false;
  }

  // How many more of each profile a GPU holding `c` could take, with repacking.
  std::vector<int> Capacity(std::vector<int>& c) const {
    std::vector<int> cap(kProfiles, 0);
    for (int k = 0; k < kProfiles; ++k) {
      while (c[k] + cap[k] + 1 <= Max(k) && feasible_[Encode(c, k, cap[k] + 1)]) ++cap[k];
    }
    return cap;
  }

  std::vector<int> profiles_;  // Model profile indexes, largest first.
  std::vector<int> slot_;      // Model profile index -> position in profiles_.
  std::vector<int> radix_;
  std::vector<bool> feasible_;
  std::vector<std::vector<int>> counts_;
  std::vector<std::pair<int, int>> where_;
};

struct Result {
  double served = 0;                 // Share of measured requests served at arrival.
  double slices = 0;                 // Share of their compute slices (a second metric).
  double by_profile[kMixSize] = {};  // The same per requested profile.
};

// Replays `stream` on `node`. Requests that cannot be served at arrival are dropped (a loss
// system, as Erlang's): they never run, so the load the node sees does not depend on how long a
// queue would be. The first `warmup` requests fill the node and are not counted.
Result Replay(const std::vector<Arrival>& stream, int warmup, Node& node) {
  using Departure = std::pair<double, int>;
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  long served = 0, counted = 0, served_slices = 0, counted_slices = 0;
  long served_by[kMixSize] = {}, counted_by[kMixSize] = {};
  for (int i = 0; i < static_cast<int>(stream.size()); ++i) {
    const Arrival& a = stream[i];
    while (!departures.empty() && departures.top().first <= a.time) {
      node.Depart(departures.top().second);
      departures.pop();
    }
    int profile = ProfileIndex(kMix[a.mix].profile);
    bool ok = node.Arrive(i, profile);
    if (ok) departures.push({a.time + a.lifetime, i});
    if (i >= warmup) {
      int slices = H100().profiles[profile].compute_slices;
      ++counted;
      served += ok;
      counted_slices += slices;
      served_slices += ok ? slices : 0;
      ++counted_by[a.mix];
      served_by[a.mix] += ok;
    }
  }
  Result r;
  r.served = counted == 0 ? 0 : static_cast<double>(served) / counted;
  r.slices = counted_slices == 0 ? 0 : static_cast<double>(served_slices) / counted_slices;
  for (int k = 0; k < kMixSize; ++k) {
    r.by_profile[k] = counted_by[k] == 0 ? 0 : static_cast<double>(served_by[k]) / counted_by[k];
  }
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Options {
  std::vector<uint64_t> seeds = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<double> loads = {0.8, 0.9, 1.0};
  int requests = 20000;
  int warmup = 2000;
  bool markdown = false;
  bool simulate = true;
  int sequences = 0;  // Arrival-only sequences per mix; 0: none.
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= s.size()) {
    size_t end = s.find(sep, begin);
    if (end == std::string::npos) end = s.size();
    parts.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// Our flags (Google Benchmark has removed its own from argv by now).
Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      size_t n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--seeds=")) {
      o.seeds.clear();
      std::vector<std::string> range = Split(v, '-');
      if (range.size() == 2) {
        for (uint64_t s = std::stoull(range[0]); s <= std::stoull(range[1]); ++s)
          o.seeds.push_back(s);
      } else {
        for (const std::string& s : Split(v, ',')) o.seeds.push_back(std::stoull(s));
      }
    } else if (const char* v = value("--loads=")) {
      o.loads.clear();
      for (const std::string& s : Split(v, ',')) o.loads.push_back(std::stod(s));
    } else if (const char* v = value("--requests=")) {
      o.requests = std::stoi(v);
    } else if (const char* v = value("--warmup=")) {
      o.warmup = std::stoi(v);
    } else if (const char* v = value("--arrival-only=")) {
      o.sequences = std::stoi(v);
    } else if (arg == "--markdown") {
      o.markdown = true;
    } else if (arg == "--no-simulation") {
      o.simulate = false;
    } else {
      std::fprintf(stderr,
                   "usage: mig_planner_bench [--seeds=A-B|A,B,..] [--loads=0.8,0.9,1.0] "
                   "[--requests=N] [--warmup=N] [--markdown] [--no-simulation] "
                   "[--arrival-only=SEQUENCES] "
                   "[Google Benchmark flags]\n");
      std::exit(2);
    }
  }
  return o;
}

constexpr int kPolicies = 5;
constexpr const char* kPolicyNames[kPolicies] = {
    "(a) gpufrac", "(b) lowest start", "(c) idle-repack oracle", "(d) per-GPU repack bound",
    "(a0) gpufrac, no demand"};

// results[load][policy][seed]
using Results = std::vector<std::vector<std::vector<Result>>>;

// Replays each seed's stream at each load under every policy; the gpufrac rule's mean planning
// time of each run goes to `plan_ns`.
Results RunPolicies(const Options& o, std::vector<double>* plan_ns) {
  Results results(o.loads.size());
  for (size_t l = 0; l < o.loads.size(); ++l) {
    results[l].resize(kPolicies);
    for (uint64_t seed : o.seeds) {
      std::vector<Arrival> stream = Stream(seed, o.loads[l], o.requests);
      PlannerNode ours(PlacementRule::kGpufrac, /*demand=*/true);
      PlannerNode lowest(PlacementRule::kLowestStart, /*demand=*/false);
      // The oracle gets what (a) gets, demand included: it differs from (a) only in repacking.
      PlannerNode idle_repack(PlacementRule::kGpufrac, /*demand=*/true, /*repack_idle=*/true);
      PlannerNode no_demand(PlacementRule::kGpufrac, /*demand=*/false);
      RepackBoundNode bound;
      results[l][0].push_back(Replay(stream, o.warmup, ours));
      results[l][1].push_back(Replay(stream, o.warmup, lowest));
      results[l][2].push_back(Replay(stream, o.warmup, idle_repack));
      results[l][3].push_back(Replay(stream, o.warmup, bound));
      results[l][4].push_back(Replay(stream, o.warmup, no_demand));
      plan_ns->push_back(ours.MeanPlanNs());
      if (!o.markdown) {
        std::fprintf(stderr, "load %.2f seed %llu: gpufrac %.4f lowest %.4f oracle %.4f\n",
                     o.loads[l], static_cast<unsigned long long>(seed), results[l][0].back().served,
                     results[l][1].back().served, results[l][2].back().served);
      }
    }
  }
  return results;
}

// The median over seeds of one figure, in percent: the share served, or (profile >= 0) the
// share of that profile's requests served.
double MedianPct(const Results& results, size_t l, int policy, int profile) {
  std::vector<double> v;
  for (const Result& r : results[l][policy])
    v.push_back(profile < 0 ? r.served : r.by_profile[profile]);
  return 100 * Median(v);
}

// Every policy replays the same stream for a seed, so the per-seed difference of two policies
// is free of the stream's own variation (a few tenths of a point between seeds): its mean,
// standard deviation and sign count say whether a small gap is consistent or noise.
struct Paired {
  double mean = 0, sd = 0;
  int above = 0, below = 0;
};

Paired PairedDiff(const Results& results, size_t seeds, size_t l, int x, int y, bool slices) {
  std::vector<double> d;
  Paired p;
  for (size_t i = 0; i < seeds; ++i) {
    const Result &rx = results[l][x][i], &ry = results[l][y][i];
    d.push_back(100 * (slices ? rx.slices - ry.slices : rx.served - ry.served));
    p.above += d.back() > 0;
    p.below += d.back() < 0;
  }
  for (double v : d) p.mean += v / d.size();
  for (double v : d) p.sd += (v - p.mean) * (v - p.mean);
  p.sd = d.size() > 1 ? std::sqrt(p.sd / (d.size() - 1)) : 0;
  return p;
}

void PrintServed(const Options& o, const Results& results) {
  std::printf(
      "| offered load | (a) gpufrac | (b) lowest start | (c) idle-repack oracle | "
      "(d) per-GPU repack bound | (a0) gpufrac, no demand | a - c | a - d | a - b | a0 - b |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t l = 0; l < o.loads.size(); ++l) {
    double a = MedianPct(results, l, 0, -1), b = MedianPct(results, l, 1, -1),
           c = MedianPct(results, l, 2, -1), d = MedianPct(results, l, 3, -1);
    double a0 = MedianPct(results, l, 4, -1);
    std::printf(
        "| %.0f%% | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %+.2f | %+.2f | %+.2f | %+.2f |\n",
        100 * o.loads[l], a, b, c, d, a0, a - c, a - d, a - b, a0 - b);
  }
}

void PrintPaired(const Options& o, const Results& results) {
  std::printf(
      "\nPaired by seed (%zu seeds): the difference in points, mean +- standard deviation over "
      "seeds, and the seeds where it is above / below zero:\n\n",
      o.seeds.size());
  std::printf(
      "| offered load | a - b | seeds a > b / a < b | a - c | seeds a > c / a < c | a0 - b | "
      "seeds a0 > b / a0 < b |\n|---|---|---|---|---|---|---|\n");
  const size_t n = o.seeds.size();
  for (size_t l = 0; l < o.loads.size(); ++l) {
    Paired ab = PairedDiff(results, n, l, 0, 1, false), ac = PairedDiff(results, n, l, 0, 2, false),
           a0b = PairedDiff(results, n, l, 4, 1, false);
    std::printf(
        "| %.0f%% | %+.2f +- %.2f | %d / %d | %+.2f +- %.2f | %d / %d | %+.2f +- %.2f | %d / %d "
        "|\n",
        100 * o.loads[l], ab.mean, ab.sd, ab.above, ab.below, ac.mean, ac.sd, ac.above, ac.below,
        a0b.mean, a0b.sd, a0b.above, a0b.below);
  }
}

void PrintSlices(const Options& o, const Results& results) {
  std::printf(
      "\nSecond metric: share of the requested compute slices served without waiting (median "
      "over seeds; paired a - b as above):\n\n");
  std::printf(
      "| offered load | (a) gpufrac | (b) lowest start | (c) idle-repack oracle | "
      "(d) per-GPU repack bound | (a0) gpufrac, no demand | a - b paired | seeds a > b / a < b "
      "|\n|---|---|---|---|---|---|---|---|\n");
  for (size_t l = 0; l < o.loads.size(); ++l) {
    std::printf("| %.0f%% |", 100 * o.loads[l]);
    for (int p = 0; p < kPolicies; ++p) {
      std::vector<double> v;
      for (const Result& r : results[l][p]) v.push_back(r.slices);
      std::printf(" %.2f%% |", 100 * Median(v));
    }
    Paired ab = PairedDiff(results, o.seeds.size(), l, 0, 1, true);
    std::printf(" %+.2f +- %.2f | %d / %d |\n", ab.mean, ab.sd, ab.above, ab.below);
  }
}

void PrintByProfile(const Options& o, const Results& results) {
  std::printf("\nServed without waiting, by requested profile (median over seeds):\n\n");
  std::printf("| offered load | policy |");
  for (const MixEntry& e : kMix) std::printf(" %s |", e.profile);
  std::printf("\n|---|---|");
  for (int k = 0; k < kMixSize; ++k) std::printf("---|");
  std::printf("\n");
  for (size_t l = 0; l < o.loads.size(); ++l) {
    for (int p = 0; p < kPolicies; ++p) {
      std::printf("| %.0f%% | %s |", 100 * o.loads[l], kPolicyNames[p]);
      for (int k = 0; k < kMixSize; ++k) std::printf(" %.1f%% |", MedianPct(results, l, p, k));
      std::printf("\n");
    }
  }
}

void Simulate(const Options& o) {
  std::vector<double> plan_ns;
  const Results results = RunPolicies(o, &plan_ns);
  PrintServed(o, results);
  PrintPaired(o, results);
  PrintSlices(o, results);
  PrintByProfile(o, results);
  std::printf("\nMean time of one PlanRequest (gpufrac rule) during the runs: %.2f us.\n",
              Median(plan_ns) / 1000);
}

// Arrival-only sequences on one H100 (issue 19): profiles arrive one after another and never
// leave. A sequence is drawn from a mix: each drawn profile is kept if one GPU could still hold
// every kept one in some legal layout (the repack bound's exhaustive search), until 8 draws in a
// row could not be kept, so the sequence nearly fills the GPU and a legal layout holds it whole.
// A rule serves it whole when every request in arrival order gets an instance.
struct SequenceMix {
  const char* name;
  std::vector<double> weights;  // Of kMix's profiles.
};

std::vector<int> FillingSequence(Random& rng, const SequenceMix& mix,
                                 const RepackBoundNode& bound) {
  std::vector<int> sequence;
  for (int misses = 0; misses < 8;) {
    sequence.push_back(ProfileIndex(kMix[Draw(rng, mix.weights)].profile));
    if (bound.OneGpuHolds(sequence)) {
      misses = 0;
    } else {
      sequence.pop_back();
      ++misses;
    }
  }
  return sequence;
}

std::string SequenceText(const std::vector<int>& sequence) {
  std::string text;
  for (int p : sequence) {
    if (!text.empty()) text += ", ";
    text += gpu::MigProfileName(H100(), H100().profiles[p]);
  }
  return text;
}

void ArrivalOnly(const Options& o) {
  const std::vector<SequenceMix> mixes = {
      {"the mix above", MixWeights()},
      {"uniform over the six profiles", std::vector<double>(kMixSize, 1.0 / kMixSize)},
      {"1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, uniform", {0.25, 0.25, 0.25, 0.25, 0, 0}},
  };
  struct Rule {
    const char* name;
    PlacementRule rule;
    bool demand;
  };
  const Rule rules[] = {{"(a) gpufrac", PlacementRule::kGpufrac, true},
                        {"(a0) gpufrac, no demand", PlacementRule::kGpufrac, false},
                        {"(b) lowest start", PlacementRule::kLowestStart, false}};
  constexpr int kRules = sizeof(rules) / sizeof(rules[0]);
  RepackBoundNode bound;
  // Columns: the mix, then each rule's sequences served whole, then where (a) and (b) differ.
  std::printf("| sequences drawn from | sequences | requests per sequence (mean) |");
  for (const Rule& r : rules) std::printf(" %s |", r.name);
  std::printf(" a whole, b not | b whole, a not |\n|---|---|---|");
  for (int r = 0; r < kRules + 2; ++r) std::printf("---|");
  std::printf("\n");
  std::vector<std::string> examples;
  for (size_t m = 0; m < mixes.size(); ++m) {
    Random rng(1 + m);
    long whole[kRules] = {}, requests = 0, only_a = 0, only_b = 0;
    for (int i = 0; i < o.sequences; ++i) {
      std::vector<int> sequence = FillingSequence(rng, mixes[m], bound);
      requests += static_cast<long>(sequence.size());
      bool served[kRules];
      for (int r = 0; r < kRules; ++r) {
        PlannerNode node(rules[r].rule, rules[r].demand, /*repack_idle=*/false, /*gpus=*/1);
        served[r] = true;
        for (size_t j = 0; j < sequence.size() && served[r]; ++j) {
          served[r] = node.Arrive(static_cast<int>(j), sequence[j]);
        }
        whole[r] += served[r];
      }
      only_a += served[0] && !served[2];
      only_b += !served[0] && served[2];
      if (!served[0] && served[2] && examples.size() < 3) {
        examples.push_back(SequenceText(sequence));
      }
    }
    std::printf("| %s | %d | %.2f |", mixes[m].name, o.sequences,
                o.sequences == 0 ? 0.0 : static_cast<double>(requests) / o.sequences);
    for (int r = 0; r < kRules; ++r) {
      std::printf(" %ld (%.2f%%) |", whole[r],
                  o.sequences == 0 ? 0.0 : 100.0 * whole[r] / o.sequences);
    }
    std::printf(" %ld | %ld |\n", only_a, only_b);
  }
  if (examples.empty()) {
    std::printf("\nEvery sequence (b) serves whole, (a) serves whole too.\n");
  } else {
    std::printf("\nThe first sequences drawn that (b) serves whole and (a) does not:\n\n");
    for (const std::string& e : examples) std::printf("- %s\n", e.c_str());
  }
}

// The GPUs as a gpufrac run leaves them after 3000 requests at load 0.9: busy and idle
// instances of every size, the state the planner usually sees.
const std::vector<MigGpu>& MidLoadNode() {
  static const std::vector<MigGpu> gpus = [] {
    PlannerNode node(PlacementRule::kGpufrac, /*demand=*/true);
    Replay(Stream(7, 0.9, 3000), 0, node);
    return node.gpus();
  }();
  return gpus;
}

// One PlanRequest on the mid-load node, cycling through the request mix. Arg 0: gpufrac told the
// mix as its demand; 1: lowest start; 2: gpufrac without demand.
void BM_PlanRequest(benchmark::State& state) {
  PlacementRule rule = state.range(0) == 1 ? PlacementRule::kLowestStart : PlacementRule::kGpufrac;
  const std::vector<MigGpu>& gpus = MidLoadNode();
  std::vector<GpuRequest> requests;
  ProfileDemand mix{.model = &H100(), .weight = {}};
  for (const MixEntry& e : kMix) {
    requests.push_back(ProfileRequest(e.profile));
    mix.weight[ProfileIndex(e.profile)] = e.weight;
  }
  std::span<const ProfileDemand> demand;
  if (state.range(0) == 0) demand = {&mix, 1};
  size_t i = 0;
  for (auto _ : state) {
    StatusOr<Plan> plan = PlanRequest(gpus, requests[i++ % requests.size()], rule, demand);
    benchmark::DoNotOptimize(plan);
  }
  state.SetLabel(state.range(0) == 0   ? "gpufrac, with demand"
                 : state.range(0) == 1 ? "lowest start"
                                       : "gpufrac, no demand");
}
BENCHMARK(BM_PlanRequest)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace gpufrac::mig

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  gpufrac::mig::Options options = gpufrac::mig::ParseOptions(argc, argv);
  if (options.sequences > 0) {
    gpufrac::mig::ArrivalOnly(options);
  } else if (options.simulate) {
    gpufrac::mig::Simulate(options);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
