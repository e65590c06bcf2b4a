// gpufrac mps enable|disable --gpu N (see mps_command.h).
#include "cli/mps_command.h"

#include <signal.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/service_client.h"
#include "common/text.h"

namespace gpufrac::cli {

MpsCommand::MpsCommand(CLI::App& app) {
  mps_ = app.add_subcommand("mps", "MPS: run a GPU's shares side by side, each on its SMs");
  mps_->require_subcommand(1);
  enable_ = mps_->add_subcommand("enable", "Put an idle GPU in MPS mode");
  disable_ = mps_->add_subcommand("disable", "Put an idle GPU back in shared (time-sliced) mode");
  for (CLI::App* cmd : {enable_, disable_}) {
    cmd->add_option("--gpu", gpu_, "GPU index")->required()->check(CLI::Range(0, 63));
    cmd->add_option("--socket", socket_, "The service's unix socket");
    cmd->add_flag("--json", json_, "Print JSON");
  }
  mps_->footer(
      "In MPS mode a GPU's jobs run at the same time, each on its compute limit's share of the\n"
      "SMs and its memory limit (one user's jobs at a time). See docs/sharing.md.");
}

bool MpsCommand::parsed() const { return mps_->parsed(); }

int MpsCommand::Run() {
  const char* prefix = enable_->parsed() ? "gpufrac mps enable" : "gpufrac mps disable";
  signal(SIGPIPE, SIG_IGN);
  auto client = ServiceClient::Connect(socket_);
  if (!client.ok()) {
    std::fprintf(stderr, "%s: %s\n", prefix, Printable(client.status().message()).c_str());
    return ExitCodeFor(client.status());
  }
  const bool on = enable_->parsed();
  auto r = (*client)->Post("/v1/gpus/" + std::to_string(gpu_) + "/mps",
                           nlohmann::json{{"enabled", on}});
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", prefix, Printable(r.status().message()).c_str());
    return ExitCodeFor(r.status());
  }
  if (json_) {
    std::printf("%s\n", r->dump(2).c_str());
  } else {
    std::printf("GPU %d: %s\n", gpu_,
                !r->value("changed", false) ? (on ? "already in MPS mode" : "already shared")
                : on                        ? "MPS mode"
                                            : "shared (MPS mode off)");
  }
  return 0;
}

}  // namespace gpufrac::cli
