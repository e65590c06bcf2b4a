// A job of the node service: what a user submitted (JobSpec), where it runs (GpuGrant) and how
// far it has got (JobState, outcome). One record, kept in the store and shown by the API.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_request.h"
#include "launch/gpu_grant.h"
#include "proc/process_identity.h"

namespace gpufrac::node {

// pending -> starting -> running -> succeeded | failed | cancelled | lost
// pending -> cancelled; starting -> pending (the service died before the job was let go).
enum class JobState { kPending, kStarting, kRunning, kSucceeded, kFailed, kCancelled, kLost };

// "pending", "starting", "running", "succeeded", "failed", "cancelled", "lost".
std::string_view JobStateName(JobState state);
std::optional<JobState> ParseJobState(std::string_view name);
// succeeded, failed, cancelled or lost: the job holds nothing and will not change again.
bool IsFinal(JobState state);

// What the user asked for. Everything here is fixed at submit.
struct JobSpec {
  std::string name;                  // Optional label; empty = none.
  std::string queue;                 // A queue of the service's queue file.
  GpuRequest request;                // The queue's default when the user gave none.
  std::vector<std::string> command;  // argv; at least one element.
  std::string cwd;                   // Absolute; the job starts there.
  std::vector<std::string> env;      // "NAME=value" entries, the user's environment.
  uid_t uid = 0;                     // The job runs as this user ...
  gid_t gid = 0;                     // ... with this primary group (and the user's groups).
  std::string user;                  // The user's name, for listings.
  friend bool operator==(const JobSpec&, const JobSpec&) = default;
};

// What a job's text takes in the store: its command, environment, working directory and name.
uint64_t JobTextBytes(const std::vector<std::string>& command, const std::vector<std::string>& env,
                      const std::string& cwd, const std::string& name);

// One GPU a running job holds (the launchers' one grant type): its share, its memory limit and
// its compute pair there, decided when it starts; the uuid is what CUDA_VISIBLE_DEVICES gets (a
// MIG instance's own for a job on MIG).
using launch::GpuGrant;

struct Job {
  int64_t id = 0;  // From 1, never reused.
  JobSpec spec;
  JobState state = JobState::kPending;
  int64_t submitted_ms = 0;    // Unix time in milliseconds.
  int64_t started_ms = 0;      // 0 until running.
  int64_t ended_ms = 0;        // 0 until final.
  std::vector<GpuGrant> gpus;  // Held while starting/running; kept afterwards for the record.
  proc::ProcessId shim;        // Its supervisor (gpufrac-shim), pid + start time; once running.
  bool cancel_requested = false;
  // Outcome, once final: exit_code >= 0 when the command exited, signal > 0 when a signal ended
  // it; reason says why in words for failed/cancelled/lost ("exit code 3", "killed by signal 9",
  // "the service restarted and the job's supervisor was gone with no recorded outcome").
  int exit_code = -1;
  int signal = 0;
  std::string reason;
  friend bool operator==(const Job&, const Job&) = default;
};

}  // namespace gpufrac::node
