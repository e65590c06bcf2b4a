// gpufrac mig enable|disable --gpu N, mig apply -f FILE [-c NAME], mig export [-c NAME].
#include "cli/mig_command.h"

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/service_client.h"

namespace gpufrac::cli {
namespace {

using nlohmann::json;

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "gpufrac mig: %s\n", message.c_str());
  return code;
}

}  // namespace

MigCommand::MigCommand(CLI::App& app) {
  mig_ = app.add_subcommand("mig", "MIG: mode, mig-parted configurations, export");
  mig_->require_subcommand(1);
  auto common = [this](CLI::App* cmd) {
    cmd->add_option("--socket", socket_, "The service's unix socket");
    cmd->add_flag("--json", json_, "Print JSON");
  };
  enable_ = mig_->add_subcommand("enable", "Turn MIG mode on for an idle GPU");
  disable_ = mig_->add_subcommand("disable", "Turn MIG mode off for an idle GPU");
  for (CLI::App* cmd : {enable_, disable_}) {
    cmd->add_option("--gpu", gpu_, "GPU index")->required()->check(CLI::Range(0, 63));
    common(cmd);
  }
  apply_ = mig_->add_subcommand("apply", "Apply a configuration of a mig-parted file");
  apply_->add_option("-f,--file", file_, "The mig-parted file (version: v1)")->required();
  apply_->add_option("-c,--config", config_, "The configuration to apply (default: the only one)");
  common(apply_);
  export_ = mig_->add_subcommand("export", "Print the current layout as a mig-parted file");
  export_->add_option("-c,--config", config_, "Name of the configuration (default: current)");
  export_->add_option("--socket", socket_, "The service's unix socket");
}

bool MigCommand::parsed() const { return mig_->parsed(); }

int MigCommand::Run() {
  signal(SIGPIPE, SIG_IGN);
  auto client = ServiceClient::Connect(socket_);
  if (!client.ok()) return Fail(client.status().message(), ExitCodeFor(client.status()));
  ServiceClient& c = **client;
  if (enable_->parsed() || disable_->parsed()) {
    bool on = enable_->parsed();
    auto r = c.Post("/v1/gpus/" + std::to_string(gpu_) + "/mig", json{{"enabled", on}});
    if (!r.ok()) return Fail(r.status().message(), ExitCodeFor(r.status()));
    if (json_) {
      std::printf("%s\n", r->dump(2).c_str());
    } else if (r->value("reset_needed", false)) {
      std::printf("GPU %d: MIG mode %s once the GPU is reset (nvidia-smi -r -i %d, or reboot)\n",
                  gpu_, on ? "turns on" : "turns off", gpu_);
    } else {
      std::printf("GPU %d: MIG mode %s\n", gpu_, on ? "on" : "off");
    }
    return 0;
  }
  if (apply_->parsed()) {
    std::ifstream in(file_);
    if (!in) return Fail("cannot read " + file_, 2);
    std::stringstream text;
    text << in.rdbuf();
    auto r = c.Post("/v1/mig/apply", json{{"yaml", text.str()}, {"config", config_}});
    if (!r.ok()) return Fail(file_ + ": " + r.status().message(), ExitCodeFor(r.status()));
    if (json_) {
      std::printf("%s\n", r->dump(2).c_str());
    } else {
      for (const json& line : (*r)["applied"]) std::printf("%s\n", line.get<std::string>().c_str());
    }
    return 0;
  }
  std::string name = config_.empty() ? "current" : config_;
  auto text = c.GetText("/v1/mig/export?name=" + name);
  if (!text.ok()) return Fail(text.status().message(), ExitCodeFor(text.status()));
  std::printf("%s", text->c_str());
  return 0;
}

}  // namespace gpufrac::cli
