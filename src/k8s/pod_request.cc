// Reading a pod's GPU request. Extended resources must be whole numbers in Kubernetes, so the
// quantity grammar needed here is the integer part of it: digits with an optional SI or binary
// suffix ("4096", "4Ki", "2k").
#include "k8s/pod_request.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "common/gpu_request.h"
#include "common/text.h"
#include "common/units.h"
#include "k8s/object_fields.h"

namespace gpufrac::k8s {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A whole-number Kubernetes quantity: "12", "4Ki", "2k", or a JSON number.
StatusOr<uint64_t> WholeQuantity(const json& value, const std::string& where) {
  auto bad = [&](const std::string& text) {
    return InvalidArgumentError(where + " is \"" + text +
                                "\"; write a whole number (extended resources are integers)");
  };
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    int64_t n = value.get<int64_t>();
    if (n < 0) return bad(std::to_string(n));
    return static_cast<uint64_t>(n);
  }
  if (!value.is_string()) return bad(value.dump());
  const std::string text = value.get<std::string>();
  size_t i = 0;
  uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (n > (std::numeric_limits<uint64_t>::max() - 9) / 10) return bad(text);
    n = n * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0) return bad(text);
  std::string_view suffix = std::string_view(text).substr(i);
  struct Unit {
    std::string_view name;
    int power;  // Of `base`.
    uint64_t base;
  };
  static constexpr Unit kUnits[] = {
      {"", 0, 10},     {"k", 1, 1000},  {"M", 2, 1000},  {"G", 3, 1000},  {"T", 4, 1000},
      {"P", 5, 1000},  {"E", 6, 1000},  {"Ki", 1, 1024}, {"Mi", 2, 1024}, {"Gi", 3, 1024},
      {"Ti", 4, 1024}, {"Pi", 5, 1024}, {"Ei", 6, 1024}};
  for (const Unit& u : kUnits) {
    if (u.name != suffix) continue;
    for (int p = 0; p < u.power; ++p) {
      if (n > std::numeric_limits<uint64_t>::max() / u.base) return bad(text);
      n *= u.base;
    }
    return n;
  }
  return bad(text);
}

const json* Find(const json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(std::string(key));
  return it == object.end() ? nullptr : &*it;
}

// limits[key], else requests[key], else nullptr.
const json* ResourceValue(const json& container, std::string_view key) {
  const json* resources = Find(container, "resources");
  if (resources == nullptr) return nullptr;
  for (std::string_view part : {"limits", "requests"}) {
    const json* list = Find(*resources, part);
    if (const json* v = list ? Find(*list, key) : nullptr) return v;
  }
  return nullptr;
}

bool AsksForGpufrac(const json& container) {
  for (std::string_view key :
       {kResourceGpu, kResourceGpuMemory, kResourceGpuFraction, kResourceGpuCompute}) {
    if (ResourceValue(container, key) != nullptr) return true;
  }
  return false;
}

std::string ContainerName(const json& container, size_t index) {
  const json* name = Find(container, "name");
  return name && name->is_string() ? name->get<std::string>() : "#" + std::to_string(index);
}

std::string Annotation(const json& pod, std::string_view key) {
  const json* metadata = Find(pod, "metadata");
  const json* annotations = metadata ? Find(*metadata, "annotations") : nullptr;
  const json* value = annotations ? Find(*annotations, key) : nullptr;
  return value && value->is_string() ? value->get<std::string>() : "";
}

