// The NVIDIA driver's capability device nodes, /dev/nvidia-caps/nvidia-cap<minor>. Where the
// driver makes capabilities device files (the nvidia module's nv_cap_enable_devfs), opening the
// node of a MIG instance's capability is what lets a process use that instance, and the "config"
// and "monitor" nodes let it create/destroy instances or see all of them. The driver lists every
// capability it can make in /proc/driver/nvidia-caps/mig-minors, one "<name> <minor>" per line
// ("config 1", "monitor 2", "gpu0/gi1/access 5", "gpu0/gi1/ci0/access 6"; gpu<N> is the GPU's
// device minor), and the nodes' character major is the line "<major> nvidia-caps" of
// /proc/devices.
#pragma once

#include <map>
#include <string>

namespace gpufrac::machine {

struct NvidiaCaps {
  int major = -1;                          // -1: the driver has no capability nodes
  std::map<std::string, unsigned> minors;  // capability name -> device minor
  friend bool operator==(const NvidiaCaps&, const NvidiaCaps&) = default;
};

// Reads both files under `proc_root` (/proc on a host). Missing or unreadable files give an
// empty table (no NVIDIA driver, or one without capability nodes); malformed lines are skipped.
NvidiaCaps ReadNvidiaCaps(const std::string& proc_root = "/proc");

}  // namespace gpufrac::machine
