// Queue file parsing with yaml-cpp. Every check reports the file and the line of the offending
// node, and unknown keys are errors (a typo must not silently mean "default").
#include "node/queue_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace gpufrac::node {
namespace {

class Checker {
 public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  Status Error(const YAML::Node& at, const std::string& message) const {
    int line = at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
    return InvalidArgumentError(source_ + (line > 0 ? ":" + std::to_string(line) : "") + ": " +
                                message);
  }

  // Fails on keys of `map` outside `allowed`.
  Status OnlyKeys(const YAML::Node& map, const std::set<std::string>& allowed,
                  const std::string& where) const {
    for (const auto& entry : map) {
      // A key that is a list or a map ("? [a]") has no name to check (as<> would throw).
      if (!entry.first.IsScalar() && !entry.first.IsNull()) {
        return Error(entry.first, "a key in " + where + " must be a plain name");
      }
      std::string key = entry.first.as<std::string>();
      if (!allowed.count(key)) {
        std::string list;
        for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return Error(entry.first,
                     "unknown key \"" + key + "\" in " + where + " (allowed: " + list + ")");
      }
    }
    return OkStatus();
  }

 private:
  std::string source_;
};

bool ValidQueueName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

StatusOr<GpuRequest> ParseRequest(const Checker& check, const YAML::Node& node) {
  if (!node.IsMap()) return check.Error(node, "default must be a map, e.g. {gpu-fraction: 0.25}");
  std::set<std::string> keys;
  for (const GpuRequestField& field : GpuRequestFields()) keys.emplace(field.name);
  GPUFRAC_RETURN_IF_ERROR(check.OnlyKeys(node, keys, "default"));
  GpuRequestText text;
  for (const GpuRequestField& field : GpuRequestFields()) {
    const std::string key(field.name);
    const YAML::Node value = node[key];
    if (!value || value.IsNull()) continue;
    // A list or a map where one value belongs must not silently mean "not given".
    if (!value.IsScalar()) return check.Error(value, "default: " + key + " must be one value");
    text.*field.text = value.Scalar();
  }
  StatusOr<GpuRequest> request = ParseGpuRequest(text);
  if (!request.ok()) return check.Error(node, "default: " + request.status().message());
  return request;
}

}  // namespace

StatusOr<QueueConfig> ParseQueueConfig(const std::string& yaml, const std::string& source) {
  Checker check(source);
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(source + ":" + std::to_string(e.mark.line + 1) +
                                ": not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) return check.Error(root, "expected a map with version and queues");
  GPUFRAC_RETURN_IF_ERROR(check.OnlyKeys(root, {"version", "queues"}, "the top level"));
  if (!root["version"] || !root["version"].IsScalar() || root["version"].Scalar() != "1") {
    return check.Error(root, "version must be 1 (write \"version: 1\" at the top)");
  }
  const YAML::Node queues = root["queues"];
  if (!queues || !queues.IsSequence() || queues.size() == 0) {
    return check.Error(root, "queues must be a list of at least one queue");
  }
  QueueConfig config;
  std::set<std::string> names;
  for (const YAML::Node& q : queues) {
    if (!q.IsMap()) return check.Error(q, "each queue must be a map with a name");
    GPUFRAC_RETURN_IF_ERROR(
        check.OnlyKeys(q, {"name", "default", "quota", "compute"}, "a queue"));
    QueueSpec spec;
    if (!q["name"] || !q["name"].IsScalar() || !ValidQueueName(q["name"].Scalar())) {
      return check.Error(q, "a queue needs a name of 1 to 63 characters from a-z, 0-9, _ and -");
    }
    spec.name = q["name"].Scalar();
    if (!names.insert(spec.name).second) {
      return check.Error(q["name"], "queue " + spec.name + " is defined twice");
    }
    if (q["default"]) {
      GPUFRAC_ASSIGN_OR_RETURN(spec.default_request, ParseRequest(check, q["default"]));
    } else {
      spec.default_request = DefaultQueueConfig().queues[0].default_request;
    }
    if (q["quota"]) {
      double quota = NAN;
      try {
        quota = q["quota"].as<double>();
      } catch (const YAML::Exception&) {
      }
      if (!(quota > 0 && quota <= 1)) {
        return check.Error(q["quota"], "quota of queue " + spec.name +
                                           " must be a share of the node's GPUs in (0, 1], "
                                           "e.g. 0.5");
      }
      spec.quota = quota;
    }
    if (q["compute"]) {
      const YAML::Node compute = q["compute"];
      spec.compute = compute.IsScalar() ? ParseComputePolicy(compute.Scalar()) : std::nullopt;
      if (!spec.compute) {
        return check.Error(compute, "compute of queue " + spec.name +
                                        " must be fair, strict or off");
      }
    }
    config.queues.push_back(std::move(spec));
  }
  return config;
}

StatusOr<QueueConfig> LoadQueueConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot open the queue file; check the path");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseQueueConfig(text.str(), path);
}

QueueConfig DefaultQueueConfig() {
  QueueSpec spec;
  spec.name = "default";
  spec.default_request = GpuRequest::Whole(1);
  return QueueConfig{{spec}};
}

}  // namespace gpufrac::node
