// `gpufrac` given a command line it cannot use: one line on stderr that names the command, the
// word it does not know and the commands it does, and exit status 2; nothing on stdout.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "harness.h"
#include "scratch_dir.h"

namespace gpufrac::testing {
namespace {

RunResult Gpufrac(std::vector<std::string> args) {
  args.insert(args.begin(), std::string(GPUFRAC_BUILD_DIR) + "/bin/gpufrac");
  return RunCommand(args, {});
}

void ExpectUsageError(const std::vector<std::string>& args, const std::string& expected) {
  RunResult r = Gpufrac(args);
  EXPECT_EQ(r.status, 2) << expected;
  EXPECT_EQ(r.err, expected + "\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliUsage, AnUnknownCommandIsNamedWithTheCommandsThatExist) {
  ExpectUsageError({"bogus"},
                   "gpufrac: 'bogus' is not a gpufrac command; commands: exec, sim, submit, run, "
                   "ps, logs, cancel, status, queues, mig, mps, k8s, demo (see gpufrac --help)");
  ExpectUsageError({"mig", "mode"},
                   "gpufrac mig: 'mode' is not a gpufrac mig command; commands: enable, disable, "
                   "apply, export (see gpufrac mig --help)");
  // Options before the word, and their values, are not taken for commands.
  ExpectUsageError({"k8s", "agnet", "--node", "n1"},
                   "gpufrac k8s: 'agnet' is not a gpufrac k8s command; commands: agent, extender "
                   "(see gpufrac k8s --help)");
}

TEST(CliUsage, AMissingCommandListsTheChoices) {
  ExpectUsageError({},
                   "gpufrac: a command is needed: exec, sim, submit, run, ps, logs, cancel, "
                   "status, queues, mig, mps, k8s, demo (see gpufrac --help)");
  ExpectUsageError({"mps"},
                   "gpufrac mps: a command is needed: enable, disable (see gpufrac mps "
                   "--help)");
}

TEST(CliUsage, AnErrorInsideACommandPointsAtThatCommandsHelp) {
  ExpectUsageError({"logs"}, "gpufrac logs: id is required (see gpufrac logs --help)");
  ExpectUsageError({"status", "--socket"},
                   "gpufrac status: --socket: 1 required TEXT missing (see gpufrac status --help)");
  ExpectUsageError({"logs", "twelve"},
                   "gpufrac logs: id is \"twelve\"; expected a whole number "
                   "(see gpufrac logs --help)");
  ExpectUsageError({"demo", "--bogus"},
                   "gpufrac demo: The following argument was not expected: "
                   "--bogus (see gpufrac demo --help)");
}

TEST(CliUsage, AMigFileIsCheckedBeforeAnyServiceIsLookedFor) {
  // No service runs and none may be started: the file's own errors come first.
  RunResult missing = Gpufrac(
      {"mig", "apply", "-f", "/nonexistent/mig.yaml", "--socket", "/nonexistent/gpufracd.sock"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err,
            "gpufrac mig apply: /nonexistent/mig.yaml: cannot read the file; check the path\n");
  ScratchDir scratch("gpufrac-cli-usage");
  const std::string path = scratch.File("mig.yaml");
  std::ofstream(path) << "version: v1\nmig-configs:\n  a:\n    - devices: all\n"
                         "      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n";
  RunResult unknown =
      Gpufrac({"mig", "apply", "-f", path, "-c", "b", "--socket", "/nonexistent/gpufracd.sock"});
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("gpufrac mig apply: " + path + ": "), std::string::npos)
      << unknown.err;
  EXPECT_NE(unknown.err.find("no configuration b in the file (it has: a)"), std::string::npos)
      << unknown.err;
  EXPECT_EQ(unknown.err.find("gpufracd"), std::string::npos) << unknown.err;
}

TEST(CliUsage, HelpNamesTheProgramAsUsersTypeIt) {
  RunResult help = Gpufrac({"exec", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out.find("Usage: gpufrac exec [OPTIONS]"), help.out.find("Usage:")) << help.out;
  EXPECT_NE(help.out.find("Usage: gpufrac exec"), std::string::npos) << help.out;
}

TEST(CliUsage, AWordWithControlCharactersIsShownEscaped) {
  RunResult r = Gpufrac({"\x1b[2Jx"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'\\x1b[2Jx' is not a gpufrac command"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace gpufrac::testing
