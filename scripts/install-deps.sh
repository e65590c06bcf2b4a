#!/usr/bin/env bash
# Installs the Debian 12 packages gpufrac builds with (idempotent; needs root or sudo).
set -euo pipefail
pkgs=(cmake make g++ pkg-config binutils strace libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev libcairo2-dev fonts-dejavu-core
      libyaml-cpp-dev libsqlite3-dev libmicrohttpd-dev libcpp-httplib-dev libssl-dev zlib1g-dev
      libbrotli-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler openssl
      clang-14 libclang-rt-14-dev  # clang and libFuzzer: the fuzz targets (tests/fuzz/)
      libslurm-dev slurmctld slurmd slurm-client munge)  # the Slurm plugin and its real-Slurm test
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "gpufrac: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
