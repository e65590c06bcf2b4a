#!/usr/bin/env bash
# The MIG planner benchmark of issue 5 (not a test): builds bench/mig_planner_bench, replays
# random request streams on a simulated 8 x H100-80GB node for seeds 1-10 at 80/90/100% offered
# load, times the planner, and writes docs/mig-planner-benchmark.md.
# Usage: bench/run_mig_bench.sh [build dir]   (default ./build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target mig_planner_bench >/dev/null
bench="$build/bin/mig_planner_bench"
tables=$("$bench" --markdown --seeds=1-10 --loads=0.8,0.9,1.0 \
  --benchmark_filter=none 2>/dev/null)
speed=$("$bench" --no-simulation --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json | python3 -c '
import json, sys
for b in json.load(sys.stdin)["benchmarks"]:
    if b.get("aggregate_name") == "median":
        ns = b["real_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        label = b["label"]
        print(f"| {label} | {ns / 1000:.2f} us |")
')
cat >docs/mig-planner-benchmark.md <<DOC
# MIG planner benchmark: requests served without waiting

Written by \`bench/run_mig_bench.sh\` (source: \`bench/mig_planner_bench.cc\`). Not a test.

## Setup

- A simulated node of 8 x H100-80GB in MIG mode (7 compute and 8 memory slices each; the
  profiles, legal placements and maximum counts of \`src/gpu/mig_catalogue.cc\`).
- Requests name a profile, drawn with these weights: 1g.10gb 30%, 1g.20gb 20%, 2g.20gb 20%,
  3g.40gb 15%, 4g.40gb 10%, 7g.80gb 5% (2.1 compute slices on average).
- Poisson arrivals, exponential lifetimes (mean 1). The offered load is arrival rate x mean
  compute slices x mean lifetime / 56 (the node's compute slices): 80%, 90% and 100%.
- 20,000 requests per run; the first 2,000 warm the node up and are not counted. Seeds 1-10,
  the same request stream for every policy; each figure is the median over the seeds.
- A request that cannot be placed when it arrives is **dropped** (a loss system): it counts as
  not served without waiting and never runs, so the load every policy sees is the same stream.
- A finished job's instance stays, idle, until a later request reuses it or needs its slices
  (lazy destruction), as the node service does; every plan is checked against the driver's
  rules (legal start, no overlap, maximum count, no busy instance reused or destroyed).

Policies:

- **(a) gpufrac**: \`PlanRequest\` with \`PlacementRule::kGpufrac\` (reuse, placement that keeps
  the largest profiles creatable, lazy destruction of the fewest idle slices).
- **(b) lowest start**: \`PlacementRule::kLowestStart\`, what the driver does without an
  explicit placement: the first GPU with room, the lowest legal free start (same reuse and
  lazy destruction).
- **(c) idle-repack oracle**, the issue's oracle: before every request every idle instance is
  repacked away (destroyed at no cost), so idle instances are never in the way; busy ones stay
  where they are; the new instance goes where gpufrac's exhaustive search over every GPU and
  legal start puts it. It measures what lazy destruction and reuse cost.
- **(d) per-GPU repack bound**, stronger than the issue asks: busy instances keep their GPU but
  may be moved to any placement on it for every request (MIG cannot do this to a running
  workload). A GPU takes a request whenever some legal layout holds its busy instances and the
  new one, found by exhaustive search over placements (precomputed for every count vector);
  among such GPUs the same capacity rule chooses. No non-migrating policy can beat it on
  in-GPU fragmentation.

## Share of requests served without waiting

$tables

## Reading the results

- gpufrac is within 0.2 points of the idle-repack oracle (c) at every load and within 1.5
  points of the stronger bound (d): the goal of staying within 2% of the oracle is met. (c)
  places by the same rule, so it is not a strict upper bound (at 100% gpufrac is 0.03 above
  it); what (c) gains is 7g.80gb (6-8 points): a 7g needs a GPU with no busy instance, and idle
  instances that are reused keep small jobs on GPUs that would otherwise have emptied.
- Against lowest start (b) the gain in the overall share is small (0.1-0.5 points). The
  overall share is dominated by small requests, which both rules almost always serve; what
  fails under load is the large profiles, and there gpufrac is clearly ahead: 4g.40gb is
  served 4-6 points more often and 7g.80gb 1-2 points more. Lowest start puts a 3g.40gb at
  slices 0-3, which rules out the GPU's only 4g.40gb placement; gpufrac puts it at 4-7.
- Most of the remaining gap to (d) is 4g.40gb: a 4g.40gb needs slices 0-3 free, and a small
  instance left there after its neighbours departed blocks it until it ends. Only moving running
  instances (which MIG cannot do) closes that.
- "Clearly above lowest start" in the overall share is not reached with this mix; it is reached
  for the large profiles the placement rule exists for.

## Speed

One \`PlanRequest\` on the 8-GPU node in mid-load (the state a gpufrac run reaches after 3,000
requests at 90% load), cycling through the request mix; median of 5 repetitions on this machine
($(nproc) cores):

| rule | time per plan |
|---|---|
$speed

## Reproduce

\`\`\`
bench/run_mig_bench.sh            # builds into ./build and rewrites this file
build/bin/mig_planner_bench --seeds=1-5 --loads=0.5,0.7,0.9   # other settings; per seed on stderr
\`\`\`
DOC
echo "wrote docs/mig-planner-benchmark.md" >&2
