#!/usr/bin/env bash
# The node service's benchmarks (issue 4): scheduling decision time with 10,000 queued jobs on 8
# simulated H100s (the scheduler alone), and submissions per second through a real gpufracd's
# API with the same queue depth. Usage: bench/run_node_bench.sh [extra benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
echo "== Scheduler alone: one Schedule() after each job end, 10,000 queued, 8 GPUs"
build/bin/node_scheduler_bench "$@"
echo "== gpufracd end to end: 10,000 submissions through the unix-socket API"
build/bin/node_api_bench "$@"
