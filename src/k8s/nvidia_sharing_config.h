// NVIDIA's device plugin configuration file (`version: v1`), the part gpufrac's node agent
// serves: `sharing.timeSlicing` or `sharing.mps`, which advertise each GPU as N replicas. Parsed
// and checked in one place, then matched to this node's GPUs before anything is served, so that
// a cluster moving off NVIDIA's plugin keeps its file, its resource names and their meaning, and
// gains the limits NVIDIA's plugin does not enforce (nvidia_provider.h).
//
//   version: v1
//   sharing:
//     timeSlicing:                       # or mps: (one of the two)
//       renameByDefault: false           # true: serve replicas as <name>.shared
//       failRequestsGreaterThanOne: false  # true: a container may take one replica at most
//       resources:
//       - name: nvidia.com/gpu
//         replicas: 4
//         rename: nvidia.com/gpu.shared  # optional
//         devices: all                   # or a count (the first N GPUs), or [0, "GPU-..."]
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "k8s/inventory.h"

namespace gpufrac::k8s {

// A GPU may be cut into at most this many replicas: each gets 1/N of its memory and, under
// time-slicing, a compute request of 1/N in thousandths, which must not round to 0.
inline constexpr int kMaxNvidiaReplicas = 1000;

enum class NvidiaSharingKind { kTimeSlicing, kMps };
// As the file spells the section: "timeSlicing", "mps".
const char* NvidiaSharingKindName(NvidiaSharingKind kind);

// Which GPUs of the resource an entry shares. One of the three.
struct NvidiaReplicatedDevices {
  bool all = true;
  int count = 0;                  // > 0: the first `count` GPUs, by index.
  std::vector<std::string> list;  // GPU indexes ("0") and GPU UUIDs ("GPU-...").

  friend bool operator==(const NvidiaReplicatedDevices&, const NvidiaReplicatedDevices&) = default;
};

// One entry of sharing.<kind>.resources.
struct NvidiaReplicatedResource {
  std::string name;      // Fully qualified, as NVIDIA's plugin qualifies it: "nvidia.com/gpu".
  std::string serve_as;  // Where its replicas are served: rename, else <name>.shared under
                         // renameByDefault, else name.
  NvidiaReplicatedDevices devices;
  int replicas = 0;  // 1 to kMaxNvidiaReplicas.
  // Where later errors about it point: "FILE:LINE" and "sharing.timeSlicing.resources[0]".
  std::string at;
  std::string field;
};

struct NvidiaSharingConfig {
  NvidiaSharingKind kind = NvidiaSharingKind::kTimeSlicing;
  bool rename_by_default = false;
  // Under mps it defaults to true, as in NVIDIA's plugin.
  bool fail_requests_greater_than_one = false;
  std::vector<NvidiaReplicatedResource> resources;  // Empty: no sharing section, nothing shared.
  // One line each, for the log: sections of NVIDIA's file that the agent reads past (flags,
  // resources, imex: its own flags decide those), and the fields it applies that NVIDIA's plugin
  // ignores (a rename other than renameByDefault's, devices other than all), so that a cluster
  // moving off that plugin learns where gpufrac serves its file differently.
  std::vector<std::string> notices;
};

// Parses the file's text (YAML or JSON); `source` names it in errors. kInvalidArgument with one
// line "SOURCE:LINE: FIELD: what is wrong; what to write" for bad YAML, a wrong version, a field
// of the wrong type or out of range, both timeSlicing and mps, a name gpufrac does not share
// (anything but nvidia.com/gpu), a MIG device, and any field NVIDIA's format does not have
// (NVIDIA's parser ignores those; gpufrac refuses them, since a misspelt field would silently
// change what is enforced).
StatusOr<NvidiaSharingConfig> ParseNvidiaSharingConfig(std::string_view text,
                                                       const std::string& source);
// Reads and parses the file at `path`; kInvalidArgument naming it when it cannot be read.
StatusOr<NvidiaSharingConfig> LoadNvidiaSharingConfig(const std::string& path);

// How one GPU is shared on this node.
struct NvidiaSharedGpu {
  std::string resource;  // Its replicas are served under this name.
  int replicas = 0;
  friend bool operator==(const NvidiaSharedGpu&, const NvidiaSharedGpu&) = default;
};

struct NvidiaSharing {
  NvidiaSharingKind kind = NvidiaSharingKind::kTimeSlicing;
  bool fail_requests_greater_than_one = false;
  std::map<int, NvidiaSharedGpu> gpus;  // By GPU index. A GPU not here is served whole.
};

// Matches `config` to this node: `all` is every GPU as observed, `nvidia_gpus` those served
// under NVIDIA's names (--nvidia-gpus): the devices of nvidia.com/gpu, in index order, which is
// what `all` and a count pick from. kInvalidArgument (one line, naming the entry) for a device
// that is not one of them, a count larger than they are, a GPU in two entries, or no
// --nvidia-gpus at all while the file shares something.
StatusOr<NvidiaSharing> ResolveNvidiaSharing(const NvidiaSharingConfig& config,
                                             const NodeInventory& all,
                                             const std::vector<int>& nvidia_gpus);

}  // namespace gpufrac::k8s