// The gpufrac.io resources of one container; nullopt when it asks for none.
StatusOr<std::optional<ContainerRequest>> FromResources(const json& container,
                                                        const std::string& name) {
  const std::string where = "container " + name + ": ";
  const json* count = ResourceValue(container, kResourceGpu);
  const json* memory = ResourceValue(container, kResourceGpuMemory);
  const json* fraction = ResourceValue(container, kResourceGpuFraction);
  // No GPU asked for: then a compute share has nothing to qualify.
  auto none = [&]() -> StatusOr<std::optional<ContainerRequest>> {
    if (ResourceValue(container, kResourceGpuCompute) != nullptr) {
      return InvalidArgumentError(
          where + std::string(kResourceGpuCompute) + " needs " + std::string(kResourceGpu) +
          ": N and " + std::string(kResourceGpuMemory) + " or " +
          std::string(kResourceGpuFraction) + ", the GPUs and the share of each it qualifies");
    }
    return std::nullopt;
  };
  if (count == nullptr && memory == nullptr && fraction == nullptr) return none();
  if (memory != nullptr && fraction != nullptr) {
    return InvalidArgumentError(where + std::string(kResourceGpuMemory) + " and " +
                                std::string(kResourceGpuFraction) +
                                " are both given; ask for one of them per GPU");
  }
  if (ResourceValue(container, "nvidia.com/gpu") != nullptr) {
    return InvalidArgumentError(where +
                                "nvidia.com/gpu and gpufrac.io resources are both given; "
                                "ask for gpufrac.io/gpu only");
  }
  ContainerRequest r;
  r.container = name;
  uint64_t gpus = 0;
  if (count != nullptr) {
    GPUFRAC_ASSIGN_OR_RETURN(gpus, WholeQuantity(*count, where + std::string(kResourceGpu)));
  }
  if (gpus == 0 && memory == nullptr && fraction == nullptr) return none();  // "0": none.
  if (gpus == 0) {
    return InvalidArgumentError(
        where +
        (memory != nullptr ? std::string(kResourceGpuMemory) : std::string(kResourceGpuFraction)) +
        " needs " + std::string(kResourceGpu) +
        ": N, the number of GPUs it applies to (quotas count it)");
  }
  if (gpus > kMaxWholeGpus) {
    return InvalidArgumentError(where + std::string(kResourceGpu) + " is " + std::to_string(gpus) +
                                "; at most " + std::to_string(kMaxWholeGpus) + " GPUs");
  }
  r.request = GpuRequest::Whole(static_cast<uint32_t>(gpus));
  if (memory != nullptr) {
    std::string key = where + std::string(kResourceGpuMemory);
    GPUFRAC_ASSIGN_OR_RETURN(uint64_t mib, WholeQuantity(*memory, key));
    if (mib == 0 || mib > (uint64_t{1} << 30)) {
      return InvalidArgumentError(key + " is " + std::to_string(mib) +
                                  " MiB; give the memory per GPU in MiB, e.g. 4096");
    }
    r.request = GpuRequest::Memory(mib * kMiB, r.request.gpus);
  }
  if (fraction != nullptr) {
    std::string key = where + std::string(kResourceGpuFraction);
    GPUFRAC_ASSIGN_OR_RETURN(uint64_t milli, WholeQuantity(*fraction, key));
    if (milli == 0 || milli >= kMilliPerGpu) {
      return InvalidArgumentError(key + " is " + std::to_string(milli) +
                                  "; give thousandths of a GPU from 1 to 999 (250 is a quarter), "
                                  "or leave it out for whole GPUs");
    }
    r.request = GpuRequest::Fraction(static_cast<uint32_t>(milli), r.request.gpus);
  }
  return std::optional<ContainerRequest>(std::move(r));
}

// A share of a GPU's time written as the request grammar writes one ("0.3", "30%"), from the
// annotation `key`; the request (`limit` false) must be below 1, the limit at most 1.
StatusOr<uint32_t> ComputeAnnotation(const std::string& text, std::string_view key, bool limit) {
  StatusOr<double> share = ParseFraction(text, /*allow_one=*/true);
  if (!share.ok()) return share.status().WithContext("annotation " + std::string(key));
  const uint32_t milli = FractionToMilli(*share);
  if (!limit && milli >= kMilliPerGpu) {
    return InvalidArgumentError("annotation " + std::string(key) + " is \"" + text +
                                "\": all of the GPU's time is a whole GPU; ask for " +
                                std::string(kResourceGpu) + " alone");
  }
  return milli;
}

// The pod's compute settings (annotations) and the container's own compute resource, applied to
// a container's request once its amount is known. Only a share of a GPU (memory or fraction, not
// on a MIG profile) has a compute setting: whole GPUs and MIG instances have their own.
struct ComputeAnnotations {
  std::optional<uint32_t> request_milli;
  std::optional<uint32_t> limit_milli;
};

