// Formats, checks and writes limit files (see limit_file.h).
#include "launch/limit_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <set>

#include "common/posix.h"
#include "limiter/budget.h"
#include "limiter/limit_config.h"

namespace gpufrac::launch {
namespace {

// A workload id names the limiter's shared budgets: 1 to 63 of [A-Za-z0-9_.-].
bool ValidWorkloadId(const std::string& id) {
  if (id.empty() || id.size() > limiter::kMaxWorkloadIdLen) return false;
  for (char c : id) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// A real 16-byte GPU or MIG UUID of letters, digits and dashes (it ends up in shared-memory names
// and in CUDA_VISIBLE_DEVICES).
bool ValidGpuUuid(const std::string& uuid) {
  if (uuid.empty() || uuid.size() > limiter::kMaxUuidLen) return false;
  for (char c : uuid) {
    bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  unsigned char bytes[16];
  return limiter::ParseUuid(uuid.c_str(), bytes);
}

}  // namespace

StatusOr<std::string> LimitFileText(const std::string& workload,
                                    const std::vector<LimitedGpu>& gpus,
                                    const LimitFileOptions& options) {
  if (!ValidWorkloadId(workload)) {
    return InvalidArgumentError("workload name '" + workload +
                                "' must be 1 to 63 of A-Z a-z 0-9 _ . -");
  }
  if (gpus.empty() || gpus.size() > static_cast<size_t>(limiter::kMaxLimitedGpus)) {
    return InvalidArgumentError("a workload is limited on 1 to " +
                                std::to_string(limiter::kMaxLimitedGpus) + " GPUs, not " +
                                std::to_string(gpus.size()));
  }
  limiter::LimitConfig config{};
  std::snprintf(config.workload, sizeof(config.workload), "%s", workload.c_str());
  config.quiet = options.quiet;
  config.advisory = options.advisory;
  if (options.budget_dir.size() > limiter::kMaxBudgetDirLen) {
    return InvalidArgumentError("budget directory " + options.budget_dir + " is too long");
  }
  std::snprintf(config.budget_dir, sizeof(config.budget_dir), "%s", options.budget_dir.c_str());
  if (options.arbiter_dir.size() > limiter::kMaxBudgetDirLen) {
    return InvalidArgumentError("arbiter directory " + options.arbiter_dir + " is too long");
  }
  std::snprintf(config.arbiter_dir, sizeof(config.arbiter_dir), "%s", options.arbiter_dir.c_str());
  config.gpu_count = static_cast<int>(gpus.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!ValidGpuUuid(gpus[i].uuid)) {
      return InvalidArgumentError("'" + gpus[i].uuid + "' is not a GPU UUID");
    }
    if (!seen.insert(gpus[i].uuid).second) {
      return InvalidArgumentError("GPU " + gpus[i].uuid + " is listed twice");
    }
    if (gpus[i].limit_bytes == 0 || gpus[i].limit_bytes > limiter::kMaxBudgetBytes) {
      return InvalidArgumentError("the memory limit on " + gpus[i].uuid +
                                  " must be between 1 byte and 512 GiB");
    }
    limiter::GpuLimit& g = config.gpus[i];
    std::snprintf(g.uuid, sizeof(g.uuid), "%s", gpus[i].uuid.c_str());
    limiter::ParseUuid(g.uuid, g.uuid_bytes);
    g.limit_bytes = gpus[i].limit_bytes;
    g.context_bytes = gpus[i].context_bytes;
    g.arbitrated = gpus[i].compute.has_value();
    g.compute_milli = gpus[i].compute ? gpus[i].compute->request_milli : 0;
    g.compute_limit_milli = gpus[i].compute ? gpus[i].compute->limit_milli : 0;
  }
  char text[limiter::kMaxLimitFileBytes];
  size_t len = limiter::FormatLimitConfig(config, text, sizeof(text));
  // Read back as the limiter will, so that a workload never starts with a file its limiter
  // refuses.
  limiter::LimitConfig parsed;
  char err[256];
  if (len == 0 || !limiter::ParseLimitConfig(text, len, &parsed, err, sizeof(err))) {
    return InternalError(std::string("the limit file would not parse: ") +
                         (len == 0 ? "too long" : err));
  }
  return std::string(text, len);
}

bool SystemServiceRunsGpus() { return limiter::SystemServiceRuns(); }

Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus("cannot create " + path, errno);
  // A half-written file is never left behind: the name is ours (O_EXCL made it) until we return.
  auto fail = [&](const std::string& what, int err) {
    fd.Reset();
    unlink(path.c_str());
    return ErrnoStatus(what + path, err);
  };
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot write ", errno);
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd.get(), mode) != 0) return fail("cannot set the mode of ", errno);
  return OkStatus();
}

}  // namespace gpufrac::launch
