// `gpufrac sim openb` as a user runs it: JSON fields, the curve CSV and the plot, the timed mode,
// and bad input answered with one line and exit status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "harness.h"
#include "scratch_dir.h"
#include "nlohmann/json.hpp"

namespace gpufrac::testing {
namespace {

const std::string kGpufrac = std::string(GPUFRAC_BUILD_DIR) + "/bin/gpufrac";

class SimCli : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = scratch_.File(name);
    std::ofstream(path) << text;
    return path;
  }
  void SetUp() override {
    nodes_ = Write("nodes.csv",
                   "sn,cpu_milli,memory_mib,gpu,model\n"
                   "a,64000,262144,2,T4\nb,96000,393216,8,G2\nc,32000,131072,4,T4\n");
    std::string pods =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n";
    for (int i = 0; i < 40; ++i) {
      int milli = i % 4 == 0 ? 1000 : 250 + 100 * (i % 5);
      pods += "p" + std::to_string(i) + ",2000,4096,1," + std::to_string(milli) +
              (i % 7 == 0 ? ",T4" : ",") + ",LS,Running," + std::to_string(10 * i) + "," +
              std::to_string(10 * i + 35) + ",0\n";
    }
    pods_ = Write("pods.csv", pods);
  }
  RunResult Sim(std::vector<std::string> args) {
    std::vector<std::string> argv = {kGpufrac, "sim", "openb"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, {});
  }
  ScratchDir scratch_{"gpufrac-simcli"};
  std::string nodes_, pods_;
};

TEST_F(SimCli, JsonHasOneObjectPerRunWithTheHeadlineFields) {
  RunResult r = Sim({"--nodes", nodes_, "--pods", pods_, "--policy", "fgd,bestfit", "--seeds",
                     "1-3", "--json", "--jobs", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["policy"], count < 3 ? "fgd" : "bestfit");
    EXPECT_EQ(j["seed"], 1 + count % 3);
    for (const char* key : {"unallocated_gpu_pct_at_100", "allocated_pct_final", "pods_total",
                            "pods_failed", "elapsed_s"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    // 14 GPUs and 1.3x load: the run ends short of capacity, with pods failing.
    EXPECT_GT(j["pods_failed"].get<int>(), 0);
    EXPECT_LE(j["allocated_pct_final"].get<double>(), 100.0);
  }
  EXPECT_EQ(count, 6);
}

TEST_F(SimCli, WritesTheCurveAndThePlot) {
  std::string curve = scratch_.File("curve.csv");
  std::string plot = scratch_.File("plot.png");
  RunResult r = Sim({"--nodes", nodes_, "--pods", pods_, "--policy", "gpufrac,random", "--seed",
                     "5", "--curve", curve, "--plot", plot});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(curve);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header, "policy,seed,arrived_pct,allocated_pct,unallocated_pct");
  int gpufrac_rows = 0, random_rows = 0;
  for (std::string line; std::getline(in, line);) {
    gpufrac_rows += line.rfind("gpufrac,5,", 0) == 0;
    random_rows += line.rfind("random,5,", 0) == 0;
  }
  // One row per whole percent of arrived demand reached (the trace is ~2 GPUs' worth per pod).
  EXPECT_GT(gpufrac_rows, 20);
  EXPECT_EQ(gpufrac_rows, random_rows);
  std::ifstream png(plot, std::ios::binary);
  char magic[4] = {};
  png.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
}

TEST_F(SimCli, TimedModeReportsWaitsAndAllocation) {
  RunResult r = Sim({"--nodes", nodes_, "--pods", pods_, "--timed", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mode"], "timed");
  EXPECT_EQ(j["pods_total"], 40);
  EXPECT_EQ(j["pods_placed"].get<int>() + j["pods_never_placed"].get<int>(), 40);
  EXPECT_GT(j["time_avg_allocated_pct"].get<double>(), 0.0);
  EXPECT_TRUE(j.contains("p99_wait_s"));
}

TEST_F(SimCli, LoadZeroKeepsThePodsAndALastSeedAtTheTopOfTheRangeEnds) {
  RunResult r = Sim({"--nodes", nodes_, "--pods", pods_, "--load", "0", "--json", "--seeds",
                     "18446744073709551614-18446744073709551615"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["pods_total"], 40);
}

TEST_F(SimCli, OneNumberGivenToSeedsIsOneRunWithThatSeed) {
  RunResult r = Sim({"--nodes", nodes_, "--pods", pods_, "--seeds", "1000", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line)) << r.out;
  EXPECT_EQ(nlohmann::json::parse(line)["seed"], 1000);
  EXPECT_FALSE(std::getline(lines, line)) << "one run only: " << r.out;
}

TEST_F(SimCli, BadInputIsOneLineAndExitStatusTwo) {
  std::string bad = Write("bad.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,2000\n");
  std::string multi =
      Write("multi.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,1000\n");
  std::string empty = Write("empty.csv", "");
  std::string cpu_only =
      Write("cpu.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0,0\n");
  std::string no_gpus = Write("nogpu.csv", "sn,cpu_milli,memory_mib,gpu,model\na,1000,1024,0,\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nodes", nodes_, "--pods", bad}, bad + ":2: gpu_milli is 2000; expected 0 to 1000"},
      {{"--nodes", empty, "--pods", pods_}, empty + ": the file is empty"},
      {{"--nodes", nodes_, "--pods", pods_, "--policy", "tetris"}, "unknown policy \"tetris\""},
      {{"--nodes", nodes_, "--pods", pods_, "--seeds", "9-3"}, "--seeds is \"9-3\""},
      {{"--nodes", nodes_, "--pods", multi, "--timed"}, "--timed needs creation_time"},
      {{"--nodes", nodes_}, "--pods is required"},
      {{"--nodes", nodes_, "--pods", cpu_only}, "the pods ask for no GPUs"},
      {{"--nodes", no_gpus, "--pods", pods_}, no_gpus + ": no node has GPUs"},
      {{"--nodes", nodes_, "--pods", pods_, "--curve", "/nonexistent-dir/c.csv"},
       "cannot write /nonexistent-dir/c.csv"},
      {{"--nodes", nodes_, "--pods", pods_, "--load", "nan"}, "must be numbers"},
      {{"--nodes", nodes_, "--pods", pods_, "--seeds", "18446744073709551615-2"}, "--seeds"},
      {{"--nodes", nodes_, "--pods", pods_, "--seeds", "ten"}, "give one seed (42) or a range"},
  };
  for (const auto& [args, expected] : cases) {
    RunResult r = Sim(args);
    EXPECT_EQ(r.status, 2) << expected;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace gpufrac::testing