StatusOr<ComputeAnnotations> ReadComputeAnnotations(const json& pod) {
  ComputeAnnotations out;
  if (std::string text = Annotation(pod, kAnnotationGpuCompute); !text.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(out.request_milli,
                             ComputeAnnotation(text, kAnnotationGpuCompute, /*limit=*/false));
  }
  if (std::string text = Annotation(pod, kAnnotationGpuComputeLimit); !text.empty()) {
    GPUFRAC_ASSIGN_OR_RETURN(out.limit_milli,
                             ComputeAnnotation(text, kAnnotationGpuComputeLimit, /*limit=*/true));
  }
  return out;
}

Status ApplyCompute(const json& container, const ComputeAnnotations& pod, ContainerRequest& r) {
  const std::string where = "container " + r.container + ": ";
  std::optional<uint32_t> request = pod.request_milli;
  if (const json* value = ResourceValue(container, kResourceGpuCompute)) {
    const std::string key = where + std::string(kResourceGpuCompute);
    if (pod.request_milli) {
      return InvalidArgumentError(key + " and the annotation " +
                                  std::string(kAnnotationGpuCompute) +
                                  " are both given; keep one of them");
    }
    GPUFRAC_ASSIGN_OR_RETURN(uint64_t milli, WholeQuantity(*value, key));
    if (milli == 0 || milli >= kMilliPerGpu) {
      return InvalidArgumentError(key + " is " + std::to_string(milli) +
                                  "; give thousandths of the GPU's time from 1 to 999 (300 is "
                                  "30%), or leave it out for the memory's share");
    }
    request = static_cast<uint32_t>(milli);
  }
  if (!request && !pod.limit_milli) return OkStatus();
  const bool shared =
      r.request.kind == GpuRequest::Kind::kMemory || r.request.kind == GpuRequest::Kind::kFraction;
  if (!shared) {
    const std::string what =
        request ? std::string(kResourceGpuCompute) : std::string(kAnnotationGpuComputeLimit);
    return InvalidArgumentError(where + what + " is for a share of a GPU (" +
                                std::string(kResourceGpuMemory) + " or " +
                                std::string(kResourceGpuFraction) + "); " +
                                (r.request.kind == GpuRequest::Kind::kMigProfile
                                     ? "a MIG instance has its own compute slices"
                                     : "whole GPUs have all of their compute"));
  }
  if (request && pod.limit_milli && *pod.limit_milli < *request) {
    return InvalidArgumentError(where + std::string(kAnnotationGpuComputeLimit) + " " +
                                FormatMilli(*pod.limit_milli) + " is below its compute request " +
                                FormatMilli(*request) +
                                "; the limit is the most it may take, at least what it is "
                                "guaranteed");
  }
  r.request.compute_milli = request;
  r.request.compute_limit_milli = pod.limit_milli;
  return OkStatus();
}

