// Creates, joins, empties and removes a workload's cgroup (see cgroup.h).
#include "launch/cgroup.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/posix.h"

namespace gpufrac::launch {
namespace {

constexpr char kParent[] = "gpufrac";

// The mount point of the v1 hierarchy holding `controller`, or of cgroup v2 where `controller`
// is empty.
std::string MountPoint(const std::string& controller) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type, source, options;
    tail >> type >> source >> options;
    if (controller.empty() && type == "cgroup2") return point;
    if (!controller.empty() && type == "cgroup" &&
        ("," + options + ",").find("," + controller + ",") != std::string::npos) {
      return point;
    }
  }
  return "";
}

std::string MountPoint(WorkloadCgroup::Kind kind) {
  return MountPoint(kind == WorkloadCgroup::Kind::kDevicesV1 ? "devices" : "");
}

Status WriteText(const std::string& path, const std::string& text) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("cannot open " + path, errno);
  const ssize_t n = write(fd.get(), text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoStatus("cannot write '" + text + "' to " + path, n < 0 ? errno : EIO);
  }
  return OkStatus();
}

// Where a cgroup in the v1 devices hierarchy is frozen: its namesake in the v1 freezer
// hierarchy ("" where none is mounted, or where the freezer shares the devices controller's
// hierarchy: the cgroup freezes itself there, as a cgroup v2 does with cgroup.freeze).
std::string FreezerTwin(const std::string& dir) {
  const std::string mount = MountPoint("freezer");
  if (mount.empty() || mount == MountPoint("devices")) return "";
  return mount + "/" + kParent + "/" + dir.substr(dir.rfind('/') + 1);
}

// Whether the cgroup at `dir` has a freezer of its own (v1 with the freezer beside devices).
bool FreezesItself(const std::string& dir) {
  struct stat st;
  return stat((dir + "/freezer.state").c_str(), &st) == 0;
}

bool IsUnified(const std::string& dir) {
  struct stat st;
  return stat((dir + "/cgroup.freeze").c_str(), &st) == 0;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 63 || name == "." || name == "..") return false;
  for (char c : name) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn insn{};
  insn.code = code;
  insn.dst_reg = dst & 0xf;
  insn.src_reg = src & 0xf;
  insn.off = off;
  insn.imm = imm;
  return insn;
}

// A BPF device program refusing every access to the character devices `denied` and allowing
// everything else, attached to the cgroup open as `dir_fd`.
Status AttachDeviceProgram(int dir_fd, const std::vector<DeviceNode>& denied) {
  // The context (struct bpf_cgroup_dev_ctx): access_type (access << 16 | type), major, minor.
  std::vector<bpf_insn> program = {
      Insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, 0, 0),
      Insn(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff),
      Insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_3, BPF_REG_1, 4, 0),
      Insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_4, BPF_REG_1, 8, 0),
      // Not a character device: allowed.
      Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, static_cast<int16_t>(4 * denied.size()),
           BPF_DEVCG_DEV_CHAR),
  };
  for (const DeviceNode& node : denied) {
    program.push_back(
        Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, 3, static_cast<int32_t>(node.major)));
    program.push_back(
        Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, 2, static_cast<int32_t>(node.minor)));
    program.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
    program.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  program.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
  program.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));

  static const char kLicense[] = "Apache-2.0";
  bpf_attr load{};
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uint64_t>(program.data());
  load.insn_cnt = static_cast<uint32_t>(program.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  // Closed when we return: attached, it stays with the cgroup.
  UniqueFd prog(static_cast<int>(syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof(load))));
  if (!prog.valid()) return ErrnoStatus("cannot load the device program", errno);
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(dir_fd);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog.get());
  attach.attach_type = BPF_CGROUP_DEVICE;
  if (syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof(attach)) != 0) {
    return ErrnoStatus("cannot attach the device program", errno);
  }
  return OkStatus();
}

}  // namespace

std::optional<WorkloadCgroup::Kind> WorkloadCgroup::Available() {
  if (geteuid() != 0) return std::nullopt;
  for (Kind kind : {Kind::kDevicesV1, Kind::kUnifiedV2}) {
    if (!MountPoint(kind).empty()) return kind;
  }
  return std::nullopt;
}

