// `gpufrac demo`: the node service at work on simulated GPUs, on any machine, in a temporary
// directory that is removed afterwards.
#pragma once

#include "CLI/CLI.hpp"

namespace gpufrac::cli {

struct DemoOptions {
  std::string sim = "2xH100-80GB,1xA30-24GB,1xA100-40GB:mig";  // --sim
  bool keep = false;  // --keep: leave the directory for inspection
};

CLI::App* AddDemoCommand(CLI::App& app, DemoOptions& options);
int RunDemo(const DemoOptions& options);

}  // namespace gpufrac::cli