// KAI/Run:ai's pod annotations, for the container they name (default: the first).
StatusOr<std::optional<ContainerRequest>> FromKaiAnnotations(const json& pod,
                                                             const json& containers) {
  std::string fraction = Annotation(pod, kKaiGpuFraction);
  std::string memory = Annotation(pod, kKaiGpuMemory);
  if (fraction.empty() && memory.empty()) return std::nullopt;
  if (!fraction.empty() && !memory.empty()) {
    return InvalidArgumentError(
        "annotations gpu-fraction and gpu-memory are both given; "
        "keep one of them");
  }
  std::string target = Annotation(pod, kKaiContainerName);
  const json* chosen = nullptr;
  for (size_t i = 0; i < containers.size(); ++i) {
    if (target.empty() || ContainerName(containers[i], i) == target) {
      chosen = &containers[i];
      break;
    }
  }
  if (chosen == nullptr) {
    return InvalidArgumentError("annotation gpu-fraction-container-name names container \"" +
                                target + "\", which the pod does not have");
  }
  ContainerRequest r;
  r.container = ContainerName(*chosen, chosen - &containers[0]);
  r.from_annotations = true;
  // gpufrac.io/gpu may come with them: it routes the container through gpufrac's device
  // plugin (so it gets the limiter) and counts in quotas; the annotations give the amount.
  if (ResourceValue(*chosen, kResourceGpuMemory) != nullptr ||
      ResourceValue(*chosen, kResourceGpuFraction) != nullptr) {
    return InvalidArgumentError("container " + r.container +
                                ": KAI/Run:ai annotations and gpufrac.io/gpu-memory or "
                                "gpu-fraction are both given; keep the gpufrac.io resources");
  }
  uint32_t gpus = 1;
  r.device_plugin = ResourceValue(*chosen, kResourceGpu) != nullptr;
  if (const json* count = ResourceValue(*chosen, kResourceGpu)) {
    GPUFRAC_ASSIGN_OR_RETURN(uint64_t n, WholeQuantity(*count, "container " + r.container + ": " +
                                                                   std::string(kResourceGpu)));
    if (n == 0 || n > kMaxWholeGpus) {
      return InvalidArgumentError("container " + r.container + ": " + std::string(kResourceGpu) +
                                  " is " + std::to_string(n) + "; give 1 to " +
                                  std::to_string(kMaxWholeGpus));
    }
    gpus = static_cast<uint32_t>(n);
  }
  std::string devices = Annotation(pod, kKaiFractionDevices);
  if (!devices.empty()) {
    StatusOr<uint64_t> n = WholeQuantity(json(devices), "annotation gpu-fraction-num-devices");
    if (!n.ok()) return n.status();
    if (*n == 0 || *n > kMaxWholeGpus) {
      return InvalidArgumentError("annotation gpu-fraction-num-devices is " + devices +
                                  "; give 1 to " + std::to_string(kMaxWholeGpus));
    }
    if (ResourceValue(*chosen, kResourceGpu) != nullptr && *n != gpus) {
      return InvalidArgumentError("annotation gpu-fraction-num-devices is " + devices + " but " +
                                  std::string(kResourceGpu) + " is " + std::to_string(gpus) +
                                  "; make them equal");
    }
    gpus = static_cast<uint32_t>(*n);
  }
  if (!fraction.empty()) {
    StatusOr<double> f = ParseFraction(fraction, /*allow_one=*/false);
    if (!f.ok()) return f.status().WithContext("annotation gpu-fraction");
    r.request = GpuRequest::Fraction(FractionToMilli(*f), gpus);
  } else {
    StatusOr<uint64_t> mib = WholeQuantity(json(memory), "annotation gpu-memory");
    if (!mib.ok()) return mib.status();
    if (*mib == 0 || *mib > (uint64_t{1} << 30)) {
      return InvalidArgumentError("annotation gpu-memory is " + memory +
                                  "; give the memory per GPU in MiB, e.g. 4096");
    }
    r.request = GpuRequest::Memory(*mib * kMiB, gpus);
  }
  return std::optional<ContainerRequest>(std::move(r));
}

// Only regular containers may ask for gpufrac.io resources.
Status CheckInitContainers(const json* spec) {
  const json* init = spec ? Find(*spec, "initContainers") : nullptr;
  if (init == nullptr || !init->is_array()) return OkStatus();
  for (size_t i = 0; i < init->size(); ++i) {
    if (AsksForGpufrac((*init)[i])) {
      return InvalidArgumentError("init container " + ContainerName((*init)[i], i) +
                                  " asks for gpufrac.io resources; only regular containers "
                                  "may (move the GPU work into one)");
    }
  }
  return OkStatus();
}

// The pod's MIG profile annotation, when it has one, turns each container's one whole GPU into
// an instance of that profile.
Status ApplyMigProfile(const json& pod, std::vector<ContainerRequest>* containers) {
  std::string profile = Annotation(pod, kAnnotationMigProfile);
  if (profile.empty()) return OkStatus();
  GpuRequestText text;
  text.mig_profile = profile;
  StatusOr<GpuRequest> parsed = ParseGpuRequest(text);
  if (!parsed.ok()) {
    return InvalidArgumentError("annotation " + std::string(kAnnotationMigProfile) + " is \"" +
                                profile + "\"; write a profile name such as 1g.10gb or 2g.20gb");
  }
  if (containers->empty()) {
    return InvalidArgumentError("annotation " + std::string(kAnnotationMigProfile) +
                                " needs a container with " + std::string(kResourceGpu) + ": 1");
  }
  for (ContainerRequest& r : *containers) {
    if (r.request.kind != GpuRequest::Kind::kWholeGpus || r.from_annotations) {
      return InvalidArgumentError("container " + r.container + ": annotation " +
                                  std::string(kAnnotationMigProfile) +
                                  " and a GPU memory or fraction are both given; a MIG "
                                  "instance has its own memory, keep one of them");
    }
    if (r.request.gpus != 1) {
      return InvalidArgumentError("container " + r.container + ": annotation " +
                                  std::string(kAnnotationMigProfile) + " gives one instance, but " +
                                  std::string(kResourceGpu) + " is " +
                                  std::to_string(r.request.gpus) + "; set it to 1");
    }
    r.request = *parsed;
  }
  return OkStatus();
}

}  // namespace

