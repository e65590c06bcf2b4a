// A job as the node API sends it (submit and cancel answers, GET /v1/jobs/{id}, job lists): one
// type that the service writes and the command line reads, so that neither spells the JSON keys
// on its own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "node/job.h"

namespace gpufrac::node {

struct JobWire {
  struct Gpu {
    int index = 0;
    std::string uuid;
    double share = 0;           // Of the GPU, 0..1 (of its time: the compute request).
    uint64_t memory_limit = 0;  // Bytes.
    // The most of the GPU's time it may take, 0..1; nullopt (JSON null) where its time is not
    // arbitrated.
    std::optional<double> compute_limit = std::nullopt;
  };

  int64_t id = 0;
  std::string name;
  std::string queue;
  std::string user;
  uid_t uid = 0;
  JobState state = JobState::kPending;
  std::string request;  // As flags: FormatGpuRequest.
  std::vector<std::string> command;
  std::string cwd;
  int64_t submitted_ms = 0;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
  std::vector<Gpu> gpus;
  bool cancel_requested = false;
  // Once the job has ended (IsFinal(state)).
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<std::string> reason;
  std::string waiting_for;  // Why a pending job waits; "" otherwise.

  // The job as the service knows it, with the scheduler's reason for a wait.
  static JobWire Of(const Job& job, const std::string& wait_reason);
  nlohmann::json ToJson() const;
  // kInvalidArgument (naming the key) when `json` is not a job.
  static StatusOr<JobWire> FromJson(const nlohmann::json& json);

  // What it waits for, or why it ended ("" when neither).
  std::string Note() const;
  // Its end as a process exit status: its own code, 128+N for signal N, 1 otherwise.
  int ExitStatus() const;
};

}  // namespace gpufrac::node
