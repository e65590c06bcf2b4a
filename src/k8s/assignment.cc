// The assignment document (pod annotation gpufrac.io/assignment) to and from JSON.
#include "k8s/assignment.h"

#include <nlohmann/json.hpp>

#include "k8s/json_fields.h"

namespace gpufrac::k8s {

using nlohmann::json;

namespace {

// A grant's compute pair: 1 <= request_milli <= limit_milli <= 1000.
StatusOr<ComputePair> ComputePairFromJson(const json& object, const std::string& at) {
  const std::string where = at + ".compute";
  ComputePair pair;
  GPUFRAC_ASSIGN_OR_RETURN(pair.request_milli, JsonField<uint32_t>(object, "request_milli", where));
  GPUFRAC_ASSIGN_OR_RETURN(pair.limit_milli, JsonField<uint32_t>(object, "limit_milli", where));
  if (pair.request_milli == 0 || pair.request_milli > pair.limit_milli || pair.limit_milli > 1000) {
    return InvalidArgumentError(where + " is " + std::to_string(pair.request_milli) + " to " +
                                std::to_string(pair.limit_milli) +
                                "; expected 1 <= request_milli <= limit_milli <= 1000");
  }
  return pair;
}

}  // namespace

json AssignmentToJson(const Assignment& a) {
  json containers = json::array();
  for (const ContainerAssignment& c : a.containers) {
    json gpus = json::array();
    for (const GpuGrant& g : c.gpus) {
      json gpu = {{"index", g.index},
                  {"uuid", g.uuid},
                  {"milli", g.milli},
                  {"memory_bytes", g.memory_bytes}};
      if (g.mig) {
        gpu["mig"] = {{"profile", g.mig->profile}, {"start", g.mig->start}, {"size", g.mig->size}};
      }
      if (g.compute) {
        gpu["compute"] = {{"request_milli", g.compute->request_milli},
                          {"limit_milli", g.compute->limit_milli}};
      }
      gpus.push_back(std::move(gpu));
    }
    json entry = {{"name", c.container}, {"gpus", std::move(gpus)}};
    if (!c.device_plugin) entry["device_plugin"] = false;
    if (c.compute_limit_milli) entry["compute_limit_milli"] = *c.compute_limit_milli;
    if (!c.mps_user.empty()) entry["mps_user"] = c.mps_user;
    containers.push_back(std::move(entry));
  }
  json document = {{"version", 1},
                   {"node", a.node},
                   {"time_ms", a.time_ms},
                   {"containers", std::move(containers)}};
  if (a.compute_policy) document["compute_policy"] = ComputePolicyName(*a.compute_policy);
  return document;
}

StatusOr<Assignment> AssignmentFromJson(const json& document) {
  const std::string where = "gpufrac.io/assignment";
  GPUFRAC_ASSIGN_OR_RETURN(int version, JsonField<int>(document, "version", where));
  if (version != 1) {
    return InvalidArgumentError(where + ".version is " + std::to_string(version) +
                                "; this gpufrac reads version 1");
  }
  Assignment a;
  GPUFRAC_ASSIGN_OR_RETURN(a.node, JsonField<std::string>(document, "node", where));
  const int64_t zero = 0;
  GPUFRAC_ASSIGN_OR_RETURN(a.time_ms, JsonField<int64_t>(document, "time_ms", where, &zero));
  const std::string no_policy;
  GPUFRAC_ASSIGN_OR_RETURN(std::string policy,
                           JsonField<std::string>(document, "compute_policy", where, &no_policy));
  if (!policy.empty()) {
    a.compute_policy = ParseComputePolicy(policy);
    if (!a.compute_policy) {
      return InvalidArgumentError(where + ".compute_policy is \"" + policy +
                                  "\"; expected fair, strict or off");
    }
  }
  GPUFRAC_ASSIGN_OR_RETURN(json containers, JsonField<json>(document, "containers", where));
  if (!containers.is_array()) return InvalidArgumentError(where + ".containers is not a list");
  for (size_t i = 0; i < containers.size(); ++i) {
    const std::string at = where + ".containers[" + std::to_string(i) + "]";
    ContainerAssignment c;
    GPUFRAC_ASSIGN_OR_RETURN(c.container, JsonField<std::string>(containers[i], "name", at));
    const bool yes = true;
    GPUFRAC_ASSIGN_OR_RETURN(c.device_plugin,
                             JsonField<bool>(containers[i], "device_plugin", at, &yes));
    // Absent: none asked.
    if (containers[i].contains("compute_limit_milli")) {
      GPUFRAC_ASSIGN_OR_RETURN(uint32_t limit,
                               JsonField<uint32_t>(containers[i], "compute_limit_milli", at));
      if (limit == 0 || limit > 1000) {
        return InvalidArgumentError(at + ".compute_limit_milli is " + std::to_string(limit) +
                                    "; expected 1 to 1000 (thousandths of the GPU's time)");
      }
      c.compute_limit_milli = limit;
    }
    const std::string nobody;
    GPUFRAC_ASSIGN_OR_RETURN(c.mps_user,
                             JsonField<std::string>(containers[i], "mps_user", at, &nobody));
    GPUFRAC_ASSIGN_OR_RETURN(json gpus, JsonField<json>(containers[i], "gpus", at));
    if (!gpus.is_array() || gpus.empty()) return InvalidArgumentError(at + ".gpus is empty");
    for (size_t k = 0; k < gpus.size(); ++k) {
      const std::string g_at = at + ".gpus[" + std::to_string(k) + "]";
      GpuGrant g;
      GPUFRAC_ASSIGN_OR_RETURN(g.index, JsonField<int>(gpus[k], "index", g_at));
      GPUFRAC_ASSIGN_OR_RETURN(g.uuid, JsonField<std::string>(gpus[k], "uuid", g_at));
      GPUFRAC_ASSIGN_OR_RETURN(g.milli, JsonField<uint32_t>(gpus[k], "milli", g_at));
      GPUFRAC_ASSIGN_OR_RETURN(g.memory_bytes, JsonField<uint64_t>(gpus[k], "memory_bytes", g_at));
      if (gpus[k].contains("mig")) {
        const json& m = gpus[k]["mig"];
        MigGrant mig;
        GPUFRAC_ASSIGN_OR_RETURN(mig.profile, JsonField<std::string>(m, "profile", g_at + ".mig"));
        GPUFRAC_ASSIGN_OR_RETURN(mig.start, JsonField<int>(m, "start", g_at + ".mig"));
        GPUFRAC_ASSIGN_OR_RETURN(mig.size, JsonField<int>(m, "size", g_at + ".mig"));
        g.mig = std::move(mig);
      }
      if (gpus[k].contains("compute")) {
        GPUFRAC_ASSIGN_OR_RETURN(g.compute, ComputePairFromJson(gpus[k]["compute"], g_at));
      }
      if (g.index < 0 || g.milli == 0 || g.milli > 1000) {
        return InvalidArgumentError(g_at + " has an impossible GPU index or share");
      }
      c.gpus.push_back(std::move(g));
    }
    a.containers.push_back(std::move(c));
  }
  return a;
}

}  // namespace gpufrac::k8s
