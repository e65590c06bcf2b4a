// The commands that talk to the node service: submit, run, ps, logs, cancel, status, queues.
// Every listing prints a table for people and, with --json, the API's JSON for machines; with
// --watch it is redrawn until Ctrl-C.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/gpu_request.h"

namespace gpufrac::cli {

struct JobCommandOptions {
  std::string socket;  // --socket PATH (else $GPUFRAC_SOCKET, else the default)
  bool json = false;   // --json
  // submit / run
  GpuRequestText request;
  std::string queue;
  std::string name;
  std::vector<std::string> command;
  // ps
  bool all = false;
  bool active = false;
  int limit = 50;
  // logs / cancel
  std::vector<int64_t> ids;
  bool follow = false;
  // ps / status / queues: --watch [SECONDS] (see watch.h)
  std::string watch;
};

class JobCommands {
 public:
  // Registers the subcommands on `app`.
  explicit JobCommands(CLI::App& app);
  // True when one of them was parsed.
  bool parsed() const;
  // Runs the parsed one; returns the process exit status (run: the job's own).
  int Run();

 private:
  JobCommandOptions o_;
  CLI::App* submit_;
  CLI::App* run_;
  CLI::App* ps_;
  CLI::App* logs_;
  CLI::App* cancel_;
  CLI::App* status_;
  CLI::App* queues_;
  std::vector<CLI::Option*> watch_flags_;  // --watch of ps, status and queues
};

}  // namespace gpufrac::cli
