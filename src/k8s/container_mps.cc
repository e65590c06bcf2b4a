// A container's place with its GPU's MPS daemon: the daemon's limits, the mounts, the variables.
#include "k8s/container_mps.h"

#include <algorithm>

namespace gpufrac::k8s {

ContainerMps::ContainerMps(ContainerMpsOptions options)
    : shm_dir_(std::move(options.shm_dir)), daemons_(std::move(options.daemons)) {}

Status ContainerMps::Start(int index, const std::string& uuid) {
  std::lock_guard<std::mutex> lock(mu_);
  return daemons_.Ensure(index, uuid).status();
}

Status ContainerMps::ApplyLimits(int index) {
  Limits most{.percentage = 1, .pinned_mib = 0};
  for (const auto& [name, limits] : clients_[index]) {
    most.percentage = std::max(most.percentage, limits.percentage);
    most.pinned_mib = std::max(most.pinned_mib, limits.pinned_mib);
  }
  return daemons_.SetLimits(index, most.percentage, most.pinned_mib);
}

Status ContainerMps::Join(const std::string& client, const launch::MpsClient& mps,
                          ContainerAllocation* out) {
  std::lock_guard<std::mutex> lock(mu_);
  GPUFRAC_ASSIGN_OR_RETURN(std::string pipe, daemons_.Ensure(mps.index, mps.uuid));
  std::map<std::string, Limits>& clients = clients_[mps.index];
  clients[client] = {.percentage = static_cast<int>(mps.thread_percentage),
                     .pinned_mib = mps.pinned_mib};
  if (Status set = ApplyLimits(mps.index); !set.ok()) {
    clients.erase(client);
    return set;
  }
  // Read-only: clients connect to the daemon's and the server's sockets and open their named
  // pipes, which a read-only mount allows (the kernel refuses writes to a read-only mount only
  // for regular files, directories and links); they create nothing there (gpufracd's pipe
  // directories are root's 0755 and its jobs, run as their users, are MPS clients). So a
  // container cannot plant or remove anything the daemon or another container trusts.
  out->mounts.push_back({std::string(kContainerMpsPipeDir), pipe, true});
  if (!shm_dir_.empty()) out->mounts.push_back({"/dev/shm", shm_dir_, false});
  for (const std::string& entry :
       launch::MpsClientEnvironment(mps, std::string(kContainerMpsPipeDir))) {
    const size_t eq = entry.find('=');
    out->envs[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return OkStatus();
}

void ContainerMps::Forget(const std::function<bool(const std::string& client)>& gone) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, clients] : clients_) {
    std::erase_if(clients, [&gone](const auto& entry) { return gone(entry.first); });
  }
}

std::vector<machine::MpsDaemons::Ended> ContainerMps::Watch() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<machine::MpsDaemons::Ended> ended = daemons_.Watch();
  // A new daemon starts with no limits: its clients' come back before a server is asked for.
  for (machine::MpsDaemons::Ended& e : ended) {
    if (clients_[e.index].empty()) continue;
    if (Status set = ApplyLimits(e.index); !set.ok()) {
      e.how += "; its limits could not be set again: " + set.message();
    }
  }
  return ended;
}

void ContainerMps::StopIdle() {
  std::lock_guard<std::mutex> lock(mu_);
  daemons_.StopIdle();
}

StatusOr<std::string> ContainerMps::Command(int index, const std::string& command) {
  std::lock_guard<std::mutex> lock(mu_);
  return daemons_.Command(index, command);
}

std::map<int, pid_t> ContainerMps::Running() {
  std::lock_guard<std::mutex> lock(mu_);
  return daemons_.Running();
}

}  // namespace gpufrac::k8s