StatusOr<PodRequest> ParsePodRequest(const json& pod) {
  if (!pod.is_object()) return InvalidArgumentError("the pod is not a JSON object");
  const json* spec = Find(pod, "spec");
  static const json kNone = json::array();
  const json* containers = spec ? Find(*spec, "containers") : nullptr;
  if (containers == nullptr || !containers->is_array()) containers = &kNone;
  GPUFRAC_RETURN_IF_ERROR(CheckInitContainers(spec));

  GPUFRAC_ASSIGN_OR_RETURN(std::optional<ContainerRequest> kai,
                           FromKaiAnnotations(pod, *containers));
  PodRequest out;
  std::vector<const json*> sources;  // The container each of out.containers was read from.
  for (size_t i = 0; i < containers->size(); ++i) {
    const json& c = (*containers)[i];
    std::string name = ContainerName(c, i);
    if (kai && kai->container == name) {
      out.containers.push_back(std::move(*kai));
      sources.push_back(&c);
      kai.reset();
      continue;
    }
    GPUFRAC_ASSIGN_OR_RETURN(std::optional<ContainerRequest> r, FromResources(c, name));
    if (r) {
      out.containers.push_back(std::move(*r));
      sources.push_back(&c);
    }
  }

  GPUFRAC_RETURN_IF_ERROR(ApplyMigProfile(pod, &out.containers));
  GPUFRAC_ASSIGN_OR_RETURN(ComputeAnnotations compute, ReadComputeAnnotations(pod));
  if (out.containers.empty() && (compute.request_milli || compute.limit_milli)) {
    return InvalidArgumentError(
        "annotation " +
        std::string(compute.request_milli ? kAnnotationGpuCompute : kAnnotationGpuComputeLimit) +
        " needs a container with " + std::string(kResourceGpu) + " and " +
        std::string(kResourceGpuMemory) + " or " + std::string(kResourceGpuFraction));
  }
  for (size_t i = 0; i < out.containers.size(); ++i) {
    GPUFRAC_RETURN_IF_ERROR(ApplyCompute(*sources[i], compute, out.containers[i]));
    out.containers[i].run_as = RunAsKey(pod, *sources[i]);
  }
  std::string model = Annotation(pod, kAnnotationGpuModel);
  for (ContainerRequest& r : out.containers) r.request.gpu_model = model;
  if (!out.empty()) out.unenforced = UnenforcedReason(pod);
  return out;
}

std::string UnenforcedMessage(const std::string& reason) {
  return reason +
         ", with which it can get past gpufrac's limiter and limit file: it may not share a GPU "
         "(allow it with the namespace label " +
         std::string(kLabelAllowUnenforced) + "=true; it may have a whole GPU or a MIG instance)";
}

