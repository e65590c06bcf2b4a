// The Kubernetes subcommands: configuration from flags, an API client from the kubeconfig or
// the pod's service account, and the process run until SIGTERM or SIGINT.
#include "cli/k8s_command.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "common/log.h"
#include "common/paths.h"
#include "common/text.h"
#include "k8s/agent_service.h"
#include "k8s/extender_service.h"
#include "k8s/kube_config.h"

namespace gpufrac::cli {
namespace {

int Fail(const char* command, const std::string& message) {
  std::fprintf(stderr, "gpufrac k8s %s: %s\n", command, Printable(message).c_str());
  return 1;
}

// Blocks the stop signals in every thread, and calls `stop` from a thread that waits for one.
std::thread StopOnSignal(std::function<void()> stop) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // cpp-httplib writes without MSG_NOSIGNAL: a peer hanging up must not kill the process.
  signal(SIGPIPE, SIG_IGN);
  return std::thread([set, stop = std::move(stop)] {
    int sig = 0;
    sigwait(&set, &sig);
    LogInfo("signal %d: stopping", sig);
    stop();
  });
}

// Run has returned (stopped by a signal, or failed): wakes the signal thread if no signal came,
// and waits for it, so that it never calls Stop on an object that is gone.
void JoinSignalThread(std::thread& signals) {
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
}

}  // namespace

K8sCommand::K8sCommand(CLI::App& app) {
  k8s_ =
      app.add_subcommand("k8s", "gpufrac on Kubernetes: the node agent and the scheduler extender");
  k8s_->require_subcommand(1);
  AddAgent();
  AddExtender();
}

// The flags both processes take: how they reach the API server, and how much they log.
void K8sCommand::AddCommonFlags(CLI::App* cmd) {
  cmd->add_option("--kubeconfig", kubeconfig_,
                  "kubeconfig file (outside a cluster); default: the pod's service account");
  cmd->add_option("--context", context_, "kubeconfig context (default: its current-context)");
  cmd->add_flag("--verbose,-v", verbose_, "log every decision");
}

// `gpufrac k8s agent`: the node, the kubelet and the limiter's files, then the GPUs, then how
// it serves them. The flags are added in the order --help lists them.
void K8sCommand::AddAgent() {
  agent_ = k8s_->add_subcommand("agent",
                                "node agent: kubelet device plugin for gpufrac.io/gpu, "
                                "GPU inventory and labels for the extender");
  AddCommonFlags(agent_);
  agent_->add_option("--node", node_, "this node's name (default: $NODE_NAME)");
  agent_->add_option("--kubelet-dir", kubelet_dir_, "the kubelet's device-plugin directory")
      ->capture_default_str();
  // Read back in RunAgent, as --nvidia-sharing-config.
  agent_
      ->add_option("--pod-resources-socket",
                   "the kubelet's PodResources socket: which pod an Allocate is for, and a check "
                   "of the slots the kubelet recorded (\"\" for none: pods are then matched by "
                   "their slots' GPUs and the order they were bound)")
      ->type_name("PATH")
      ->default_str(std::string(k8s::kDefaultPodResourcesSocket));
  agent_
      ->add_option("--host-dir", host_dir_,
                   "host directory for the limiter library and limit files")
      ->capture_default_str();
  agent_->add_option("--slots-per-gpu", slots_per_gpu_, "pods that may share one GPU")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  AddAgentGpuFlags();
  AddAgentServiceFlags();
}

