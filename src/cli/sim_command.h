// `gpufrac sim openb`: replays Alibaba's openb GPU trace against the placement policies under
// the FGD paper's protocol (or, with --timed, with arrivals and departures in time) and reports
// how much of the cluster's GPU capacity each policy leaves unallocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace gpufrac::cli {

struct SimOptions {
  std::string nodes;                  // --nodes FILE
  std::string pods;                   // --pods FILE
  std::vector<std::string> policies;  // --policy NAME[,NAME...] (repeatable)
  uint64_t seed = 42;                 // --seed N
  std::string seeds;                  // --seeds A-B (overrides --seed)
  double load = 1.3;                  // --load X: demand appended up to X x capacity
  bool json = false;                  // --json: one JSON object per run on stdout
  std::string curve;                  // --curve FILE: allocation curves as CSV
  std::string plot;                   // --plot FILE.png
  bool timed = false;                 // --timed: creation/deletion times, queue, retries
  double speedup = 1;                 // --speedup X: arrivals X times as fast (with --timed)
  int jobs = 0;                       // --jobs N: runs in parallel (0: one per core)
};

// Registers `sim` with its `openb` subcommand on `app`; `options` must outlive parsing.
CLI::App* AddSimCommand(CLI::App& app, SimOptions& options);

// Runs the simulation(s) and prints the report. Returns 0, 2 for bad input (one line on stderr),
// or 1 for other failures.
int RunSim(const SimOptions& options);

}  // namespace gpufrac::cli
