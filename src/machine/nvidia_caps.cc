#include "machine/nvidia_caps.h"

#include <fstream>
#include <sstream>

namespace gpufrac::machine {
namespace {

// The major of character device `name` in /proc/devices ("Character devices:" then "<major>
// <name>" lines, then "Block devices:"); -1 when absent.
int CharacterMajor(const std::string& devices_path, const std::string& name) {
  std::ifstream in(devices_path);
  std::string line;
  bool in_characters = false;
  while (std::getline(in, line)) {
    if (line == "Character devices:") {
      in_characters = true;
      continue;
    }
    if (line == "Block devices:") break;
    std::istringstream fields(line);
    int major = -1;
    std::string device;
    if (in_characters && fields >> major >> device && device == name && major >= 0) return major;
  }
  return -1;
}

}  // namespace

NvidiaCaps ReadNvidiaCaps(const std::string& proc_root) {
  NvidiaCaps caps;
  caps.major = CharacterMajor(proc_root + "/devices", "nvidia-caps");
  if (caps.major < 0) return caps;
  std::ifstream in(proc_root + "/driver/nvidia-caps/mig-minors");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    long long minor = -1;
    std::string rest;
    if (fields >> name >> minor && !(fields >> rest) && minor >= 0 && minor < (1 << 20)) {
      caps.minors[name] = static_cast<unsigned>(minor);
    }
  }
  return caps;
}

}  // namespace gpufrac::machine
