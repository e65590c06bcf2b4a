#!/usr/bin/env bash
# The MIG planner benchmark of issue 5 (not a test): builds bench/mig_planner_bench, replays
# random request streams on a simulated 8 x H100-80GB node for seeds 1-30 at 80/90/100% offered
# load, counts the arrival-only sequences on one H100 each rule serves whole (issue 19), times
# the planner, and writes docs/mig-planner-benchmark.md.
# Usage: bench/run_mig_bench.sh [build dir]   (default ./build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target mig_planner_bench >/dev/null
bench="$build/bin/mig_planner_bench"
tables=$("$bench" --markdown --seeds=1-30 --loads=0.8,0.9,1.0 \
  --benchmark_filter=none 2>/dev/null)
arrival=$("$bench" --arrival-only=100000 --benchmark_filter=none 2>/dev/null)
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
- 20,000 requests per run; the first 2,000 warm the node up and are not counted. Seeds 1-30,
  the same request stream for every policy; each figure in the first table is the median over
  the seeds. Because every policy replays the same stream, the per-seed difference of two
  policies is also given (mean +- standard deviation over the seeds, and in how many seeds it is
  above and below zero): it removes the variation between streams, which is about as large as
  the differences between policies.
- A request that cannot be placed when it arrives is **dropped** (a loss system): it counts as
  not served without waiting and never runs, so the load every policy sees is the same stream.
- A finished job's instance stays, idle, until a later request reuses it or needs its slices
  (lazy destruction), as the node service does; every plan is checked against the driver's
  rules (legal start, no overlap, maximum count, no busy instance reused or destroyed).

Policies:

