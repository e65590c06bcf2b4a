// `gpufrac k8s agent` and `gpufrac k8s extender`: gpufrac's two Kubernetes processes, the node
// agent (device plugin, GPU inventory) and the scheduler extender.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "k8s/reservations.h"
#include "placement/policies.h"

namespace gpufrac::cli {

class K8sCommand {
 public:
  explicit K8sCommand(CLI::App& app);
  bool parsed() const;
  int Run();

 private:
  // The constructor's steps: the subcommands and their flags.
  void AddCommonFlags(CLI::App* cmd);
  void AddAgent();
  void AddAgentGpuFlags();
  void AddAgentServiceFlags();
  void AddExtender();

  int RunAgent();
  int RunExtender();

  std::string kubeconfig_;
  std::string context_;
  bool verbose_ = false;
  // agent
  std::string node_;
  std::string kubelet_dir_ = "/var/lib/kubelet/device-plugins";
  std::string host_dir_ = "/var/lib/gpufrac";
  int slots_per_gpu_ = 10;
  std::vector<int> whole_gpus_;
  std::vector<int> nvidia_gpus_;
  std::vector<int> static_mig_gpus_;
  std::string mig_strategy_ = "mixed";
  std::string mig_parted_config_;
  std::vector<int> mps_gpus_;
  std::string mps_control_;
  std::string mps_shm_dir_;
  std::string sim_;
  std::string compute_policy_ = "fair";  // --gpu-compute-policy
  int resync_seconds_ = 10;
  std::string health_listen_;  // --health-listen: HOST:PORT of GET /readyz and /healthz; "" none
  // extender
  std::string listen_ = "0.0.0.0:8888";
  std::string policy_ = std::string(placement::kDefaultPolicy);
  bool reservation_pods_ = false;
  bool allow_unenforced_ = false;
  std::vector<std::string> scheduler_names_;
  k8s::ReservationOptions reservation_;  // the flags set its namespace, image and priority class
  std::string agent_namespace_ = "gpufrac-system";
  std::string agent_selector_ = "app.kubernetes.io/name=gpufrac-agent";

  CLI::App* k8s_;
  CLI::App* agent_;
  CLI::App* extender_;
};

}  // namespace gpufrac::cli
