// A limited container's limit file, limiter mounts and compute arbiters.
#include "k8s/container_limiter.h"

#include <cctype>
#include <filesystem>

#include "launch/budgets.h"

namespace gpufrac::k8s {

namespace fs = std::filesystem;

std::string LimiterWorkloadId(std::string_view text) {
  std::string id(text.substr(0, 63));
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return id;
}

ContainerLimiter::ContainerLimiter(std::string host_dir) : host_dir_(std::move(host_dir)) {}

Status ContainerLimiter::Limit(const std::string& subdir, const std::string& workload,
                               const std::vector<launch::LimitedGpu>& gpus,
                               ContainerAllocation* out) {
  if (gpus.empty()) return InternalError("a limit file for " + workload + " without GPUs");
  std::lock_guard<std::mutex> lock(mu_);
  launch::LimitFileOptions file_options;
  for (const launch::LimitedGpu& g : gpus) {
    if (!g.compute) continue;
    // A file of the agent's own, mounted alone: the container cannot create or replace names
    // beside it.
    GPUFRAC_ASSIGN_OR_RETURN(const launch::BudgetDir* arbiters, ArbiterDir());
    GPUFRAC_RETURN_IF_ERROR(launch::EnsureComputeArbiter(*arbiters, g.uuid));
    const std::string name = launch::ComputeArbiterName(g.uuid);
    out->mounts.push_back(
        {std::string(kContainerArbiterDir) + "/" + name, arbiters->path() + "/" + name, false});
    file_options.arbiter_dir = kContainerArbiterDir;
  }
  GPUFRAC_ASSIGN_OR_RETURN(std::string text, launch::LimitFileText(workload, gpus, file_options));
  const std::string dir = host_dir_ + "/" + subdir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UnavailableError("cannot create " + dir + ": " + ec.message());
  const std::string file = dir + "/limits";
  fs::remove(file, ec);  // A retried Allocate writes it afresh.
  GPUFRAC_RETURN_IF_ERROR(launch::WriteNewFile(file, text, 0444));
  out->mounts.push_back({std::string(kContainerLimitFile), file, true});
  out->mounts.push_back({std::string(kContainerLimiter), host_dir_ + "/lib/libgpufrac.so", true});
  out->mounts.push_back({std::string(kContainerPreload), host_dir_ + "/ld.so.preload", true});
  return OkStatus();
}

StatusOr<const launch::BudgetDir*> ContainerLimiter::ArbiterDir() {
  if (!arbiters_) {
    const std::string record = host_dir_ + "/arbiters";
    StatusOr<launch::BudgetDir> dir = launch::BudgetDir::ForService(record);
    if (!dir.ok()) {
      return UnavailableError(
          "cannot make the directory of the GPUs' compute arbiters (recorded in " + record +
          "): " + dir.status().message());
    }
    arbiters_ = std::move(*dir);
  }
  return &*arbiters_;
}

}  // namespace gpufrac::k8s
