// Reading openb node and pod lists: good files load with the right units, and every kind of bad
// input is one error naming the file and line.
#include <gtest/gtest.h>

#include <fstream>

#include "scratch_dir.h"
#include "sim/openb_trace.h"

namespace gpufrac::sim {
namespace {

constexpr char kNodesHeader[] = "sn,cpu_milli,memory_mib,gpu,model\n";
constexpr char kPodsHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

class TraceFiles : public ::testing::Test {
 protected:
  gpufrac::testing::ScratchDir scratch_{"gpufrac-openb"};
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = scratch_.File(name);
    std::ofstream(path) << text;
    return path;
  }
  NodeList Nodes() {
    StatusOr<NodeList> n = ReadOpenbNodes(Write(
        "nodes.csv", std::string(kNodesHeader) + "a,64000,262144,2,P100\nb,96000,393216,8,G2\n"));
    EXPECT_TRUE(n.ok()) << n.status();
    return *n;
  }
  std::string PodError(const std::string& rows) {
    NodeList nodes = Nodes();
    std::string path = Write("pods.csv", std::string(kPodsHeader) + rows);
    StatusOr<PodList> p = ReadOpenbPods(path, nodes.models);
    EXPECT_FALSE(p.ok());
    std::string message = p.status().message();
    EXPECT_EQ(message.rfind(path, 0), 0u) << message;  // Starts with the file's path.
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message.substr(path.size());
  }
};

TEST_F(TraceFiles, ReadsNodesAndPodsWithTheirUnits) {
  NodeList nodes = Nodes();
  ASSERT_EQ(nodes.nodes.size(), 2u);
  EXPECT_EQ(nodes.nodes[1].gpu_count, 8);
  EXPECT_EQ(nodes.nodes[1].memory_bytes, uint64_t{393216} << 20);
  EXPECT_EQ(nodes.models.Name(nodes.nodes[1].model), "G2");
  StatusOr<PodList> pods =
      ReadOpenbPods(Write("pods.csv", std::string(kPodsHeader) +
                                          "p0,12000,16384,1,460,G2|P100,LS,Running,10,20,10\n"
                                          "p1,4000,2048,0,0,,BE,Failed,30,30,\n"
                                          "p2,8000,4096,8,1000,,LS,Running,40,90,40\n"),
                    nodes.models);
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->pods.size(), 3u);
  EXPECT_TRUE(pods->has_times);
  const placement::Request& r = pods->pods[0].request;
  EXPECT_EQ(r.gpu_milli, 460u);
  EXPECT_TRUE(r.SharesGpu());
  EXPECT_EQ(r.models, 0b11u);
  EXPECT_EQ(pods->pods[2].request.TotalGpuMilli(), 8000u);
  EXPECT_EQ(pods->pods[2].deletion_time, 90);
}

TEST_F(TraceFiles, MultiGpuFilesWithoutTimesAreAccepted) {
  NodeList nodes = Nodes();
  StatusOr<PodList> pods = ReadOpenbPods(
      Write("mg.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,2,1000\n"),
      nodes.models);
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_FALSE(pods->has_times);
}

TEST_F(TraceFiles, BadPodRowsNameTheLine) {
  EXPECT_EQ(PodError("p,1000,1024,1,500,,LS,Running,0,1,0\np,1000,1024,1,500\n"),
            ":3: expected 11 comma-separated fields as in the header, found 5 (a truncated or "
            "malformed line)");
  EXPECT_EQ(PodError("p,-5,1024,1,500,,LS,Running,0,1,0\n"),
            ":2: cpu_milli is -5; expected 0 to 4398046511103");
  EXPECT_EQ(PodError("p,1000,1024,1,1500,,LS,Running,0,1,0\n"),
            ":2: gpu_milli is 1500; expected 0 to 1000");
  EXPECT_EQ(PodError("p,1000,abc,1,500,,LS,Running,0,1,0\n"),
            ":2: memory_mib is \"abc\"; expected a whole number");
  EXPECT_NE(
      PodError("p,1000,1024,1,500,A100,LS,Running,0,1,0\n")
          .find(":2: gpu_spec names GPU model \"A100\", which no node has (models: P100, G2)"),
      std::string::npos);
  EXPECT_NE(PodError("p,1000,1024,2,500,,LS,Running,0,1,0\n").find("whole GPUs"),
            std::string::npos);
  EXPECT_NE(PodError("p,1000,1024,1,500,,LS,Running,9,1,0\n").find("before creation_time"),
            std::string::npos);
  EXPECT_EQ(PodError(""), ": no pods after the header");
}

TEST_F(TraceFiles, AcceptsAByteOrderMarkAndWindowsLineEnds) {
  StatusOr<NodeList> n = ReadOpenbNodes(Write(
      "bom.csv", "\xEF\xBB\xBFsn,cpu_milli,memory_mib,gpu,model\r\na,1000,1024,2,T4\r\n\r\n"));
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(n->nodes.size(), 1u);
  EXPECT_EQ(n->models.Name(n->nodes[0].model), "T4");
}

TEST_F(TraceFiles, ANodeListedTwiceIsRejected) {
  std::string path =
      Write("dup.csv", std::string(kNodesHeader) + "a,1,1,1,T4\nb,1,1,1,T4\na,1,1,1,T4\n");
  StatusOr<NodeList> n = ReadOpenbNodes(path);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), path + ":4: node a is listed again (first on line 2)");
}

TEST_F(TraceFiles, EmptyAndHeaderlessFilesAreRejected) {
  std::string empty = Write("empty.csv", "");
  StatusOr<NodeList> n = ReadOpenbNodes(empty);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), empty + ": the file is empty; expected a CSV header line");
  std::string no_model = Write("nomodel.csv", "sn,cpu_milli,memory_mib,gpu\na,1,1,1\n");
  n = ReadOpenbNodes(no_model);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), no_model + ":1: the header has no \"model\" column");
  n = ReadOpenbNodes(Write("neg.csv", std::string(kNodesHeader) + "a,1,1,-2,T4\n"));
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find(":2: gpu is -2; expected 0 to 32"), std::string::npos);
  n = ReadOpenbNodes("/nonexistent/nodes.csv");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("/nonexistent/nodes.csv: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace gpufrac::sim
