// `gpufrac exec`: run one command under the memory limiter on one GPU, with no service running.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/gpu_request.h"

namespace gpufrac::cli {

struct ExecOptions {
  GpuRequestText request;  // --gpu-memory, --gpu-fraction, --gpus, --mig-profile, --gpu-model
  std::string gpu = "0";   // --gpu INDEX|UUID
  bool quiet = false;      // --quiet: no over-limit message from the limiter
  std::vector<std::string> command;
};

// Registers the subcommand on `app`; `options` must outlive parsing.
CLI::App* AddExecCommand(CLI::App& app, ExecOptions& options);

// Runs the command and returns the exit status gpufrac should exit with: the command's own; if a
// signal ended the command, gpufrac cleans up and ends itself with the same signal (a shell sees
// 128+N); 2 for bad input (after printing one line); 1 for other failures.
int RunExec(const ExecOptions& options);

}  // namespace gpufrac::cli
