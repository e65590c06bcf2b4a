// gpufrac mig enable|disable --gpu N, mig apply -f FILE [-c NAME], mig export [-c NAME].
#include "cli/mig_command.h"

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/service_client.h"
#include "common/text.h"
#include "mig/apply.h"
#include "mig/mig_parted.h"

namespace gpufrac::cli {
namespace {

using nlohmann::json;

int Fail(const char* command, const std::string& message, int code) {
  std::fprintf(stderr, "gpufrac mig %s: %s\n", command, Printable(message).c_str());
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
  const char* what = enable_->parsed()    ? "enable"
                     : disable_->parsed() ? "disable"
                     : apply_->parsed()   ? "apply"
                                          : "export";
  std::string yaml;
  if (apply_->parsed()) {
    // The file is read and checked here first: a typo is reported before a service is looked
    // for (or started). The service checks it again against its GPUs.
    std::ifstream in(file_);
    if (!in) return Fail(what, file_ + ": cannot read the file; check the path", 2);
    std::stringstream text;
    text << in.rdbuf();
    yaml = text.str();
    StatusOr<mig::MigPartedFile> parsed = mig::ParseMigParted(yaml, file_);
    if (!parsed.ok()) return Fail(what, parsed.status().message(), 2);
    StatusOr<const mig::MigPartedConfig*> chosen = mig::ChooseConfig(*parsed, config_);
    if (!chosen.ok()) return Fail(what, file_ + ": " + chosen.status().message(), 2);
  }
  signal(SIGPIPE, SIG_IGN);
  auto client = ServiceClient::Connect(socket_);
  if (!client.ok()) return Fail(what, client.status().message(), ExitCodeFor(client.status()));
  ServiceClient& c = **client;
  if (enable_->parsed() || disable_->parsed()) {
    bool on = enable_->parsed();
    auto r = c.Post("/v1/gpus/" + std::to_string(gpu_) + "/mig", json{{"enabled", on}});
    if (!r.ok()) return Fail(what, r.status().message(), ExitCodeFor(r.status()));
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
    auto r = c.Post("/v1/mig/apply", json{{"yaml", yaml}, {"config", config_}});
    if (!r.ok()) return Fail(what, file_ + ": " + r.status().message(), ExitCodeFor(r.status()));
    if (json_) {
      std::printf("%s\n", r->dump(2).c_str());
    } else {
      for (const json& line : (*r)["applied"]) std::printf("%s\n", line.get<std::string>().c_str());
    }
    return 0;
  }
  std::string name = config_.empty() ? "current" : config_;
  auto text = c.GetText("/v1/mig/export?name=" + name);
  if (!text.ok()) return Fail(what, text.status().message(), ExitCodeFor(text.status()));
  std::printf("%s", text->c_str());
  return 0;
}

}  // namespace gpufrac::cli
