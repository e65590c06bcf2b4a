#!/usr/bin/env bash
# The Kubernetes scheduler extender benchmarks (not tests): builds bench/k8s_extender_bench and
# measures filter + prioritize latency for one pod against 5,000 nodes of 8 GPUs (issue 6; three
# runs with different seeds); runs the bind burst of tests/integration/k8s_bind_burst_test.cc
# five times (issue 19: binds per second to one node); writes docs/k8s-extender-benchmark.md.
# Usage: bench/run_k8s_bench.sh [build dir]   (default ./build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target k8s_extender_bench k8s_bind_burst_test >/dev/null
bench="$build/bin/k8s_extender_bench"
runs=""
for seed in 1 2 3; do
  runs+="### Seed $seed"$'\n\n'"$("$bench" --nodes=5000 --gpus=8 --pods=1000 --fill=0.6 --seed=$seed)"$'\n\n'
done
small=$("$bench" --nodes=500 --gpus=8 --pods=1000 --fill=0.6 --seed=1)
# Each run prints "bind burst: B of 56 pods bound ...: S s, R binds/s"; the median run by R.
bursts=""
for run in 1 2 3 4 5; do
  bursts+="$("$build/bin/k8s_bind_burst_test" | grep '^bind burst:' || true)"$'\n'
done
burst_rows=$(printf '%s' "$bursts" | awk '{ printf "| %d | %s of %s | %s s | %s |\n", NR, $3, $5, $(NF-3), $(NF-1) }')
burst_median=$(printf '%s' "$bursts" | awk '{ print $(NF-1), $(NF-3), $3 }' | sort -n |
  awk '{ r[NR] = $1; s[NR] = $2; b[NR] = $3 } END { m = int((NR + 1) / 2); printf "%s binds/s (%s of 56 bound in %s s)", r[m], b[m], s[m] }')
# The "filter + prioritize" rows' column $1 (6: p50, 8: p99, 9: max) over the runs in $2, as
# "lo to hi ms"; and whether every run's p99 is under the target.
span() {
  printf '%s\n' "$2" | grep '| filter + prioritize |' | awk -F'|' -v c="$1" '
    { v = $c + 0; if (NR == 1 || v < lo) lo = v; if (NR == 1 || v > hi) hi = v }
    END { a = sprintf("%.1f", lo); b = sprintf("%.1f", hi); print (a == b ? a : a " to " b) " ms" }'
}
verdict=$(printf '%s\n' "$runs" | grep '| filter + prioritize |' |
  awk -F'|' '$8 + 0 >= 10 { missed = 1 } END { print missed ? "missed in at least one run" : "met at every seed" }')
cat >docs/k8s-extender-benchmark.md <<DOC
# Scheduler extender benchmark: filter + prioritize at 5,000 nodes, and a burst of binds

Written by \`bench/run_k8s_bench.sh\` (sources: \`bench/k8s_extender_bench.cc\`,
\`tests/integration/k8s_bind_burst_test.cc\`, which is also a test).
Measured on this machine: $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%d).

## Setup

- 5,000 nodes of 8 x H100-80GB in \`shared\` mode, each announced to the extender as the node
  agent announces it (a Node object with the gpufrac.io/gpus annotation, through \`OnNode\`).
- Before measuring, pods are booked on random nodes (where the Ledger itself puts them on that
  node) until 60% of the GPU capacity is taken: about 41,500 pods, a mix of 0.1, 0.25 (twice as
  often), 0.5, 10 GiB, 1 whole GPU and 2 whole GPUs.
- Then 1,000 pods in the same mix are scheduled one after the other, as kube-scheduler does
  with \`nodeCacheCapable: true\`: \`Filter\` gets the full ExtenderArgs JSON (the pod as the API
  server stores it, and all 5,000 node names), \`Prioritize\` gets the nodes that passed. Each
  call is timed from the request body (a string) to the response body (a string): JSON parsing,
  the pod's request, the Ledger's verdicts (the gpufrac placement policy's scores, from the
  placement library's per-node cache) and the JSON answer. Between calls the pod is booked on
  the best-scored node and a random earlier pod ends, so every call sees changed nodes.
- The first call after start is reported apart: it scores every node for a kind of request the
  cache has not seen (kube-scheduler's retries and every later pod of that kind then use the
  cache).

## Results

$runs
### 500 nodes, for scale

$small

## Reading the results

The issue's target is a p99 under 10 ms for filter + prioritize for one pod against 5,000 nodes
with 8 GPUs each. In the run above it is $verdict: p99 $(span 8 "$runs"), p50
$(span 6 "$runs"); the slowest single call took $(span 9 "$runs") (on a 2-core machine its own
noise moves p99 by about 2 ms between otherwise identical runs). At 500 nodes both calls together
take $(span 6 "$small") at the median.

Where the time goes (from a profile taken when the benchmark was written, 2026-11): mostly into
JSON, parsing 5,000 node names and writing 5,000 answers, twice. The Ledger's own work was about
0.5 ms per call: a cache lookup per node, because the placement scores of unchanged nodes are
kept from call to call, and \`Prioritize\` reuses the scores \`Filter\` just computed when
nothing changed in between.

## A burst of binds to one node

The bind protocol (docs/kubernetes.md, "How binding avoids double-booking") against the fake
HTTPS API server of the tests, whose every write takes 20 ms more (as etcd on a small disk):
56 pods created at once, each asking for 1/7 of a GPU (142 thousandths), bound to one node of
8 x H100-80GB through two extender replicas at once, every bind in its own thread as
kube-scheduler's binding goroutines call them, alternating replicas. The test
(\`ExtenderBindBurst\` in \`tests/integration/k8s_bind_burst_test.cc\`) asks all 56 bound within
10 s, none failed, and no GPU booked past its share or memory.

| run | bound | time | binds/s |
|---|---|---|---|
$burst_rows

Median: $burst_median per node.

With the node lock of the earlier protocol (lock, record, bind, unlock: src/k8s of commit
02692f4 with this test and fake API server, measured on this machine on 2026-11-27): 30, 30, 28,
28 and 27 of 56 bound in 5.2 s, median 5.4 binds/s; every other bind failed after waiting 5 s
for the lock. There a bind held the node for 8 API calls, 4 of them writes (about 100 ms at
20 ms a write). Now only the write of the node's pending bookings is made one at a time per node
and replica (with the read of the node and of its pods before it), binds that wait for it are
written together in the next one, and the pods' records and bindings are written in parallel.
Before binds that wait were written together (each bind its own write of the node: commit
ef2b0f8, measured the same way): 27.7 to 28.6 binds/s, median 28.2, all 56 bound in about 2.0 s.

## Reproduce

\`\`\`
bench/run_k8s_bench.sh            # builds into ./build and rewrites this file
build/bin/k8s_extender_bench --nodes=5000 --gpus=8 --pods=400 --fill=0.8
build/bin/k8s_bind_burst_test     # one bind burst
\`\`\`
DOC
echo "wrote docs/k8s-extender-benchmark.md" >&2
