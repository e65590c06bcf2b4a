// Parsing of the openb CSV files. The files are small (under 1 MB), so each is read whole and
// split into lines; columns are looked up by header name so that extra columns do not matter.
#include "sim/openb_trace.h"

#include <charconv>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace gpufrac::sim {
namespace {

using placement::kMaxGpusPerNode;
using placement::kMilli;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

// A CSV file with a header line, walked one data line at a time.
class CsvFile {
 public:
  static StatusOr<CsvFile> Open(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFoundError(path + ": cannot open the file; check the path");
    std::ostringstream text;
    text << in.rdbuf();
    CsvFile f;
    f.path_ = path;
    f.text_ = text.str();
    f.rest_ = f.text_;
    if (f.rest_.substr(0, 3) == "\xEF\xBB\xBF") f.rest_.remove_prefix(3);  // UTF-8 byte order mark
    std::string_view header;
    if (!f.NextLine(header)) {
      return InvalidArgumentError(path + ": the file is empty; expected a CSV header line");
    }
    f.header_ = SplitFields(header);
    return f;
  }

  // The index of the header column `name`, or nullopt.
  std::optional<size_t> Column(std::string_view name) const {
    for (size_t i = 0; i < header_.size(); ++i) {
      if (header_[i] == name) return i;
    }
    return std::nullopt;
  }
  StatusOr<size_t> RequiredColumn(std::string_view name) const {
    if (auto c = Column(name)) return *c;
    return InvalidArgumentError(path_ + ":1: the header has no \"" + std::string(name) +
                                "\" column");
  }

  // Moves to the next non-blank data line; false at the end. Checks its field count.
  StatusOr<bool> Next() {
    std::string_view line;
    do {
      if (!NextLine(line)) return false;
    } while (line.empty());
    fields_ = SplitFields(line);
    if (fields_.size() != header_.size()) {
      return Error("expected " + std::to_string(header_.size()) +
                   " comma-separated fields as in "
                   "the header, found " +
                   std::to_string(fields_.size()) + " (a truncated or malformed line)");
    }
    return true;
  }

  std::string_view Field(size_t column) const { return fields_[column]; }
  int line_number() const { return line_number_; }

  // The field as an integer in [min, max].
  StatusOr<int64_t> Integer(size_t column, int64_t min, int64_t max) const {
    std::string_view text = fields_[column];
    std::string name(header_[column]);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      return Error(name + " is \"" + std::string(text) + "\"; expected a whole number");
    }
    if (value < min || value > max) {
      return Error(name + " is " + std::to_string(value) + "; expected " + std::to_string(min) +
                   " to " + std::to_string(max));
    }
    return value;
  }

  Status Error(const std::string& message) const {
    return InvalidArgumentError(path_ + ":" + std::to_string(line_number_) + ": " + message);
  }

 private:
  bool NextLine(std::string_view& line) {
    if (rest_.empty()) return false;
    size_t nl = rest_.find('\n');
    line = rest_.substr(0, nl);
    rest_ = nl == std::string_view::npos ? std::string_view() : rest_.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_number_;
    return true;
  }

  std::string path_;
  std::string text_;
  std::string_view rest_;
  std::vector<std::string_view> header_;
  std::vector<std::string_view> fields_;
  int line_number_ = 0;
};

constexpr int64_t kMaxAmount = std::numeric_limits<int64_t>::max() / (1 << 21);

}  // namespace