StatusOr<WorkloadCgroup> WorkloadCgroup::Create(Kind kind, const std::string& name,
                                                const std::vector<DeviceNode>& denied) {
  if (!ValidName(name)) return InvalidArgumentError("'" + name + "' cannot name a cgroup");
  const std::string mount = MountPoint(kind);
  if (mount.empty()) {
    return UnavailableError(kind == Kind::kDevicesV1 ? "no cgroup v1 devices controller is mounted"
                                                     : "no cgroup v2 hierarchy is mounted");
  }
  const std::string parent = mount + "/" + kParent;
  if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("cannot create the cgroup " + parent, errno);
  }
  WorkloadCgroup cgroup(parent + "/" + name);
  rmdir(cgroup.dir_.c_str());  // An empty leftover of an earlier attempt.
  if (mkdir(cgroup.dir_.c_str(), 0755) != 0) {
    return ErrnoStatus("cannot create the cgroup " + cgroup.dir_, errno);
  }
  Status denying = OkStatus();
  if (kind == Kind::kDevicesV1) {
    for (const DeviceNode& node : denied) {
      denying = WriteText(cgroup.dir_ + "/devices.deny", "c " + std::to_string(node.major) + ":" +
                                                             std::to_string(node.minor) + " rwm");
      if (!denying.ok()) break;
    }
  } else if (!denied.empty()) {
    UniqueFd fd(open(cgroup.dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    denying = fd.valid() ? AttachDeviceProgram(fd.get(), denied)
                         : ErrnoStatus("cannot open the cgroup " + cgroup.dir_, errno);
  }
  if (denying.ok() && kind == Kind::kDevicesV1) {
    if (const std::string twin = FreezerTwin(cgroup.dir_); !twin.empty()) {
      const std::string twin_parent = twin.substr(0, twin.rfind('/'));
      if (mkdir(twin_parent.c_str(), 0755) != 0 && errno != EEXIST) {
        denying = ErrnoStatus("cannot create the cgroup " + twin_parent, errno);
      } else {
        rmdir(twin.c_str());
        if (mkdir(twin.c_str(), 0755) != 0) {
          denying = ErrnoStatus("cannot create the cgroup " + twin, errno);
        }
      }
    }
  }
  if (!denying.ok()) {
    rmdir(cgroup.dir_.c_str());
    return denying;
  }
  return cgroup;
}

std::optional<WorkloadCgroup> WorkloadCgroup::Find(const std::string& name) {
  if (!ValidName(name)) return std::nullopt;
  for (Kind kind : {Kind::kDevicesV1, Kind::kUnifiedV2}) {
    const std::string mount = MountPoint(kind);
    if (mount.empty()) continue;
    std::string dir = mount + "/" + kParent + "/" + name;
    struct stat st;
    if (lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return WorkloadCgroup(dir);
  }
  return std::nullopt;
}

WorkloadCgroup WorkloadCgroup::At(std::string dir) { return WorkloadCgroup(std::move(dir)); }

std::vector<std::string> WorkloadCgroup::ProcsFiles() const {
  std::vector<std::string> files = {dir_ + "/cgroup.procs"};
  if (IsUnified(dir_)) return files;
  const std::string twin = FreezerTwin(dir_);
  struct stat st;
  if (!twin.empty() && stat(twin.c_str(), &st) == 0) files.push_back(twin + "/cgroup.procs");
  return files;
}

Status WorkloadCgroup::Join(pid_t pid) const {
  for (const std::string& procs : ProcsFiles()) {
    GPUFRAC_RETURN_IF_ERROR(WriteText(procs, std::to_string(pid)));
  }
  return OkStatus();
}

Status WorkloadCgroup::Freeze(bool frozen) const {
  if (IsUnified(dir_)) return WriteText(dir_ + "/cgroup.freeze", frozen ? "1" : "0");
  if (FreezesItself(dir_)) return WriteText(dir_ + "/freezer.state", frozen ? "FROZEN" : "THAWED");
  const std::string twin = FreezerTwin(dir_);
  if (twin.empty()) return UnavailableError("no cgroup v1 freezer controller is mounted");
  return WriteText(twin + "/freezer.state", frozen ? "FROZEN" : "THAWED");
}

std::vector<pid_t> WorkloadCgroup::Members() const {
  std::vector<pid_t> pids;
  std::ifstream in(dir_ + "/cgroup.procs");
  for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

bool WorkloadCgroup::KillAll(std::chrono::milliseconds wait) const {
  // cgroup v2 kills them all at once, forks in flight included; v1 is emptied by rounds, thawed
  // first (a frozen v1 task does not act on SIGKILL until it is thawed).
  (void)Freeze(false);
  (void)WriteText(dir_ + "/cgroup.kill", "1");
  auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    std::vector<pid_t> pids = Members();
    if (pids.empty()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    for (pid_t pid : pids) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool WorkloadCgroup::Remove() const {
  // A killed process leaves cgroup.procs before the kernel has finished its exit, and until then
  // the directory is busy: a short wait for that, never for a process that is still a member.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  const std::string twin = IsUnified(dir_) ? "" : FreezerTwin(dir_);
  for (;;) {
    if (rmdir(dir_.c_str()) == 0 || errno == ENOENT) {
      // Its twin empties with it: the same processes, whose exits the kernel has finished.
      const auto twin_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (!twin.empty() && rmdir(twin.c_str()) != 0 && errno != ENOENT) {
        if (errno != EBUSY || std::chrono::steady_clock::now() >= twin_deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      return true;
    }
    if (errno != EBUSY || !Members().empty() || std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace gpufrac::launch