namespace {

// The capabilities Pod Security's baseline level lets a container add: none of them reaches a
// mount, a device, the kernel or another process's memory.
bool BaselineCapability(std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (name.starts_with("CAP_")) name.erase(0, 4);
  static constexpr std::string_view kAllowed[] = {
      "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER",  "FSETID", "KILL",      "MKNOD",
      "NET_BIND_SERVICE", "SETFCAP", "SETGID",       "SETPCAP", "SETUID", "SYS_CHROOT"};
  for (std::string_view allowed : kAllowed) {
    if (name == allowed) return true;
  }
  return false;
}

// The profile type (`key` "seccompProfile" or "appArmorProfile") of a securityContext, or "".
std::string ProfileType(const json* context, std::string_view key) {
  const json* profile = context ? Find(*context, key) : nullptr;
  const json* type = profile ? Find(*profile, "type") : nullptr;
  return type != nullptr && type->is_string() ? type->get<std::string>() : "";
}

// A boolean of a container's securityContext `context`, else (with `pod_level`) of the pod's.
std::optional<bool> ContextFlag(const json* context, const json* pod_context, std::string_view key,
                                bool pod_level) {
  for (const json* c : {context, pod_level ? pod_context : nullptr}) {
    const json* v = c ? Find(*c, key) : nullptr;
    if (v != nullptr && v->is_boolean()) return v->get<bool>();
  }
  return std::nullopt;
}

bool RunsAsNonRoot(const json* context, const json* pod_context) {
  for (const json* c : {context, pod_context}) {
    const json* uid = c ? Find(*c, "runAsUser") : nullptr;
    if (uid != nullptr && uid->is_number_integer()) return uid->get<int64_t>() != 0;
  }
  return ContextFlag(context, pod_context, "runAsNonRoot", true).value_or(false);
}

// What of the pod's own spec lets it past the limiter (host namespaces, hostPath), or "".
std::string PodSpecUnenforcedReason(const json& spec) {
  for (const char* field : {"hostPID", "hostIPC"}) {
    const json* v = Find(spec, field);
    if (v != nullptr && v->is_boolean() && v->get<bool>())
      return std::string("the pod sets spec.") + field;
  }
  if (const json* volumes = Find(spec, "volumes"); volumes != nullptr && volumes->is_array()) {
    for (size_t i = 0; i < volumes->size(); ++i) {
      const json& volume = (*volumes)[i];
      const json* host_path = Find(volume, "hostPath");
      if (host_path == nullptr) continue;
      const json* path = host_path->is_object() ? Find(*host_path, "path") : nullptr;
      return "volume \"" + Printable(ContainerName(volume, i)) + "\" of the pod is hostPath " +
             Printable(path != nullptr && path->is_string() ? path->get<std::string>() : "");
    }
  }
  return "";
}

// What lets container `c` (called `who` in the reason) past the limiter, or "".
std::string ContainerUnenforcedReason(const json& pod, const json* pod_context, const json& c,
                                      const std::string& name, const std::string& who) {
  const json* context = Find(c, "securityContext");
  if (ContextFlag(context, pod_context, "privileged", false).value_or(false)) {
    return who + " is privileged";
  }
  const json* proc_mount = context ? Find(*context, "procMount") : nullptr;
  if (proc_mount != nullptr && proc_mount->is_string() &&
      proc_mount->get<std::string>() == "Unmasked") {
    return who + " sets securityContext.procMount Unmasked";
  }
  // Without seccomp, `unshare -Urm` gives any user a mount namespace of its own, where a
  // bind mount covers /etc/ld.so.preload; AppArmor's default profile refuses that mount.
  std::string seccomp = ProfileType(context, "seccompProfile");
  if (seccomp == "Unconfined") return who + " sets securityContext.seccompProfile Unconfined";
  if (seccomp.empty() && ProfileType(pod_context, "seccompProfile") == "Unconfined") {
    return "the pod sets securityContext.seccompProfile Unconfined (for " + who + ")";
  }
  std::string apparmor = ProfileType(context, "appArmorProfile");
  if (apparmor == "Unconfined") return who + " sets securityContext.appArmorProfile Unconfined";
  const std::string annotation = "container.apparmor.security.beta.kubernetes.io/" + name;
  if (Annotation(pod, annotation) == "unconfined") {
    return "the pod's annotation " + Printable(annotation) + " is unconfined";
  }
  if (apparmor.empty() && ProfileType(pod_context, "appArmorProfile") == "Unconfined") {
    return "the pod sets securityContext.appArmorProfile Unconfined (for " + who + ")";
  }
  const json* caps = context ? Find(*context, "capabilities") : nullptr;
  const json* add = caps ? Find(*caps, "add") : nullptr;
  if (add == nullptr || !add->is_array()) return "";
  for (const json& cap : *add) {
    if (!cap.is_string() || BaselineCapability(cap.get<std::string>())) continue;
    // A capability outside the baseline that a non-root process under no_new_privs can
    // never hold.
    if (ContextFlag(context, pod_context, "allowPrivilegeEscalation", false) == false &&
        RunsAsNonRoot(context, pod_context)) {
      continue;
    }
    return who + " adds capability " + Printable(cap.get<std::string>());
  }
  return "";
}

}  // namespace