// Which of the agent's GPUs are served how: whole, as NVIDIA's plugin would, in MIG or MPS.
void K8sCommand::AddAgentGpuFlags() {
  agent_->add_option("--whole-gpus", whole_gpus_, "GPU indexes that serve whole-GPU pods only")
      ->delimiter(',');
  agent_
      ->add_option("--nvidia-gpus", nvidia_gpus_,
                   "GPU indexes served whole as nvidia.com/gpu (as NVIDIA's device plugin "
                   "does), outside gpufrac's own scheduling")
      ->delimiter(',');
  agent_
      ->add_option("--static-mig-gpus", static_mig_gpus_,
                   "GPU indexes in MIG mode whose existing instances are served as "
                   "nvidia.com/mig-<profile>, outside gpufrac's own scheduling; the node's "
                   "nvidia.com/mig.config label sets their layout")
      ->delimiter(',');
  agent_
      ->add_option("--mig-strategy", mig_strategy_,
                   "how --static-mig-gpus instances are served, as by NVIDIA's device plugin: "
                   "mixed (nvidia.com/mig-<profile>) or single (nvidia.com/gpu, one profile "
                   "throughout)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mixed", "single"}));
  agent_
      ->add_option("--mig-parted-config", mig_parted_config_,
                   "a mig-parted file (NVIDIA's MIG manager ConfigMap, mounted): configurations "
                   "the nvidia.com/mig.config label may name besides the defaults (all-1g.10gb, "
                   "all-balanced, ...); the file's win on a clash")
      ->type_name("FILE");
  agent_
      ->add_option("--mps-gpus", mps_gpus_,
                   "GPU indexes whose gpufrac.io/gpu shares run side by side under NVIDIA MPS, "
                   "each a client of the MPS daemon the agent runs for the GPU")
      ->delimiter(',');
  agent_->add_option("--mps-control", mps_control_,
                     "NVIDIA's nvidia-cuda-mps-control (default: found on PATH; the simulated "
                     "one with --sim)");
  agent_->add_option("--mps-shm-dir", mps_shm_dir_,
                     "host directory mounted as /dev/shm in MPS containers: the agent's own "
                     "/dev/shm, which its MPS daemons use (default: none; see docs/kubernetes.md)");
  // Read back in RunAgent (no member: the path only passes through to the agent's options).
  agent_
      ->add_option("--nvidia-sharing-config",
                   "NVIDIA's device plugin configuration file: its sharing section "
                   "(timeSlicing or mps) serves --nvidia-gpus GPUs as replicas, each container "
                   "held to its share of memory (and GPU time) by gpufrac's limiter")
      ->type_name("FILE");
}

// How the agent divides GPU time, what it runs on, and how it is watched.
void K8sCommand::AddAgentServiceFlags() {
  agent_
      ->add_option("--gpu-compute-policy", compute_policy_,
                   "How a shared GPU's time is divided, as gpufracd's: fair (a pod may use idle "
                   "time up to its gpufrac.io/gpu-compute-limit, default 1), strict (the limit "
                   "defaults to its request) or off (the GPU's own equal time-slicing)")
      ->capture_default_str();
  agent_->add_option("--sim", sim_, "simulated GPUs instead of this machine's, e.g. 2xH100-80GB");
  agent_->add_option("--health-listen", health_listen_,
                     "HOST:PORT serving GET /readyz (200 once registered with the kubelet and "
                     "the GPUs are published) and GET /healthz, for the pod's probes; default: "
                     "none");
  agent_->add_option("--resync", resync_seconds_, "seconds between health and inventory checks")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
}

// `gpufrac k8s extender`: where it listens, how it places, and its reservation pods.
void K8sCommand::AddExtender() {
  extender_ = k8s_->add_subcommand("extender", "kube-scheduler extender: filter, prioritize, bind");
  AddCommonFlags(extender_);
  extender_->add_option("--listen", listen_, "HOST:PORT to serve on")->capture_default_str();
  extender_->add_option("--policy", policy_, "placement policy")->capture_default_str();
  extender_->add_flag("--reservation-pods", reservation_pods_,
                      "keep a pod asking for nvidia.com/gpu: 1 on every GPU with fractional "
                      "bookings, so that other schedulers and NVIDIA's device plugin see it taken");
  extender_->add_option("--scheduler-name", scheduler_names_,
                        "a scheduler (spec.schedulerName) whose waiting pods this extender tries "
                        "again after a restart or a node's change; repeatable (default: "
                        "default-scheduler and gpufrac-scheduler, and any whose pods it filters)");
  extender_->add_flag("--allow-unenforced-sharing", allow_unenforced_,
                      "let pods share GPUs although a container of theirs is privileged or adds "
                      "SYS_ADMIN, with which it can unmount gpufrac's limiter (without it, only "
                      "pods of namespaces labelled gpufrac.io/allow-unenforced=true may)");
  extender_
      ->add_option("--reservation-namespace", reservation_.ns, "namespace of the reservation pods")
      ->capture_default_str();
  extender_->add_option("--reservation-image", reservation_.image, "image of the reservation pods")
      ->capture_default_str();
  extender_->add_option("--reservation-priority-class", reservation_.priority_class,
                        "priorityClassName of the reservation pods (default: none)");
  extender_
      ->add_option("--agent-namespace", agent_namespace_,
                   "namespace of the agent's DaemonSet pods: while a node's agent pod is not "
                   "Ready, no GPU pod is placed there")
      ->capture_default_str();
  extender_
      ->add_option("--agent-selector", agent_selector_,
                   "labels of the agent's pods (key=value,...); only pods of --agent-namespace "
                   "that a DaemonSet controls count")
      ->capture_default_str();
}

