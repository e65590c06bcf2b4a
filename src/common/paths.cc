// gpufrac's own file locations (see paths.h).
#include "common/paths.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

namespace gpufrac {
namespace {

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : "";
}

}  // namespace

std::string ExecutableDir() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return ".";
  std::string path(exe, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

std::string LimiterLibraryPath() {
  if (std::string env = Env("GPUFRAC_LIBRARY"); !env.empty()) return env;
  return ExecutableDir() + "/../lib/libgpufrac.so";
}

std::string SimgpuDir() {
  if (std::string env = Env("GPUFRAC_SIMGPU_DIR"); !env.empty()) return env;
  return ExecutableDir() + "/../lib/simgpu";
}

std::string SiblingProgram(const std::string& name) { return ExecutableDir() + "/" + name; }

std::string StateDirTag(const std::string& state_dir) {
  char tag[9];
  std::snprintf(tag, sizeof(tag), "%08x",
                static_cast<unsigned>(std::hash<std::string>{}(state_dir)));
  return tag;
}

}  // namespace gpufrac