std::string UnenforcedReason(const json& pod) {
  const json* spec = Find(pod, "spec");
  if (spec == nullptr) return "";
  if (std::string reason = PodSpecUnenforcedReason(*spec); !reason.empty()) return reason;
  const json* pod_context = Find(*spec, "securityContext");
  // Ephemeral containers are added after scheduling, but a pod read later may hold them.
  constexpr std::pair<const char*, const char*> kLists[] = {
      {"initContainers", "init container"},
      {"containers", "container"},
      {"ephemeralContainers", "ephemeral container"}};
  for (const auto& [list, kind] : kLists) {
    const json* containers = Find(*spec, list);
    if (containers == nullptr || !containers->is_array()) continue;
    for (size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      const std::string name = ContainerName(c, i);
      const std::string who = std::string(kind) + " \"" + Printable(name) + "\"";
      std::string reason = ContainerUnenforcedReason(pod, pod_context, c, name, who);
      if (!reason.empty()) return reason;
    }
  }
  return "";
}

std::string RunAsKey(const json& pod, const json& container) {
  const json* spec = Find(pod, "spec");
  const json* host_users = spec ? Find(*spec, "hostUsers") : nullptr;
  if (host_users != nullptr && host_users->is_boolean() && !host_users->get<bool>()) {
    return "user namespace of pod " + PodKey(pod);
  }
  auto run_as_user = [](const json* owner) -> const json* {
    const json* context = owner ? Find(*owner, "securityContext") : nullptr;
    const json* uid = context ? Find(*context, "runAsUser") : nullptr;
    return uid != nullptr && uid->is_number_integer() ? uid : nullptr;
  };
  const json* uid = run_as_user(&container);
  if (uid == nullptr) uid = run_as_user(spec);
  if (uid != nullptr) return "uid " + std::to_string(uid->get<int64_t>());
  const json* image = Find(container, "image");
  return "image " + (image != nullptr && image->is_string() ? image->get<std::string>() : "");
}

std::string DescribeRequest(const ContainerRequest& c) {
  const GpuRequest& r = c.request;
  auto key = [](std::string_view k) { return std::string(k) + ": "; };
  // An amount in MiB as the resource counts it; bytes that are no whole MiB (never from a
  // resource) as a size.
  auto mib = [](uint64_t bytes) {
    return bytes % kMiB == 0 ? std::to_string(bytes / kMiB) + " MiB" : FormatSize(bytes);
  };
  std::string s;
  if (c.from_annotations) {
    // KAI / Run:ai's annotations: a fraction, or MiB, and the count only when more than one.
    s = r.kind == GpuRequest::Kind::kMemory ? key(kKaiGpuMemory) + mib(r.memory_bytes)
                                            : key(kKaiGpuFraction) + FormatMilli(r.fraction_milli);
    if (r.gpus > 1) s += ", " + key(kKaiFractionDevices) + std::to_string(r.gpus);
  } else {
    s = key(kResourceGpu) + std::to_string(r.gpus);
    if (r.kind == GpuRequest::Kind::kMemory)
      s += ", " + key(kResourceGpuMemory) + mib(r.memory_bytes);
    if (r.kind == GpuRequest::Kind::kFraction) {
      s += ", " + key(kResourceGpuFraction) + std::to_string(r.fraction_milli);
    }
    if (r.kind == GpuRequest::Kind::kMigProfile)
      s += ", " + key(kAnnotationMigProfile) + r.mig_profile;
  }
  if (r.compute_milli) s += ", " + key(kAnnotationGpuCompute) + FormatMilli(*r.compute_milli);
  if (r.compute_limit_milli) {
    s += ", " + key(kAnnotationGpuComputeLimit) + FormatMilli(*r.compute_limit_milli);
  }
  if (!r.gpu_model.empty()) s += ", " + key(kAnnotationGpuModel) + r.gpu_model;
  return s;
}

}  // namespace gpufrac::k8s
