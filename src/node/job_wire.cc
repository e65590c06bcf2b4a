// The job's JSON shape, written and read in one place (see job_wire.h).
#include "node/job_wire.h"

#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

namespace gpufrac::node {
namespace {

using nlohmann::json;

// Reads `key` of `j` into `out`; a missing key keeps the default unless `required`.
template <typename T>
Status Read(const json& j, const char* key, T* out, bool required = true) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? InvalidArgumentError(std::string("the job has no \"") + key + "\"")
                    : OkStatus();
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // get<T> converts a number with a plain cast: from a float or from an integer out of T's
    // range, that is undefined behaviour or another number.
    const bool fits = it->is_number_unsigned()  ? std::in_range<T>(it->get<uint64_t>())
                      : it->is_number_integer() ? std::in_range<T>(it->get<int64_t>())
                                                : !it->is_number_float();
    if (!fits) {
      return InvalidArgumentError(std::string("the job's \"") + key +
                                  "\" is not a whole number in range");
    }
  }
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return InvalidArgumentError(std::string("the job's \"") + key + "\" has the wrong type");
  }
  return OkStatus();
}

// A missing key, or null, is nullopt.
template <typename T>
Status ReadOptional(const json& j, const char* key, std::optional<T>* out) {
  if (auto it = j.find(key); it == j.end() || it->is_null()) return OkStatus();
  T value{};
  GPUFRAC_RETURN_IF_ERROR(Read(j, key, &value));
  *out = std::move(value);
  return OkStatus();
}

}  // namespace

JobWire JobWire::Of(const Job& job, const std::string& wait_reason) {
  JobWire w;
  w.id = job.id;
  w.name = job.spec.name;
  w.queue = job.spec.queue;
  w.user = job.spec.user;
  w.uid = job.spec.uid;
  w.state = job.state;
  w.request = FormatGpuRequest(job.spec.request);
  w.command = job.spec.command;
  w.cwd = job.spec.cwd;
  w.submitted_ms = job.submitted_ms;
  w.started_ms = job.started_ms;
  w.ended_ms = job.ended_ms;
  for (const GpuGrant& g : job.gpus) {
    w.gpus.push_back({g.index, g.uuid, g.milli / 1000.0, g.memory_bytes,
                      g.compute ? std::optional(g.compute->limit_milli / 1000.0) : std::nullopt});
  }
  w.cancel_requested = job.cancel_requested;
  if (IsFinal(job.state)) {
    w.exit_code = job.exit_code;
    w.signal = job.signal;
    w.reason = job.reason;
  }
  w.waiting_for = wait_reason;
  return w;
}

json JobWire::ToJson() const {
  json gpu_list = json::array();
  for (const Gpu& g : gpus) {
    gpu_list.push_back({{"index", g.index},
                        {"uuid", g.uuid},
                        {"share", g.share},
                        {"memory_limit", g.memory_limit},
                        {"compute_limit", g.compute_limit ? json(*g.compute_limit) : json(nullptr)}});
  }
  json j = {{"id", id},
            {"name", name},
            {"queue", queue},
            {"user", user},
            {"uid", uid},
            {"state", std::string(JobStateName(state))},
            {"request", request},
            {"command", command},
            {"cwd", cwd},
            {"submitted_ms", submitted_ms},
            {"started_ms", started_ms},
            {"ended_ms", ended_ms},
            {"gpus", gpu_list},
            {"cancel_requested", cancel_requested}};
  if (exit_code) j["exit_code"] = *exit_code;
  if (signal) j["signal"] = *signal;
  if (reason) j["reason"] = *reason;
  if (!waiting_for.empty()) j["waiting_for"] = waiting_for;
  return j;
}

StatusOr<JobWire> JobWire::FromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("the job is not a JSON object");
  JobWire w;
  std::string state;
  GPUFRAC_RETURN_IF_ERROR(Read(j, "id", &w.id));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "state", &state));
  std::optional<JobState> parsed = ParseJobState(state);
  if (!parsed) return InvalidArgumentError("the job's state \"" + state + "\" is unknown");
  w.state = *parsed;
  GPUFRAC_RETURN_IF_ERROR(Read(j, "name", &w.name, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "queue", &w.queue, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "user", &w.user, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "uid", &w.uid, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "request", &w.request, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "command", &w.command, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "cwd", &w.cwd, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "submitted_ms", &w.submitted_ms, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "started_ms", &w.started_ms, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "ended_ms", &w.ended_ms, false));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "cancel_requested", &w.cancel_requested, false));
  GPUFRAC_RETURN_IF_ERROR(ReadOptional(j, "exit_code", &w.exit_code));
  GPUFRAC_RETURN_IF_ERROR(ReadOptional(j, "signal", &w.signal));
  GPUFRAC_RETURN_IF_ERROR(ReadOptional(j, "reason", &w.reason));
  GPUFRAC_RETURN_IF_ERROR(Read(j, "waiting_for", &w.waiting_for, false));
  if (auto gpus = j.find("gpus"); gpus != j.end() && gpus->is_array()) {
    for (const json& g : *gpus) {
      Gpu gpu;
      GPUFRAC_RETURN_IF_ERROR(Read(g, "index", &gpu.index));
      GPUFRAC_RETURN_IF_ERROR(Read(g, "uuid", &gpu.uuid, false));
      GPUFRAC_RETURN_IF_ERROR(Read(g, "share", &gpu.share, false));
      GPUFRAC_RETURN_IF_ERROR(Read(g, "memory_limit", &gpu.memory_limit, false));
      GPUFRAC_RETURN_IF_ERROR(ReadOptional(g, "compute_limit", &gpu.compute_limit));
      w.gpus.push_back(std::move(gpu));
    }
  }
  return w;
}

std::string JobWire::Note() const {
  if (!waiting_for.empty()) return waiting_for;
  return reason.value_or("");
}

int JobWire::ExitStatus() const {
  if (state == JobState::kSucceeded) return 0;
  if (signal.value_or(0) > 0) return 128 + *signal;
  if (state == JobState::kFailed && exit_code.value_or(0) > 0) return *exit_code;
  return 1;
}

}  // namespace gpufrac::node
