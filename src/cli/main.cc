// The gpufrac command line: parses the subcommand and hands over to its implementation.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/demo_command.h"
#include "cli/exec_command.h"
#include "cli/job_commands.h"
#include "cli/k8s_command.h"
#include "cli/mig_command.h"
#include "cli/mps_command.h"
#include "cli/sim_command.h"
#include "cli/usage_errors.h"

int main(int argc, char** argv) {
  // Named, so that help says "Usage: gpufrac ..." however the program was called.
  CLI::App app{"gpufrac: share NVIDIA GPUs safely (memory limits, placement, MIG, MPS)", "gpufrac"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("gpufrac ") + GPUFRAC_VERSION);

  gpufrac::cli::ExecOptions exec;
  CLI::App* exec_cmd = gpufrac::cli::AddExecCommand(app, exec);
  gpufrac::cli::SimOptions sim;
  CLI::App* sim_cmd = gpufrac::cli::AddSimCommand(app, sim);
  gpufrac::cli::JobCommands jobs(app);
  gpufrac::cli::MigCommand mig(app);
  gpufrac::cli::MpsCommand mps(app);
  gpufrac::cli::K8sCommand k8s(app);
  gpufrac::cli::DemoOptions demo;
  CLI::App* demo_cmd = gpufrac::cli::AddDemoCommand(app, demo);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line saying what to fix; usage errors exit with 2.
    const std::vector<std::string> args(argv + 1, argv + argc);
    std::fprintf(stderr, "%s\n", gpufrac::cli::ExplainParseError(app, e, args).c_str());
    return 2;
  }
  if (exec_cmd->parsed()) return gpufrac::cli::RunExec(exec);
  if (sim_cmd->parsed()) return gpufrac::cli::RunSim(sim);
  if (jobs.parsed()) return jobs.Run();
  if (mig.parsed()) return mig.Run();
  if (mps.parsed()) return mps.Run();
  if (k8s.parsed()) return k8s.Run();
  if (demo_cmd->parsed()) return gpufrac::cli::RunDemo(demo);
  return 2;
}