- **(a) gpufrac**: \`PlanRequest\` with \`PlacementRule::kGpufrac\` and the recent demand
  (\`ProfileDemand\`): how often each profile was requested, counted by the benchmark from the
  arrivals so far (served or not, older ones decayed with a half-life of 1,000 requests), as the
  node service can count them; not the mix's weights. The plan (reuse, creation on free slices,
  or creation after destroying idle instances) is the one whose loss of future capacity costs
  least: each instance of profile k it rules out costs k's share of the demand x k's memory
  slices (FGD's expected fragmentation), ties broken by the lexicographic rule of (a0).
- **(a0) gpufrac, no demand**: the same without \`ProfileDemand\`, as the node service calls it
  today: a larger profile ruled out always outweighs any number of smaller ones.
- **(b) lowest start**: \`PlacementRule::kLowestStart\`, what the driver does without an
  explicit placement: the first GPU with room, the lowest legal free start (same reuse and
  lazy destruction).
- **(c) idle-repack oracle**, the issue's oracle: before every request every idle instance is
  repacked away (destroyed at no cost), so idle instances are never in the way; busy ones stay
  where they are; the new instance goes where gpufrac's exhaustive search over every GPU and
  legal start puts it (with the same demand as (a)). It measures what lazy destruction and
  reuse cost.
- **(d) per-GPU repack bound**, stronger than the issue asks: busy instances keep their GPU but
  may be moved to any placement on it for every request (MIG cannot do this to a running
  workload). A GPU takes a request whenever some legal layout holds its busy instances and the
  new one, found by exhaustive search over placements (precomputed for every count vector);
  among such GPUs the same capacity rule chooses. No non-migrating policy can beat it on
  in-GPU fragmentation.

## Share of requests served without waiting

The first table is the issue's metric. The second metric, share of the requested compute
slices served, is given after it: it weighs a 7g.80gb request seven times a 1g one.

$tables

## Reading the results

- These figures are with issue 19's rule: a placement that strands a memory slice (leaves a free
  slice that no profile could use next to the instances there, such as slice 7 beside a 1g.10gb
  at slice 6) loses to one that does not. It raised (a) by +0.11 +- 0.14, +0.19 +- 0.17 and
  +0.24 +- 0.19 points at 80, 90 and 100% load (paired by seed; above in 22, 26 and 27 of the
  30 seeds, below in 7, 4 and 3). Before it, (a) served 92.14%, 89.22% and 86.16% (medians),
  (a0) 92.06%, 89.16% and 86.09%, and a - b paired was +0.50, +0.42 and +0.41; (b), (d) are
  unchanged, (c) uses gpufrac's rule and moved with it.
- Against lowest start (b), gpufrac (a) serves 0.59-0.63 points more requests (medians); paired
  by seed the gain is +0.61, +0.61 and +0.64 points at 80, 90 and 100% load (standard deviation
  0.17-0.19), and (a) is above (b) in all 30 seeds at every load. The gain is small because the
  share is dominated by small requests, which every rule almost always serves, and because the
  room for any rule that cannot move running instances is small: the per-GPU repack bound (d)
  is only 1.5 points above (b). gpufrac takes about two fifths of it.
- Where it comes from: 4g.40gb is served 7-7.5 points more often than under (b), because (a)
  keeps slices 0-3 free (lowest start puts a 3g.40gb or a small instance there). In exchange
  (a) serves 0.6-1.2 points fewer 7g.80gb and up to 0.3 fewer 1g profiles: with the recent
  demand a placement may rule out a 7g.80gb (5% of requests) to keep a 4g.40gb and smaller
  profiles, which are asked for more often.
- The demand is what the node service's MIG lane and the Kubernetes extender learn from the
  requests they see (mig::DemandTracker: every request, older ones halved every 1,000). Without
  it (a0) gpufrac is +0.54, +0.60 and +0.51 points above (b) paired (above in all 30 seeds).
- gpufrac is within 0.2 points of the idle-repack oracle (c) at every load (paired -0.19, -0.14
  and -0.10): the goal of staying within 2% of the oracle is met. What (c) gains is 4g.40gb
  (+1.9 to +2.8 points): gpufrac destroys an idle instance only when a request cannot be served
  otherwise (lazy destruction, as the issue asks: creating an instance takes seconds on a real
  GPU), so an idle instance in slices 0-3 keeps a 4g.40gb off its GPU until the slices are
  needed. Destroying idle instances whenever that keeps a larger profile creatable closes that
  gap (measured before issue 19's rule: (a) then equalled (c) and was +0.5 to +0.66 above (b)),
  but it is not lazy destruction, so gpufrac does not do it.
- The stronger bound (d), which moves running instances, is 0.9 points above (a). It serves
  6-11 points more 4g.40gb and 8-14 more 7g.80gb: without moving running instances, a small
  instance left in slices 0-3 blocks the GPU's 4g.40gb until it ends.
- Second metric (compute slices served): (a) is +1.07 to +1.28 points above (b) paired, in all
  30 seeds.

## Arrival-only sequences one GPU can hold whole (issue 19)

- One empty H100-80GB; requests arrive one after another and never leave, so nothing is idle,
  reused or destroyed. Issue 19's sequence is one: 1g.10gb, 1g.10gb, 3g.40gb, 1g.20gb.
- Each sequence is drawn from a mix: a drawn profile is kept when one GPU could still hold every
  kept one in some legal layout (the exhaustive search of (d)), until 8 draws in a row cannot be
  kept. So a legal layout holds every sequence whole, and most nearly fill the GPU. 100,000
  sequences from each of three mixes (random seeds 1, 2 and 3; the same sequences for every
  rule).
- A rule serves a sequence whole when every request, in arrival order, gets an instance. (c)
  is (a) here (no job ends, so there is nothing idle to repack) and (d) serves every sequence by
  construction; they are left out. The last two columns count the sequences one of (a) and (b)
  serves whole and the other does not.

$arrival

Before issue 19's rule, the same sequences (gpufrac at commit 0228f8c, the same benchmark):
(a) and (a0) served 67,581 (67.58%), 82,072 (82.07%) and 67,692 (67.69%) whole, below (b) on
the third mix; (b) is unchanged. Reading:

- The rule serves 16.5, 5.9 and 15.4 points more sequences whole than before, and (a) is now
  above (b) on every mix: by 26.4, 24.6 and 14.3 points.
- (a) and (a0) serve the same number: on one GPU the demand a sequence teaches as it arrives
  did not change a choice that decides whether the sequence is served.
- Neither rule serves them all (a rule that does not know what comes next cannot): (b) serves
  whole 7,123 to 14,639 sequences per mix that (a) does not. In the first of them, listed
  above, gpufrac keeps slices 0-3 for a 4g.40gb by putting the first small instances in slices
  4-7, a 3g.40gb then takes slices 0-3, and what comes after finds no room in what is left of
  4-7 (a 2g.20gb may not start at slice 6). Lowest start fills slices 0-3 first and serves
  those; in exchange it never serves a 4g.40gb that arrives after any other instance (the
  first instance on an empty GPU takes slice 0, and slice 0 is the 4g.40gb's only start).

## Speed

One \`PlanRequest\` on the 8-GPU node in mid-load (the state a gpufrac run reaches after 3,000
requests at 90% load), cycling through the request mix (with demand: the mix's weights);
median of 5 repetitions on this machine ($(nproc) cores). The mean during the runs, over every
state they pass through, is printed under the tables above:

| rule | time per plan |
|---|---|
$speed

The stranding check of issue 19 adds at most about 0.1 us, within this machine's noise: measured
back to back, twice each, gpufrac with demand took 2.39 and 2.31 us before it (commit 0228f8c)
and 2.38 and 2.51 us with it (each on the mid-load state its own rule reaches).

## Reproduce

\`\`\`
bench/run_mig_bench.sh            # builds into ./build and rewrites this file
build/bin/mig_planner_bench --seeds=1-5 --loads=0.5,0.7,0.9   # other settings; per seed on stderr
build/bin/mig_planner_bench --arrival-only=100000 --benchmark_filter=none   # the arrival-only table
\`\`\`
DOC
echo "wrote docs/mig-planner-benchmark.md" >&2
