#!/usr/bin/env bash
# Configures and builds gpufrac into ./build (installing build dependencies first).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUFRAC_FUZZ_TESTS=ON >/dev/null
cmake --build build -j"$(nproc)"