StatusOr<NodeList> ReadOpenbNodes(const std::string& path) {
  GPUFRAC_ASSIGN_OR_RETURN(CsvFile f, CsvFile::Open(path));
  GPUFRAC_ASSIGN_OR_RETURN(size_t name_col, f.RequiredColumn("sn"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t cpu_col, f.RequiredColumn("cpu_milli"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t mem_col, f.RequiredColumn("memory_mib"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t gpu_col, f.RequiredColumn("gpu"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t model_col, f.RequiredColumn("model"));
  NodeList list;
  std::unordered_map<std::string, int> lines;  // Node name -> line it was first seen on.
  while (true) {
    GPUFRAC_ASSIGN_OR_RETURN(bool more, f.Next());
    if (!more) break;
    placement::NodeSpec n;
    n.name = std::string(f.Field(name_col));
    if (n.name.empty()) return f.Error("sn (the node name) is empty");
    auto [seen, added] = lines.emplace(n.name, f.line_number());
    if (!added) {
      return f.Error("node " + n.name + " is listed again (first on line " +
                     std::to_string(seen->second) + ")");
    }
    GPUFRAC_ASSIGN_OR_RETURN(int64_t cpu, f.Integer(cpu_col, 0, kMaxAmount));
    GPUFRAC_ASSIGN_OR_RETURN(int64_t mem, f.Integer(mem_col, 0, kMaxAmount));
    GPUFRAC_ASSIGN_OR_RETURN(int64_t gpus, f.Integer(gpu_col, 0, kMaxGpusPerNode));
    n.cpu_milli = static_cast<uint64_t>(cpu);
    n.memory_bytes = static_cast<uint64_t>(mem) * kMiB;
    n.gpu_count = static_cast<int>(gpus);
    std::string_view model = f.Field(model_col);
    if (n.gpu_count > 0) {
      if (model.empty()) return f.Error("model is empty on a node with GPUs");
      StatusOr<int> id = list.models.Intern(model);
      if (!id.ok()) return f.Error(id.status().message());
      n.model = *id;
    }
    list.nodes.push_back(std::move(n));
  }
  if (list.nodes.empty()) return InvalidArgumentError(path + ": no nodes after the header");
  return list;
}

StatusOr<PodList> ReadOpenbPods(const std::string& path, const placement::ModelNames& models) {
  GPUFRAC_ASSIGN_OR_RETURN(CsvFile f, CsvFile::Open(path));
  GPUFRAC_ASSIGN_OR_RETURN(size_t name_col, f.RequiredColumn("name"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t cpu_col, f.RequiredColumn("cpu_milli"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t mem_col, f.RequiredColumn("memory_mib"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t num_gpu_col, f.RequiredColumn("num_gpu"));
  GPUFRAC_ASSIGN_OR_RETURN(size_t milli_col, f.RequiredColumn("gpu_milli"));
  std::optional<size_t> spec_col = f.Column("gpu_spec");
  std::optional<size_t> created_col = f.Column("creation_time");
  std::optional<size_t> deleted_col = f.Column("deletion_time");
  PodList list;
  list.has_times = created_col && deleted_col;
  while (true) {
    GPUFRAC_ASSIGN_OR_RETURN(bool more, f.Next());
    if (!more) break;
    TracePod pod;
    pod.name = std::string(f.Field(name_col));
    if (pod.name.empty()) return f.Error("name is empty");
    placement::Request& r = pod.request;
    GPUFRAC_ASSIGN_OR_RETURN(int64_t cpu, f.Integer(cpu_col, 0, kMaxAmount));
    GPUFRAC_ASSIGN_OR_RETURN(int64_t mem, f.Integer(mem_col, 0, kMaxAmount));
    GPUFRAC_ASSIGN_OR_RETURN(int64_t gpus, f.Integer(num_gpu_col, 0, kMaxGpusPerNode));
    GPUFRAC_ASSIGN_OR_RETURN(int64_t milli, f.Integer(milli_col, 0, kMilli));
    r.cpu_milli = static_cast<uint64_t>(cpu);
    r.memory_bytes = static_cast<uint64_t>(mem) * kMiB;
    r.gpu_count = static_cast<uint32_t>(gpus);
    r.gpu_milli = static_cast<uint32_t>(milli);
    if (gpus == 0 && milli != 0)
      return f.Error("gpu_milli is " + std::to_string(milli) +
                     " but num_gpu is 0; set gpu_milli to 0");
    if (gpus > 0 && milli == 0)
      return f.Error("num_gpu is " + std::to_string(gpus) +
                     " but gpu_milli is 0; expected 1 to 1000");
    if (gpus > 1 && milli != kMilli) {
      return f.Error("a pod with " + std::to_string(gpus) + " GPUs has gpu_milli " +
                     std::to_string(milli) + "; multi-GPU pods take whole GPUs (1000)");
    }
    if (spec_col) {
      std::string_view spec = f.Field(*spec_col);
      while (!spec.empty()) {
        size_t bar = spec.find('|');
        std::string_view model = spec.substr(0, bar);
        std::optional<int> id = models.Find(model);
        if (!id) {
          std::string known;
          for (int m = 0; m < models.size(); ++m) known += (m ? ", " : "") + models.Name(m);
          return f.Error("gpu_spec names GPU model \"" + std::string(model) +
                         "\", which no node has (models: " + known + ")");
        }
        r.models |= placement::ModelSet{1} << *id;
        spec = bar == std::string_view::npos ? std::string_view() : spec.substr(bar + 1);
      }
    }
    if (list.has_times) {
      constexpr int64_t kMaxTime = std::numeric_limits<int64_t>::max() / 4;
      GPUFRAC_ASSIGN_OR_RETURN(pod.creation_time, f.Integer(*created_col, 0, kMaxTime));
      GPUFRAC_ASSIGN_OR_RETURN(pod.deletion_time, f.Integer(*deleted_col, 0, kMaxTime));
      if (pod.deletion_time < pod.creation_time) {
        return f.Error("deletion_time " + std::to_string(pod.deletion_time) +
                       " is before creation_time " + std::to_string(pod.creation_time));
      }
    }
    list.pods.push_back(std::move(pod));
  }
  if (list.pods.empty()) return InvalidArgumentError(path + ": no pods after the header");
  return list;
}

}  // namespace gpufrac::sim
