// What a pod asks of the GPUs, read from its containers' extended resources (gpufrac.io/gpu,
// gpufrac.io/gpu-memory, gpufrac.io/gpu-fraction, gpufrac.io/gpu-compute) and its annotations
// (gpufrac.io/mig-profile, gpufrac.io/gpu-model, gpufrac.io/gpu-compute and -compute-limit, and
// KAI/Run:ai's gpu-fraction and gpu-memory for migration). One parser, used by the scheduler
// extender and the node agent alike, so both read a pod the same way.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"

namespace gpufrac::k8s {

inline constexpr std::string_view kResourceGpu = "gpufrac.io/gpu";
inline constexpr std::string_view kResourceGpuMemory = "gpufrac.io/gpu-memory";      // MiB
inline constexpr std::string_view kResourceGpuFraction = "gpufrac.io/gpu-fraction";  // 1/1000
// The share of each GPU's time guaranteed when others compete, 1/1000 (default: the memory's
// share). Like memory and fraction it is per GPU, so no node advertises it.
inline constexpr std::string_view kResourceGpuCompute = "gpufrac.io/gpu-compute";
inline constexpr std::string_view kAnnotationMigProfile = "gpufrac.io/mig-profile";
inline constexpr std::string_view kAnnotationGpuModel = "gpufrac.io/gpu-model";
// The compute request and limit for every GPU container of the pod, as the request grammar
// writes a share: "0.25" or "25%". The limit defaults to the node agent's policy.
inline constexpr std::string_view kAnnotationGpuCompute = "gpufrac.io/gpu-compute";
inline constexpr std::string_view kAnnotationGpuComputeLimit = "gpufrac.io/gpu-compute-limit";
// KAI scheduler / Run:ai annotations, accepted so that their pods move over unchanged.
inline constexpr std::string_view kKaiGpuFraction = "gpu-fraction";  // "0.5"
inline constexpr std::string_view kKaiGpuMemory = "gpu-memory";      // MiB, "4096"
inline constexpr std::string_view kKaiFractionDevices = "gpu-fraction-num-devices";
inline constexpr std::string_view kKaiContainerName = "gpu-fraction-container-name";

// What one container asks for, per GPU it uses.
// One container's GPUs: the request every entry point makes (how many GPUs, the amount on each or
// a MIG instance, the model), and how the container asked for it.
struct ContainerRequest {
  std::string container;
  GpuRequest request = GpuRequest::Whole(1);  // A MIG profile always has gpus == 1.
  bool from_annotations = false;  // Asked with KAI/Run:ai annotations, not gpufrac.io resources.
  // Asks for gpufrac.io/gpu, so the kubelet calls gpufrac's device plugin for it (and the
  // container gets its GPUs and limits there). False for annotation-only containers.
  bool device_plugin = true;
  // Who the container's processes run as, for GPUs in MPS mode, whose server serves one user's
  // clients at a time (RunAsKey).
  std::string run_as{};
  friend bool operator==(const ContainerRequest&, const ContainerRequest&) = default;
};

// The namespace label that lets the pods of a namespace share GPUs although a container of
// theirs can remove its enforcement (PodRequest::unenforced): "true".
inline constexpr std::string_view kLabelAllowUnenforced = "gpufrac.io/allow-unenforced";

// The pod's GPU containers, in the pod's order; empty when it asks for no GPU.
struct PodRequest {
  std::vector<ContainerRequest> containers;
  // How a container of the pod can remove the limiter (and with it MPS's limits) from the GPU
  // containers (UnenforcedReason), "" when none can: such a pod is given no share of a shared
  // GPU, only whole GPUs and MIG instances, where it can only hurt itself. The extender clears it
  // where the operator allows such pods to share.
  std::string unenforced = {};
  bool empty() const { return containers.empty(); }
  friend bool operator==(const PodRequest&, const PodRequest&) = default;
};

// Reads `pod` (a core/v1 Pod as JSON). Resources come from each container's limits (requests
// when there is no limit). Errors are kInvalidArgument with one line naming the container and
// the key and saying what to write instead, e.g.:
//  - gpufrac.io/gpu-memory and gpufrac.io/gpu-fraction both given (choose one);
//  - gpufrac.io/gpu-memory without gpufrac.io/gpu (the GPU count is what quotas count);
//  - a fraction outside 1..999 thousandths, a memory of 0 MiB, a count above 64 or not whole;
//  - gpufrac.io/mig-profile with a memory or fraction, with more than one GPU, with no GPU
//    container, or naming no profile; KAI annotations with gpufrac.io/gpu-memory or
//    gpu-fraction on one container (with gpufrac.io/gpu they are fine: it gives the count);
//  - gpufrac.io resources on an init container, or together with nvidia.com/gpu;
//  - a compute request (gpufrac.io/gpu-compute, resource or annotation) or limit on a container
//    without a memory or fraction (whole GPUs and MIG instances have all of their compute), a
//    request outside 1..999 thousandths, a limit above 1 or below the request, or the request
//    given both as a resource and as the annotation.
// Each container's run_as is RunAsKey's.
StatusOr<PodRequest> ParsePodRequest(const nlohmann::json& pod);

// What in `pod` can remove a GPU container's enforcement, in words ("" when nothing can). All
// containers count (init containers run with the pod's limit files and limiter mounts in place;
// ephemeral ones, added after scheduling, are checked when present). Any of these gets past the
// read-only mounts of /etc/ld.so.preload and the limit file, or reaches them from outside:
//  - spec.hostPID or spec.hostIPC (the node's processes and their memory), a hostPath volume
//    (any path: it can reach /var/lib/gpufrac or /);
//  - a privileged container, or one with securityContext.procMount Unmasked;
//  - seccompProfile Unconfined (the container's, else the pod's: `unshare -Urm` then needs no
//    capability to bind a file over /etc/ld.so.preload), appArmorProfile Unconfined, or the
//    annotation container.apparmor.security.beta.kubernetes.io/<container>: unconfined;
//  - an added capability outside Pod Security baseline's list (AUDIT_WRITE, CHOWN, DAC_OVERRIDE,
//    FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID,
//    SYS_CHROOT; "CAP_" prefix and case ignored): SYS_ADMIN, DAC_READ_SEARCH (open_by_handle_at),
//    SYS_MODULE, SYS_RAWIO, ALL, ... Such a capability is harmless only when the container
//    cannot gain it: allowPrivilegeEscalation false (no_new_privs: no setuid or file capability
//    raises it) and a non-root user known from the spec (runAsUser not 0, or runAsNonRoot true;
//    the container's, else the pod's), since Kubernetes gives a non-root process no ambient
//    capabilities.
// The first found, e.g.:
//   container "x" is privileged
//   init container "setup" adds capability SYS_ADMIN
//   volume "data" of the pod is hostPath /srv
//   the pod sets securityContext.seccompProfile Unconfined (for container "x")
std::string UnenforcedReason(const nlohmann::json& pod);
// UnenforcedReason's `reason` with what follows from it, for the scheduler and the pod's event:
// "..., with which it can get past gpufrac's limiter and limit file: it may not share a GPU (allow
// it with the namespace label gpufrac.io/allow-unenforced=true; it may have a whole GPU or a MIG
// instance)".
std::string UnenforcedMessage(const std::string& reason);

// Who a container of `pod` runs as: "uid N" from securityContext.runAsUser (the container's, else
// the pod's); without one, "image <image>": the image's USER decides, which the scheduler cannot
// see, so containers of one image are taken to run as one user and those of two images as two.
// A pod in its own user namespace (spec.hostUsers false) runs as host uids no other pod shares:
// "user namespace of pod <namespace>/<name>".
std::string RunAsKey(const nlohmann::json& pod, const nlohmann::json& container);

// The request in the pod's own words, for events and logs: "gpufrac.io/gpu: 2",
// "gpufrac.io/gpu: 1, gpufrac.io/gpu-memory: 4096 MiB", "gpufrac.io/gpu: 1,
// gpufrac.io/gpu-fraction: 250", "gpufrac.io/gpu: 1, gpufrac.io/mig-profile: 2g.20gb" (or KAI's
// "gpu-fraction: 0.5", "gpu-memory: 4096 MiB"), then "gpufrac.io/gpu-compute: 0.3",
// "gpufrac.io/gpu-compute-limit: 0.5" and "gpufrac.io/gpu-model: A100-80GB" when given.
std::string DescribeRequest(const ContainerRequest& request);

}  // namespace gpufrac::k8s
