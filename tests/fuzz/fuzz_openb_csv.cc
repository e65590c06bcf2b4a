// The openb trace reader (sim/openb_trace.h): the input is a node list, and after a line "%%" a
// pod list (read against the node list's models, or the trace's own seven models when the node
// list is refused). Any text either reads or is one error naming the file; what reads keeps the
// reader's promises (GPU counts, shares, times, models that exist), and a node list written out
// again as CSV reads back to the same nodes.
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_support.h"
#include "sim/openb_trace.h"

namespace gpufrac::sim {
namespace {

// The readers take a path: each input is written to an in-memory file, read by its /proc name.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, 0)) {
    FUZZ_CHECK(fd_ >= 0, "memfd_create");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& Holding(std::string_view text) {
    FUZZ_CHECK(ftruncate(fd_, 0) == 0, "ftruncate");
    FUZZ_CHECK(pwrite(fd_, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()),
               "pwrite");
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

void CheckError(const Status& status, const std::string& path) {
  FUZZ_CHECK(status.message().rfind(path, 0) == 0, status.message());
}

void CheckNodes(const NodeList& list, const std::string& path) {
  FUZZ_CHECK(!list.nodes.empty(), path);
  // Names first and numbers last, so a name never ends a line (a '\r' there would be taken for a
  // Windows line end).
  std::string csv = "model,sn,cpu_milli,memory_mib,gpu\n";
  for (const placement::NodeSpec& n : list.nodes) {
    FUZZ_CHECK(n.gpu_count >= 0 && n.gpu_count <= placement::kMaxGpusPerNode, n.name);
    FUZZ_CHECK(n.gpu_count == 0 ? n.model == -1 : n.model >= 0 && n.model < list.models.size(),
               n.name);
    FUZZ_CHECK(n.memory_bytes % (uint64_t{1} << 20) == 0, n.name);
    csv += (n.model >= 0 ? list.models.Name(n.model) : "") + "," + n.name + "," +
           std::to_string(n.cpu_milli) + "," + std::to_string(n.memory_bytes >> 20) + "," +
           std::to_string(n.gpu_count) + "\n";
  }
  static MemFile again("fuzz_openb_again");
  StatusOr<NodeList> back = ReadOpenbNodes(again.Holding(csv));
  FUZZ_CHECK(back.ok(), csv + back.status().message());
  FUZZ_CHECK(back->nodes.size() == list.nodes.size(), csv);
  for (size_t i = 0; i < list.nodes.size(); ++i) {
    const placement::NodeSpec& a = list.nodes[i];
    const placement::NodeSpec& b = back->nodes[i];
    FUZZ_CHECK(
        a.name == b.name && a.cpu_milli == b.cpu_milli && a.memory_bytes == b.memory_bytes &&
            a.gpu_count == b.gpu_count &&
            (a.model < 0 ? b.model < 0 : list.models.Name(a.model) == back->models.Name(b.model)),
        csv);
  }
}

void CheckPods(const PodList& list, const placement::ModelNames& models) {
  FUZZ_CHECK(!list.pods.empty(), "no pods");
  const placement::ModelSet known =
      models.size() >= 64 ? ~placement::ModelSet{0} : (placement::ModelSet{1} << models.size()) - 1;
  for (const TracePod& pod : list.pods) {
    const placement::Request& r = pod.request;
    FUZZ_CHECK(!pod.name.empty() && r.gpu_milli <= placement::kMilli, pod.name);
    FUZZ_CHECK((r.gpu_count == 0) == (r.gpu_milli == 0), pod.name);
    FUZZ_CHECK(r.gpu_count <= 1 || r.gpu_milli == placement::kMilli, pod.name);
    FUZZ_CHECK((r.models & ~known) == 0, pod.name);
    FUZZ_CHECK(pod.deletion_time >= pod.creation_time && pod.creation_time >= 0, pod.name);
  }
}

}  // namespace
}  // namespace gpufrac::sim

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufrac::sim;
  using gpufrac::StatusOr;
  static MemFile nodes_file("fuzz_openb_nodes"), pods_file("fuzz_openb_pods");
  static const gpufrac::placement::ModelNames kTraceModels = [] {
    gpufrac::placement::ModelNames models;
    for (const char* m : {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}) {
      (void)models.Intern(m);
    }
    return models;
  }();

  std::string_view text = gpufrac::fuzz::AsText(data, size);
  std::string_view pods_text;
  if (size_t split = text.find("\n%%\n"); split != std::string_view::npos) {
    pods_text = text.substr(split + 4);
    text = text.substr(0, split + 1);
  }

  const std::string& nodes_path = nodes_file.Holding(text);
  StatusOr<NodeList> nodes = ReadOpenbNodes(nodes_path);
  if (nodes.ok()) {
    CheckNodes(*nodes, nodes_path);
  } else {
    CheckError(nodes.status(), nodes_path);
  }
  const gpufrac::placement::ModelNames& models = nodes.ok() ? nodes->models : kTraceModels;
  const std::string& pods_path = pods_file.Holding(pods_text);
  StatusOr<PodList> pods = ReadOpenbPods(pods_path, models);
  if (pods.ok()) {
    CheckPods(*pods, models);
  } else {
    CheckError(pods.status(), pods_path);
  }
  return 0;
}