bool K8sCommand::parsed() const { return k8s_->parsed(); }

int K8sCommand::Run() {
  SetLogLevel(verbose_ ? LogLevel::kDebug : LogLevel::kInfo);
  return agent_->parsed() ? RunAgent() : RunExtender();
}

namespace {

StatusOr<std::unique_ptr<k8s::ApiClient>> MakeClient(const std::string& kubeconfig,
                                                     const std::string& context) {
  StatusOr<k8s::ClientConfig> config =
      kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(kubeconfig, context);
  if (!config.ok()) return config.status();
  return k8s::ApiClient::Create(std::move(*config));
}

}  // namespace

int K8sCommand::RunAgent() {
  if (node_.empty()) {
    const char* env = std::getenv("NODE_NAME");
    node_ = env != nullptr ? env : "";
  }
  auto client = MakeClient(kubeconfig_, context_);
  if (!client.ok()) return Fail("agent", client.status().message());
  k8s::AgentServiceOptions options;
  options.agent.node = node_;
  options.agent.slots_per_gpu = slots_per_gpu_;
  options.agent.host_dir = host_dir_;
  options.kubelet_dir = kubelet_dir_;
  options.sim = sim_;
  options.whole_gpus = whole_gpus_;
  options.nvidia_gpus = nvidia_gpus_;
  options.static_mig_gpus = static_mig_gpus_;
  options.mig_strategy = mig_strategy_;
  options.mig_parted_config = mig_parted_config_;
  options.mps_gpus = mps_gpus_;
  options.mps_control = mps_control_;
  options.mps_shm_dir = mps_shm_dir_;
  options.compute_policy = compute_policy_;
  if (const CLI::Option* sharing = agent_->get_option("--nvidia-sharing-config");
      sharing->count() > 0) {
    options.nvidia_sharing_config = sharing->as<std::string>();
  }
  const CLI::Option* socket = agent_->get_option("--pod-resources-socket");
  options.pod_resources_socket = socket->count() > 0 ? socket->as<std::string>()
                                                     : std::string(k8s::kDefaultPodResourcesSocket);
  options.limiter_path = LimiterLibraryPath();
  options.resync = std::chrono::seconds(resync_seconds_);
  options.health_listen = health_listen_;
  auto agent = k8s::AgentService::Create(client->get(), std::move(options));
  if (!agent.ok()) return Fail("agent", agent.status().message());
  std::thread signals = StopOnSignal([&agent] { (*agent)->Stop(); });
  Status s = (*agent)->Run();
  JoinSignalThread(signals);
  if (!s.ok()) return Fail("agent", s.message());
  return 0;
}

int K8sCommand::RunExtender() {
  auto client = MakeClient(kubeconfig_, context_);
  if (!client.ok()) return Fail("extender", client.status().message());
  k8s::ExtenderServiceOptions options{.listen = listen_, .policy = policy_, .holder = ""};
  options.reservation_pods = reservation_pods_;
  options.allow_unenforced = allow_unenforced_;
  if (!scheduler_names_.empty()) {
    options.scheduler_names.emplace(scheduler_names_.begin(), scheduler_names_.end());
  }
  options.reservation = reservation_;
  auto agent_pods = k8s::ParseAgentPodSelector(agent_namespace_, agent_selector_);
  if (!agent_pods.ok()) return Fail("extender", agent_pods.status().message());
  options.agent_pods = std::move(*agent_pods);
  auto service = k8s::ExtenderService::Create(client->get(), std::move(options));
  if (!service.ok()) return Fail("extender", service.status().message());
  std::thread signals = StopOnSignal([&service] { (*service)->Stop(); });
  Status s = (*service)->Run();
  JoinSignalThread(signals);
  if (!s.ok()) return Fail("extender", s.message());
  return 0;
}

}  // namespace gpufrac::cli
