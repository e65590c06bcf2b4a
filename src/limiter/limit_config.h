// The limit file: what a launcher writes and libgpufrac reads to learn a workload's per-GPU memory
// limits. Parsing and formatting are heap-free so that the same code runs inside the limiter.
//
// Format (text, one directive per line, '#' starts a comment):
//   gpufrac-limits 1
//   workload <id>                  letters, digits, '-', '_', '.'; names the shared budgets
//   quiet 0|1                      1 silences the over-limit message
//   advisory 0|1                   1: written by the workload's own user (see LoadLimitFile)
//   budgets <dir>                  where the launcher made the budgets (absolute); without it,
//                                  the limiter makes them itself in /dev/shm (containers)
//   arbiters <dir>                 where the GPUs' compute arbiters are (absolute; default: the
//                                  budgets directory; without either, compute is not arbitrated)
//   gpu <uuid> limit <bytes> context <bytes> compute <milli> compute-limit <milli>
// <uuid> is the device's GPU-... or MIG-... UUID. Every field is required except quiet, context
// and the compute pair (thousandths of the GPU's time: guaranteed, and at most; both or neither).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufrac::limiter {

constexpr int kMaxLimitedGpus = 16;
constexpr size_t kMaxWorkloadIdLen = 63;
constexpr size_t kMaxUuidLen = 47;
constexpr size_t kMaxLimitFileBytes = 8192;
constexpr size_t kMaxBudgetDirLen = 127;

// Where the limiter looks: inside a container the fixed path wins, so that a workload cannot point
// the limiter elsewhere; otherwise the environment variable names the file.
constexpr const char* kLimitFileEnv = "GPUFRAC_LIMIT_FILE";
constexpr const char* kContainerLimitFile = "/etc/gpufrac/limits";

struct GpuLimit {
  char uuid[kMaxUuidLen + 1];
  unsigned char uuid_bytes[16];  // the 16 bytes the driver reports, parsed from uuid
  uint64_t limit_bytes;
  uint64_t context_bytes;
  // Whether its time is arbitrated (the line has "compute" and "compute-limit"); then its share
  // of the GPU's time in thousandths (1..1000): guaranteed when others compete, and the most it
  // may take (at least the request). Both 0 otherwise, and read only when arbitrated.
  bool arbitrated;
  uint64_t compute_milli;
  uint64_t compute_limit_milli;
};

struct LimitConfig {
  char workload[kMaxWorkloadIdLen + 1];
  bool quiet;
  // Where the budgets are, made by the launcher in a directory the workload cannot create names
  // in; "" when the limiter makes them in /dev/shm.
  char budget_dir[kMaxBudgetDirLen + 1];
  // Where the compute arbiters are ("compute.<uuid>", compute_arbiter.h); "": in budget_dir.
  char arbiter_dir[kMaxBudgetDirLen + 1];
  // Written by the workload's own user (gpufrac exec, a user's own service): it limits by
  // agreement, not by force, since that user could rewrite it.
  bool advisory;
  int gpu_count;
  GpuLimit gpus[kMaxLimitedGpus];
};

// Parses `text` (length `len`). On failure returns false and writes a one-line reason naming the
// line into `err`.
bool ParseLimitConfig(const char* text, size_t len, LimitConfig* out, char* err, size_t err_len);

// The system service's runtime directory: while it exists (root's), the machine's GPUs are run by
// gpufrac's system service, and a user's own (advisory) limit file is refused.
constexpr const char* kSystemServiceDir = "/run/gpufrac";
// Whether `system_dir` is a directory of root's: gpufrac's system service runs the GPUs.
bool SystemServiceRuns(const char* system_dir = kSystemServiceDir);

// Reads and parses the file at `path`. Returns false with a reason in `err`. For a process not
// running as the host's root (root of a user namespace is the user who made it), a limit file is refused when the process could write it, and when its own user
// owns it (it could be made writable again) unless the file says `advisory 1` and no system
// service runs the machine's GPUs (`system_dir`, kSystemServiceDir, does not exist). So a job of
// the system service cannot point the limiter at a file of its own with a larger limit.
bool LoadLimitFile(const char* path, LimitConfig* out, char* err, size_t err_len,
                   const char* system_dir = kSystemServiceDir);

// Writes `config` in the format above into `buf`; returns the length, or 0 if it does not fit.
size_t FormatLimitConfig(const LimitConfig& config, char* buf, size_t buf_len);

// Parses "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or "MIG-..." (or bare hex with dashes) into
// 16 bytes. Returns false if it is not 32 hex digits.
bool ParseUuid(const char* text, unsigned char out[16]);

// Name of the shared-memory budget for one workload on one GPU ("/gpufrac.<workload>.<uuid>"); in
// a budget directory, the file's name is this without the leading slash.
bool BudgetName(const char* workload, const char* uuid, char* buf, size_t buf_len);

}  // namespace gpufrac::limiter
